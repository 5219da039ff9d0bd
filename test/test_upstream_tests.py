"""test.sh without a checkout: the stack's own new upstream test files, stock vs stack."""

import hashlib
import io
import json
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

from pathlib import Path

import pytest

from fake_stack import TEST_FILE, TEST_TEXT, double_stack, quiet, stack_data
from ndvstack import export, upstream_tests
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.stack import DEFAULT_PATCHES, Stack


def test_the_new_test_files_run_a_b_and_the_report_says_what_the_stack_fixes(double, tmp_path):
    stack, src, _, tmp = double
    out = io.StringIO()
    table = upstream_tests.main(stack, out, tmp_path / "junit", progress=quiet, overlay_src=src,
                                cache=tmp / "cache")
    assert [(row.test_id, row.stock, row.stack) for row in table] == [
        ("test.autograd.test_ndv_double.TestNdvDouble::test_python_hunk_in_effect", "failed", "passed"),
        ("test.autograd.test_ndv_double.TestNdvDouble::test_unaffected", "passed", "passed"),
    ]
    lines = out.getvalue().splitlines()
    assert "failed   passed   test.autograd.test_ndv_double.TestNdvDouble::test_python_hunk_in_effect newly passes" in lines
    assert lines[-1] == "2 tests: 1 newly pass with the stack, 0 fail with it (0 fail on both sides)"
    module = "test.autograd.test_ndv_double.TestNdvDouble"
    assert junit_tags(tmp_path / "junit" / "stock.xml") == {
        (module, "test_python_hunk_in_effect"): ["failure"], (module, "test_unaffected"): []}
    assert junit_tags(tmp_path / "junit" / "stack.xml") == {
        (module, "test_python_hunk_in_effect"): [], (module, "test_unaffected"): []}


def junit_tags(junit: Path) -> dict[tuple[str, str], list[str]]:
    """(classname, name) -> the outcome elements pytest wrote for it (none: it passed)."""
    outcomes = ("failure", "error", "skipped")
    return {(case.get("classname"), case.get("name")): [child.tag for child in case if child.tag in outcomes]
            for case in ElementTree.parse(junit).getroot().iter("testcase")}


def test_a_test_that_fails_with_the_stack_fails_the_run(double, tmp_path):
    cache = double[3] / "cache"
    stock_only = TEST_TEXT + ("\n    def test_stock_only(self):\n"
                              "        self.assertFalse(hasattr(function, '_NDV_TEST_DOUBLE'))\n")
    stack, src, _ = double_stack(tmp_path, test_text=stock_only)
    out = io.StringIO()
    with pytest.raises(WorkFailed, match=r"1 tests fail with the stack \(first: .*::test_stock_only\)"):
        upstream_tests.main(stack, out, progress=quiet, overlay_src=src, cache=cache)
    assert "passed   failed   test.autograd.test_ndv_double.TestNdvDouble::test_stock_only NEWLY FAILS" in out.getvalue()


def test_later_changes_to_a_new_file_are_applied_and_upstream_files_are_listed(double, tmp_path):
    _, src, tree, tmp = double
    tree.git.run("checkout", "--quiet", "-b", "more")
    tree.commit("Extend the new test\n\nbody\n",
                {TEST_FILE: (tree.path / TEST_FILE).read_text().replace("1 + 1, 2", "2 + 2, 4")})
    tree.commit("Change an upstream test file\n\nbody\n",
                {"test/test_autograd.py": "# not in the partial tree: stands for an upstream file\n"})
    stack = stack_data(tmp_path / "patches")
    export.main(stack, tree.path, branch="more", progress=quiet)
    # Make the last patch a change (not a creation) of an upstream file.
    last = stack.dir / stack.series()[-1]
    last.write_text(last.read_text().replace("new file mode 100644\n", "").replace(
        "--- /dev/null", "--- a/test/test_autograd.py"))
    with tempfile.TemporaryDirectory() as tmp_tree:
        tmp_tree = Path(tmp_tree, "pytorch")
        tmp_tree.mkdir()
        files, not_run = upstream_tests.new_test_files(stack, tmp_tree)
        assert files == [TEST_FILE]
        assert "2 + 2, 4" in (tmp_tree / TEST_FILE).read_text()
    assert not_run == [f"test/test_autograd.py ({stack.series()[-1]}): changes an upstream file; needs --pytorch"]


