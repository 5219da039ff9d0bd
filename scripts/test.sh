#!/usr/bin/env bash
# The upstream tests that cover the stack, stock vs patched (see `test.sh --help`): with
# --pytorch DIR from that checkout, without it the test files the stack adds.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
exec "$python" -m ndvstack test "$@"
