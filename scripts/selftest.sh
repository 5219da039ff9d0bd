#!/usr/bin/env bash
# The project's own tests (the README's test command): pytest over test/, in parallel.
ndv_with_actionlint=1  # test_workflows.py runs it
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$root"
exec "$python" -m pytest -n "${NDV_TEST_JOBS:-auto}" "$@"