def test_a_stack_without_test_files_is_refused(tmp_path):
    with pytest.raises(BadInput, match="adds no test files"):
        upstream_tests.main(stack_data(tmp_path / "empty"), io.StringIO(), progress=quiet)


# With --pytorch: a fake checkout (a test double) whose upstream test files have known
# outcomes on each side; the patched side is a python that says it is patched.
UPSTREAM_AUTOGRAD_TESTS = '''\
import os
import unittest

PATCHED = os.environ.get("FAKE_PATCHED") == "1"


class TestAutograd(unittest.TestCase):
    def test_stable(self):
        pass

    def test_fixed_by_the_stack(self):
        self.assertTrue(PATCHED)

    def test_broken_by_the_stack(self):
        self.assertFalse(PATCHED and os.environ.get("FAKE_BREAK") == "1")

    def test_fails_on_both(self):
        self.fail("an upstream failure, not ours")

    def test_skipped_by_the_stack(self):
        if PATCHED and os.environ.get("FAKE_SKIP") == "1":
            self.skipTest("skipped with the stack")


class TestOther(unittest.TestCase):
    def test_not_selected(self):
        self.fail("not in upstream-tests.toml")
'''
NEW_TEST = 'import os\n\n\ndef test_new():\n    assert os.environ.get("FAKE_PATCHED") == "1"\n'
COVERAGE = ('[[cover]]\npath = "torch/csrc/autograd/"\n'
            'tests = ["test/test_autograd.py::TestAutograd", "test/test_not_in_this_checkout.py"]\n'
            'quick = [{ test = "test/test_autograd.py::TestAutograd" }]\n')


@pytest.fixture
def checkout(tmp_path):
    from fake_pytorch import fake_pytorch_tree, stack_from_commits
    fake = fake_pytorch_tree(tmp_path / "pytorch")
    fake.base = fake.commit("Fake upstream tests", {"test/test_autograd.py": UPSTREAM_AUTOGRAD_TESTS})
    fake.git.run("checkout", "--quiet", "-b", "work")
    cpp = "torch/csrc/autograd/custom_function.cpp"
    fake.commit("[autograd] A fix\n\nWith its test.\n",
                {cpp: fake.edit(cpp, "line 3\n", "line 3 fixed\n"), "test/test_new_feature.py": NEW_TEST})
    stack_from_commits(fake, tmp_path / "patches", head="work")
    (tmp_path / "patches" / "upstream-tests.toml").write_text(COVERAGE)
    fake.git.run("checkout", "--quiet", "main")
    fake.git.run("branch", "-D", "work")
    patched = tmp_path / "patched-python"
    patched.write_text(f'#!/bin/sh\nFAKE_PATCHED=1 exec {sys.executable} "$@"\n')
    patched.chmod(0o755)
    from ndvstack.stack import Stack
    return fake, Stack(tmp_path / "patches"), str(patched)


def test_checkout_tests_run_a_b_from_the_stacked_tree(tmp_path, checkout):
    fake, stack, patched = checkout
    before = fake.snapshot()
    out = io.StringIO()
    table = upstream_tests.main(stack, out, tmp_path / "junit", progress=quiet, pytorch=fake.path,
                                patched_python=patched)
    rows = {row.test_id: (row.stock, row.stack) for row in table}
    assert rows == {
        "test_autograd.TestAutograd::test_broken_by_the_stack": ("passed", "passed"),
        "test_autograd.TestAutograd::test_fails_on_both": ("failed", "failed"),
        "test_autograd.TestAutograd::test_fixed_by_the_stack": ("failed", "passed"),
        "test_autograd.TestAutograd::test_skipped_by_the_stack": ("passed", "passed"),
        "test_autograd.TestAutograd::test_stable": ("passed", "passed"),
        "test_new_feature::test_new": ("failed", "passed"),
    }
    lines = out.getvalue().splitlines()
    assert lines[0] == "not run: test/test_not_in_this_checkout.py (not in the checkout at %s)" % fake.base[:12]
    assert "failed   passed   test_autograd.TestAutograd::test_fixed_by_the_stack newly passes" in lines
    assert "failed   passed   test_new_feature::test_new newly passes" in lines
    assert lines[-1] == "6 tests: 2 newly pass with the stack, 0 fail with it (1 fail on both sides)"
    assert {p.name for p in (tmp_path / "junit").iterdir()} == {"stock.xml", "stack.xml"}
    assert fake.snapshot() == before


