#!/usr/bin/env bash
# The stack's own tests, and with --select the upstream tests that cover it, stock vs patched, on
# upstream's test files (--upstream-tests DIR or $NDV_UPSTREAM_TESTS) with the series' test hunks
# applied to a copy (see `test.sh --help`); with --pytorch DIR from that checkout.
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
NDV_ENTRY=test.sh exec "$python" -m ndvstack test "$@"
