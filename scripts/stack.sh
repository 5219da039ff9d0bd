#!/usr/bin/env bash
# The stack tool: status, lint, apply, export (see --help).
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
exec "$python" -m ndvstack "$@"