def test_a_new_failure_in_an_upstream_test_fails_the_run(tmp_path, checkout, monkeypatch):
    fake, stack, patched = checkout
    monkeypatch.setenv("FAKE_BREAK", "1")
    out = io.StringIO()
    with pytest.raises(WorkFailed, match=r"^test: 1 tests fail with the stack \(first: "
                                         r"test_autograd.TestAutograd::test_broken_by_the_stack\)$"):
        upstream_tests.main(stack, out, progress=quiet, pytorch=fake.path, patched_python=patched,
                            stock_python=sys.executable)
    assert "passed   failed   test_autograd.TestAutograd::test_broken_by_the_stack NEWLY FAILS" in out.getvalue()


def test_a_test_skipped_with_the_stack_that_passed_on_stock_fails_the_run(tmp_path, checkout, monkeypatch):
    fake, stack, patched = checkout
    monkeypatch.setenv("FAKE_SKIP", "1")
    out = io.StringIO()
    with pytest.raises(WorkFailed, match=r"^test: 1 tests fail with the stack \(first: "
                                         r"test_autograd.TestAutograd::test_skipped_by_the_stack\)$"):
        upstream_tests.main(stack, out, progress=quiet, pytorch=fake.path, patched_python=patched)
    assert ("passed   skipped  test_autograd.TestAutograd::test_skipped_by_the_stack NEWLY FAILS (skipped with "
            "the stack)") in out.getvalue().splitlines()


def test_checkout_mode_refusals(tmp_path, checkout):
    fake, stack, patched = checkout
    with pytest.raises(BadInput, match="--patched-python /nope: no such python"):
        upstream_tests.main(stack, io.StringIO(), progress=quiet, pytorch=fake.path, patched_python="/nope")
    with pytest.raises(BadInput, match="lacks the revision no-such-rev"):
        upstream_tests.main(stack, io.StringIO(), progress=quiet, pytorch=fake.path, onto="no-such-rev")
    (stack.dir / "upstream-tests.toml").unlink()
    with pytest.raises(BadInput, match="upstream-tests.toml: missing"):
        upstream_tests.main(stack, io.StringIO(), progress=quiet, pytorch=fake.path)


# With --upstream-tests DIR: a folder of upstream test files (a test double: our own text at
# upstream-like paths) whose tests have known outcomes per side. The patched side is a python
# that says it is patched; FAKE_BREAK / FAKE_SKIP make the stack break or skip a test.
FAKE_SUITE = '''\
import os
import tempfile
import time
import unittest
from pathlib import Path

PATCHED = os.environ.get("FAKE_PATCHED") == "1"
SIDE = "stack" if PATCHED else "stock"


class TestSuite(unittest.TestCase):
    def test_stable(self):
        pass

    def test_fixed_by_the_stack(self):
        self.assertTrue(PATCHED)

    def test_broken_by_the_stack(self):
        self.assertFalse(PATCHED and os.environ.get("FAKE_BREAK") == "1", "broken with the stack")

    def test_skipped_by_the_stack(self):
        if PATCHED and os.environ.get("FAKE_SKIP") == "1":
            self.skipTest("skipped with the stack")

    def test_fails_on_both(self):
        self.fail("an upstream failure, not ours")

    def test_runs_beside_the_other_side(self):
        # Each side records its inductor cache, then waits for the other side to start: the
        # two sides must run at the same time.
        record = Path(os.environ["FAKE_RECORD"])
        (record / f"{SIDE}.cache").write_text(os.environ.get("TORCHINDUCTOR_CACHE_DIR", "unset"))
        (record / f"{SIDE}.tmp").write_text(tempfile.gettempdir())
        other = record / ("stock.cache" if PATCHED else "stack.cache")
        deadline = time.monotonic() + 30
        while not other.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertTrue(other.exists(), "the other side did not run at the same time")


class TestSweepOpInfo(unittest.TestCase):
    def test_every_op(self):
        pass
'''
FAKE_OTHER = '''\
import unittest


class TestOther(unittest.TestCase):
    def test_alias(self):
        pass

    def test_view(self):
        pass
'''
SUITE_MAP = '''\
sweeps = ["test/area/test_suite.py::TestSweep"]

[[cover]]
path = "torch/csrc/autograd/"
tests = ["test/area/test_suite.py", "test/area/test_other.py::TestOther", "test/area/test_not_in_dir.py"]
quick = [
    { test = "test/area/test_suite.py::TestSuite", k = "broken or skipped or runs_beside" },
    { test = "test/area/test_other.py::TestOther", k = "alias" },
    { test = "test/area/test_not_in_dir.py" },
]

[[cover]]
path = "torch/_dynamo/"
tests = ["test/area/test_unrelated.py"]
quick = [{ test = "test/area/test_unrelated.py" }]
'''


