#!/usr/bin/env bash
# The project's own tests (the README's test command): pytest over test/, in parallel.
# Everything the run writes to temporary folders (pytest's, the fresh venvs of the wheel tests,
# inductor's precompiled headers, which ignore TORCHINDUCTOR_CACHE_DIR) goes into one folder of
# its own, removed when the run ends: a machine that runs it again and again keeps nothing.
ndv_with_actionlint=1  # test_workflows.py runs it
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$root"
# The whole suite needs about 6.4 GiB at its peak (measured 2026-12-02); refuse at once on a
# fuller disk rather than fail later with "No space left on device" in whichever test was unlucky.
need_gib=8
free_gib=$(( $(df -Pk "${TMPDIR:-/tmp}" | awk 'NR == 2 {print $4}') / 1048576 ))
if [[ $# -eq 0 && $free_gib -lt $need_gib ]]; then
  echo "error: selftest.sh needs $need_gib GiB free in ${TMPDIR:-/tmp} (the whole suite); it has $free_gib GiB" >&2
  exit 2
fi
run_tmp=$(mktemp -d "${TMPDIR:-/tmp}/ndv-selftest.XXXXXX")
trap 'rm -rf "$run_tmp"' EXIT
export TMPDIR="$run_tmp"
"$python" -m pytest -n "${NDV_TEST_JOBS:-auto}" "$@"
