#!/usr/bin/env bash
# The differential corpus, stock vs the stack (see `differential.sh --help`, test/differential/).
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
NDV_ENTRY=differential.sh exec "$python" "$root/test/differential/differential.py" "$@"