def fake_upstream_tests(path: Path) -> Path:
    """A test double of a folder of upstream test files: DIR/test/area/..., and one file the
    map does not reach for this stack (its path is not touched)."""
    for name, text in (("test_suite.py", FAKE_SUITE), ("test_other.py", FAKE_OTHER),
                       ("test_unrelated.py", "def test_never_run():\n    assert False\n"),
                       ("helpers.py", "# imported by nothing; hashed as a helper beside the tests\n")):
        (path / "test" / "area").mkdir(parents=True, exist_ok=True)
        (path / "test" / "area" / name).write_text(text)
    return path


@pytest.fixture
def suite(tmp_path, checkout, monkeypatch):
    """(stack, the fake upstream folder, the patched python, the record folder)."""
    _, stack, patched = checkout
    (stack.dir / "upstream-tests.toml").write_text(SUITE_MAP)
    record = tmp_path / "record"
    record.mkdir()
    monkeypatch.setenv("FAKE_RECORD", str(record))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "the caller's cache"))
    return stack, fake_upstream_tests(tmp_path / "upstream"), patched, record


def run_suite(suite, reports: Path, select: str = "all", **options):
    stack, upstream, patched, _ = suite
    out = io.StringIO()
    try:
        return upstream_tests.main(stack, out, reports, progress=quiet, upstream=upstream, select=select,
                                   patched_python=patched, command=["test.sh", "--select", select], **options), out
    finally:
        print(out.getvalue())  # the report, for a failure's captured output


SUITE = "area/test_suite.py::TestSuite::"


def test_upstream_tests_a_b_per_test_id_with_a_table_and_a_summary(tmp_path, suite):
    table, out = run_suite(suite, tmp_path / "reports")
    assert {row.test_id: (row.stock, row.stack) for row in table} == {
        SUITE + "test_broken_by_the_stack": ("passed", "passed"),
        SUITE + "test_fails_on_both": ("failed", "failed"),
        SUITE + "test_fixed_by_the_stack": ("failed", "passed"),
        SUITE + "test_runs_beside_the_other_side": ("passed", "passed"),
        SUITE + "test_skipped_by_the_stack": ("passed", "passed"),
        SUITE + "test_stable": ("passed", "passed"),
        "area/test_other.py::TestOther::test_alias": ("passed", "passed"),
        "area/test_other.py::TestOther::test_view": ("passed", "passed"),
    }  # TestSweepOpInfo: a sweep, not run by --select all
    lines = out.getvalue().splitlines()
    upstream = suite[1]
    assert lines[0] == f"not run: test/area/test_not_in_dir.py is mapped for the stack's files but not in {upstream}"
    assert f"newly passes: {SUITE}test_fixed_by_the_stack (stock failed, stack passed): AssertionError: " \
           "False is not true" in lines
    assert f"fails on both: {SUITE}test_fails_on_both (stock failed, stack failed): AssertionError: " \
           "an upstream failure, not ours" in lines
    assert lines[-5:-1] == [
        "file                collected stock/stack  passed stock  passed stack  fail on both  newly pass  "
        "one side only  regressions",
        "area/test_suite.py  6/6                    4             5             1             1           "
        "0              0",
        "area/test_other.py  2/2                    2             2             0             0           "
        "0              0",
        "8 tests, --select all: 0 regressions, 1 newly pass, 1 fail on both sides, 0 skipped or missing on one "
        "side only; " + lines[-2].rsplit("; ", 1)[1]]
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
    assert summary["command"] == "test.sh --select all" and summary["select"] == "all"
    assert summary["dir"] == str(upstream) and summary["not_in_dir"] == ["test/area/test_not_in_dir.py"]
    assert summary["sha256"] == {f"test/area/{name}": hashlib.sha256((upstream / "test/area" / name).read_bytes())
                                 .hexdigest() for name in ("helpers.py", "test_other.py", "test_suite.py")}
    assert summary["deselected"] == ["area/test_suite.py::TestSweep"]
    assert [run["target"] for run in summary["runs"]] == ["area/test_suite.py", "area/test_other.py::TestOther"]
    assert summary["files"][0] == {"file": "area/test_suite.py", "collected": {"stock": 6, "stack": 6},
                                   "passed": {"stock": 4, "stack": 5}, "fail_on_both": 1, "newly_pass": 1,
                                   "one_side_only": 0, "regressions": 0}
    assert {t["test_id"]: t["kind"] for t in summary["tests"]} == {
        SUITE + "test_fails_on_both": "fails on both", SUITE + "test_fixed_by_the_stack": "newly passes"}
    for side, fixed in (("stock", ["failure"]), ("stack", [])):  # the JUnit files, per side and run
        assert junit_tags(tmp_path / "reports" / side / "area.test_suite.xml") == {
            ("area.test_suite.TestSuite", name): tags for name, tags in (
                ("test_stable", []), ("test_fixed_by_the_stack", fixed), ("test_broken_by_the_stack", []),
                ("test_skipped_by_the_stack", []), ("test_fails_on_both", ["failure"]),
                ("test_runs_beside_the_other_side", []))}


