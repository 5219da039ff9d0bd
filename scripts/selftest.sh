#!/usr/bin/env bash
# The project's own tests (the README's test command): pytest over test/, in parallel (see
# `selftest.sh --help`). Everything the run writes to temporary folders (pytest's, the fresh
# venvs of the wheel tests, inductor's precompiled headers, which ignore TORCHINDUCTOR_CACHE_DIR)
# goes into one folder of its own, removed when the run ends: a machine that runs it again and
# again keeps nothing.
ndv_with_actionlint=1  # test_workflows.py runs it
source "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$root"
# --quick: the unit tests that use test doubles only (fake pytorch trees, stacks and build tools,
# ghstack's fake GitHub): no wheel build, no fresh venv, no compile against torch.
quick=(test/test_apply.py test/test_basetree.py test/test_build.py test/test_cli.py test/test_export.py
       test/test_lint.py test/test_progress.py test/test_status.py test/test_submit.py test/test_workflows.py
       test/differential/test_differential.py
       --deselect test/test_cli.py::test_first_use_creates_the_venv_with_the_pins_and_reuses_it)
case "${1:-}" in
  -h | --help)
    cat <<EOF
usage: selftest.sh [-h] [--quick] [PYTEST_ARGS ...]

The project's own tests (test/), with pytest in parallel: the whole run is what
CI runs (.ci/run); it needs 11 GiB free in \$TMPDIR. Everything a run writes goes
into one temporary folder of its own, removed at the end.

options:
  -h, --help   show this help message and exit
  --quick      only the fast subset, for iterating: the unit tests that use test
               doubles (no wheel build, no fresh venv, no compile against torch),
               $(( ${#quick[@]} - 2 )) files (its time: docs/verification.md, Figures); not instead of
               the whole run
  PYTEST_ARGS  given to pytest as they are (then free disk is not checked), e.g.
               test/test_wheel.py -k ctrl_c, -x, --lf

environment:
  NDV_TEST_JOBS  pytest-xdist workers (default: auto, one per core)
EOF
    exit 0 ;;
  --quick) shift; set -- "${quick[@]}" "$@" ;;
esac
# torch 2.15.0 is a CUDA build: a fresh venv with it (the wheel tests', the first-use test's) holds
# 5.4 GB. Those tests are one xdist group (--dist loadgroup: one worker, one after the other;
# test_selftest_grouping.py checks that the pinned pytest and xdist still group) and each venv goes
# with its test's tmp_path, so the whole suite needs about 8.6 GiB at its peak (docs/verification.md);
# refuse at once on a fuller disk rather than fail later with "No space left on device" in whichever
# test was unlucky.
need_gib=11
free_gib=$(( $(df -Pk "${TMPDIR:-/tmp}" | awk 'NR == 2 {print $4}') / 1048576 ))
if [[ $# -eq 0 && $free_gib -lt $need_gib ]]; then
  echo "error: selftest.sh needs $need_gib GiB free in ${TMPDIR:-/tmp} (the whole suite); it has $free_gib GiB" >&2
  exit 2
fi
run_tmp=$(mktemp -d "${TMPDIR:-/tmp}/ndv-selftest.XXXXXX")
trap 'rm -rf "$run_tmp"' EXIT
export TMPDIR="$run_tmp"
"$python" -m pytest -n "${NDV_TEST_JOBS:-auto}" --dist loadgroup "$@"
