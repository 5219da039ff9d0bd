#!/usr/bin/env bash
# The relevant upstream tests, stock vs patched (see `test.sh --help`). Today: the test
# files the stack adds, run against stock torch and the overlay.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
exec "$python" -m ndvstack test "$@"