def test_a_relative_junit_dir_is_the_callers_not_the_upstream_folders(tmp_path, suite, monkeypatch):
    # pytest runs in DIR/test: a relative --junit-dir once made it write its XML there (as .ci/run's
    # build/upstream-tests did into ../shared), and the run failed with "wrote no report".
    monkeypatch.chdir(tmp_path)
    table, _ = run_suite(suite, Path("reports"), select="quick")
    assert table
    for side in ("stock", "stack"):
        assert [junit_tags(x) for x in (tmp_path / "reports" / side).glob("*.xml")]
    assert not any((suite[1] / "test").rglob("*.xml"))


def test_each_side_has_its_own_inductor_cache_and_they_run_at_the_same_time(tmp_path, suite):
    table, _ = run_suite(suite, tmp_path / "reports", select="quick")
    assert {row.test_id: (row.stock, row.stack) for row in table if "beside" in row.test_id} == {
        SUITE + "test_runs_beside_the_other_side": ("passed", "passed")}
    record = suite[3]
    stock, stack = (Path((record / f"{side}.cache").read_text()) for side in ("stock", "stack"))
    assert stock != stack
    assert tmp_path / "the caller's cache" not in (stock, stack)
    assert stock.name == "stock" and stack.name == "stack"
    # TMPDIR too (inductor's precompiled headers ignore the cache): inside the cache, gone after.
    tmps = [Path((record / f"{side}.tmp").read_text()) for side in ("stock", "stack")]
    assert tmps == [stock / "tmp", stack / "tmp"] and not stock.exists() and not stack.exists()


def test_a_regression_fails_the_run_naming_the_test(tmp_path, suite, monkeypatch):
    monkeypatch.setenv("FAKE_BREAK", "1")
    with pytest.raises(WorkFailed, match=rf"^upstream tests: 1 regressions \(passed on stock, not with the stack\): "
                                         rf"{SUITE}test_broken_by_the_stack$"):
        run_suite(suite, tmp_path / "reports")
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
    assert [(t["test_id"], t["stock"], t["stack"], t["message"]) for t in summary["tests"]
            if t["kind"] == "regression"] == [
        (SUITE + "test_broken_by_the_stack", "passed", "failed", "AssertionError: True is not false : broken "
                                                                 "with the stack")]
    assert summary["files"][0]["regressions"] == 1


def test_a_test_that_passed_on_stock_and_is_skipped_with_the_stack_is_a_regression(tmp_path, suite, monkeypatch):
    monkeypatch.setenv("FAKE_SKIP", "1")
    out = io.StringIO()
    with pytest.raises(WorkFailed, match=rf"1 regressions \(.*\): {SUITE}test_skipped_by_the_stack$"):
        upstream_tests.main(suite[0], out, tmp_path / "reports", progress=quiet, upstream=suite[1],
                            select="quick", patched_python=suite[2])
    assert (f"REGRESSION: {SUITE}test_skipped_by_the_stack (stock passed, stack skipped): skipped with the stack"
            in out.getvalue().splitlines())


def test_quick_runs_each_entrys_quick_part_and_full_adds_the_sweeps(tmp_path, suite):
    quick, _ = run_suite(suite, tmp_path / "quick", select="quick")
    assert sorted(row.test_id for row in quick) == [
        "area/test_other.py::TestOther::test_alias", SUITE + "test_broken_by_the_stack",
        SUITE + "test_runs_beside_the_other_side", SUITE + "test_skipped_by_the_stack"]
    (suite[3] / "stock.cache").unlink()
    (suite[3] / "stack.cache").unlink()
    full, _ = run_suite(suite, tmp_path / "full", select="full")
    assert {row.test_id for row in full} - {row.test_id for row in run_suite(suite, tmp_path / "all")[0]} == {
        "area/test_suite.py::TestSweepOpInfo::test_every_op"}


