"""selftest.sh runs the tests that make a fresh torch venv (5.4 GB each) one after another on one
pytest-xdist worker: they share an xdist_group and the run uses --dist loadgroup, so the suite's
disk peak holds one such venv, not two. pytest 9.2.0 makes xdist 3.8.0 drop the grouping without a
word (pytest-xdist#1386): these check that the pinned pair still groups, and that the tests are
marked."""

import subprocess
import sys
import textwrap

import test_cli
import test_wheel

GROUPED = textwrap.dedent("""\
    import pytest

    @pytest.mark.xdist_group("g")
    @pytest.mark.parametrize("i", range(4))
    def test_grouped(i):
        pass

    @pytest.mark.parametrize("i", range(4))
    def test_free(i):
        pass
    """)


def test_loadgroup_runs_a_group_on_one_worker(tmp_path):
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    out = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-v",
                          "-p", "no:cacheprovider", str(tmp_path)], capture_output=True, text=True,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    grouped = [line.split() for line in out.stdout.splitlines() if "PASSED" in line and "::test_grouped[" in line]
    assert len(grouped) == 4, out.stdout
    # "[gw0] [ 25%] PASSED test_grouped.py::test_grouped[0]@g": xdist names the group it scheduled by.
    assert all(words[-1].endswith("@g") for words in grouped), out.stdout
    assert len({words[0] for words in grouped}) == 1, out.stdout


def test_the_fresh_venv_tests_are_one_group():
    for test in (test_wheel.test_a_fresh_venv_gets_the_whole_stack_and_a_reinstall_restores_stock,
                 test_wheel.test_the_real_stacks_wheel_fixes_the_eager_bug_in_a_fresh_venv,
                 test_cli.test_first_use_creates_the_venv_with_the_pins_and_reuses_it):
        assert [m.args for m in test.pytestmark if m.name == "xdist_group"] == [("fresh_venv",)], test.__name__
