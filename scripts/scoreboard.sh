#!/usr/bin/env bash
# The semantics scoreboard, stock vs the stack side by side (see `scoreboard.sh --help`, test/semantics/).
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
NDV_ENTRY=scoreboard.sh exec "$python" "$root/test/semantics/scoreboard.py" "$@"