def test_the_map_merges_picks_of_one_target_and_skips_a_class_whose_file_runs_whole(tmp_path, checkout):
    _, stack, _ = checkout
    (stack.dir / "upstream-tests.toml").write_text(
        '[[cover]]\npath = "torch/csrc/"\ntests = ["test/a.py", "test/b.py"]\n'
        'quick = [{ test = "test/a.py::TestA", k = "view" }, { test = "test/b.py::TestB" }]\n'
        '[[cover]]\npath = "torch/csrc/autograd/"\ntests = ["test/a.py::TestA", "test/c.py"]\n'
        'quick = [{ test = "test/a.py::TestA", k = "alias" }, { test = "test/c.py", k = "x" }]\n'
        '[[cover]]\npath = "torch/_dynamo/"\ntests = ["test/d.py"]\nquick = [{ test = "test/d.py" }]\n')
    assert upstream_tests.suite_runs(stack, "quick") == [
        upstream_tests.SuiteRun("a.py::TestA", "(view) or (alias)"), upstream_tests.SuiteRun("b.py::TestB"),
        upstream_tests.SuiteRun("c.py", "x")]
    assert upstream_tests.suite_runs(stack, "all") == [
        upstream_tests.SuiteRun("a.py"), upstream_tests.SuiteRun("b.py"), upstream_tests.SuiteRun("c.py")]


def test_upstream_tests_refusals(tmp_path, suite):
    stack, upstream, patched, _ = suite
    with pytest.raises(BadInput, match=r"^--upstream-tests .*/nowhere: no test/ folder"):
        upstream_tests.main(stack, io.StringIO(), progress=quiet, upstream=tmp_path / "nowhere")
    (tmp_path / "empty" / "test").mkdir(parents=True)
    with pytest.raises(BadInput, match="none of the test files upstream-tests.toml maps the stack's files to is there"):
        upstream_tests.main(stack, io.StringIO(), progress=quiet, upstream=tmp_path / "empty")
    with pytest.raises(BadInput, match="--select needs --upstream-tests DIR"):
        upstream_tests.main(stack, io.StringIO(), progress=quiet, select="quick")
    with pytest.raises(BadInput, match="give one"):
        upstream_tests.main(stack, io.StringIO(), progress=quiet, upstream=upstream, pytorch=tmp_path)


def test_the_entry_point_has_help_and_refuses_bad_usage(tmp_path, capsys):
    from ndvstack import cli
    with pytest.raises(SystemExit) as exit_:
        cli.main(["test", "--help"])
    assert exit_.value.code == 0
    help_text = capsys.readouterr().out
    assert help_text.startswith("usage: stack.sh test ")
    assert "--upstream-tests DIR" in help_text and "--select {quick,all,full}" in help_text
    with pytest.raises(SystemExit) as exit_:
        cli.main(["test", "--upstream-tests", str(tmp_path), "--select", "some"])
    assert exit_.value.code == 2
    assert "argument --select: invalid choice: 'some'" in capsys.readouterr().err
    assert cli.main(["test", "--select", "quick"]) == 2
    assert capsys.readouterr().err == "error: --select needs --upstream-tests DIR\n"


def test_the_real_maps_quick_gate_holds_the_known_regressions_tests():
    """The quick selection of the shipped map reaches the two upstream tests the stack once
    regressed (issue 13), by pytest's own -k matching."""
    from _pytest.mark.expression import Expression
    runs = upstream_tests.suite_runs(Stack(DEFAULT_PATCHES), "quick")
    for test_id in ("dynamo/test_aot_autograd.py::AotAutogradFallbackTests::test_alias_inputs",
                    "functorch/test_aotdispatch.py::TestAOTModuleSimplified::test_saved_tensors_hooks_donated_buffers"):
        file, cls, name = test_id.split("::")
        names = (file.rsplit("/", 1)[1], cls, name)
        assert any(test_id.startswith(run.target + "::") and (run.k is None or Expression.compile(run.k).evaluate(
            lambda sub, **_: any(sub.lower() in n.lower() for n in names))) for run in runs), test_id
