#!/usr/bin/env bash
# The semantics scoreboard, stock vs the stack side by side (see test/semantics/).
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
exec "$python" "$root/test/semantics/scoreboard.py" --ab "$@"
