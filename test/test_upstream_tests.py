"""test.sh: the stack's own tests (the test functions its patches add or change) and the
upstream tests that cover it, stock vs stack: from a folder of upstream test files with the
series' test hunks applied to a copy (--upstream-tests DIR), or from a checkout (--pytorch)."""

import hashlib
import io
import json
import os
import sys
import xml.etree.ElementTree as ElementTree

from pathlib import Path

import pytest

from fake_pytorch import dir_bytes, fake_pytorch_tree, stack_from_commits, write_stack_data
from ndvstack import upstream_tests
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.stack import DEFAULT_PATCHES, REPO_ROOT, Stack


def quiet(_):
    pass


def junit_tags(junit: Path) -> dict[tuple[str, str], list[str]]:
    """(classname, name) -> the outcome elements pytest wrote for it (none: it passed)."""
    outcomes = ("failure", "error", "skipped")
    return {(case.get("classname"), case.get("name")): [child.tag for child in case if child.tag in outcomes]
            for case in ElementTree.parse(junit).getroot().iter("testcase")}


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
ADDED_TEST = """
    def test_added_by_the_stack(self):
        self.assertTrue(PATCHED)
"""
COVERAGE = ('[[cover]]\npath = "torch/csrc/autograd/"\n'
            'tests = ["test/test_autograd.py::TestAutograd", "test/test_not_in_this_checkout.py"]\n'
            'checkout_only = ["test/test_only_in_a_checkout.py"]\n'
            'quick = [{ test = "test/test_autograd.py::TestAutograd" }]\n')


@pytest.fixture
def checkout(tmp_path):
    fake = fake_pytorch_tree(tmp_path / "pytorch")
    fake.base = fake.commit("Fake upstream tests", {"test/test_autograd.py": UPSTREAM_AUTOGRAD_TESTS,
                                                    "test/test_only_in_a_checkout.py": "def test_here():\n    pass\n"})
    fake.git.run("checkout", "--quiet", "-b", "work")
    cpp = "torch/csrc/autograd/custom_function.cpp"
    fake.commit("[autograd] A fix\n\nWith its tests: one in the upstream class, one in a file of its own.\n",
                {cpp: fake.edit(cpp, "line 3\n", "line 3 fixed\n"), "test/test_new_feature.py": NEW_TEST,
                 "test/test_autograd.py": fake.edit("test/test_autograd.py", "\n\nclass TestOther",
                                                    ADDED_TEST + "\n\nclass TestOther")})
    stack_from_commits(fake, tmp_path / "patches", head="work")
    (tmp_path / "patches" / "upstream-tests.toml").write_text(COVERAGE)
    fake.git.run("checkout", "--quiet", "main")
    fake.git.run("branch", "-D", "work")
    return fake, Stack(tmp_path / "patches"), patched_python(tmp_path)


def patched_python(tmp_path: Path) -> str:
    """The patched side's python: this one, saying it is patched."""
    patched = tmp_path / "patched-python"
    patched.write_text(f'#!/bin/sh\nFAKE_PATCHED=1 exec {sys.executable} "$@"\n')
    patched.chmod(0o755)
    return str(patched)


def test_checkout_tests_run_a_b_from_the_stacked_tree(tmp_path, checkout):
    fake, stack, patched = checkout
    before = fake.snapshot()
    out = io.StringIO()
    table = upstream_tests.main(stack, out, tmp_path / "junit", progress=quiet, pytorch=fake.path,
                                patched_python=patched)
    rows = {row.test_id: (row.stock, row.stack) for row in table}
    assert rows == {
        "test_autograd.TestAutograd::test_added_by_the_stack": ("failed", "passed"),
        "test_autograd.TestAutograd::test_broken_by_the_stack": ("passed", "passed"),
        "test_autograd.TestAutograd::test_fails_on_both": ("failed", "failed"),
        "test_autograd.TestAutograd::test_fixed_by_the_stack": ("failed", "passed"),
        "test_autograd.TestAutograd::test_skipped_by_the_stack": ("passed", "passed"),
        "test_autograd.TestAutograd::test_stable": ("passed", "passed"),
        "test_new_feature::test_new": ("failed", "passed"),
        "test_only_in_a_checkout::test_here": ("passed", "passed"),
    }
    lines = out.getvalue().splitlines()
    assert lines == [
        "not run: test/test_not_in_this_checkout.py (not in the checkout at %s)" % fake.base[:12],
        "failed   failed   test_autograd.TestAutograd::test_fails_on_both",
        "failed   passed   test_autograd.TestAutograd::test_fixed_by_the_stack newly passes",
        "the stack's tests: 2 new (must fail on stock and pass with the stack), 0 kept (must pass on both: "
        "patches/regression-tests), 0 changed (must pass with the stack)",
        "  ok: new test_autograd.TestAutograd::test_added_by_the_stack: stock failed, stack passed",
        "  ok: new test_new_feature::test_new: stock failed, stack passed",
        "8 tests: 3 newly pass with the stack, 0 fail with it or cannot show its fix (1 fail on both sides)"]
    assert {p.name for p in (tmp_path / "junit").iterdir()} == {"stock.xml", "stack.xml"}
    assert fake.snapshot() == before


def test_a_new_failure_in_an_upstream_test_fails_the_run(tmp_path, checkout, monkeypatch):
    fake, stack, patched = checkout
    monkeypatch.setenv("FAKE_BREAK", "1")
    out = io.StringIO()
    with pytest.raises(WorkFailed, match=r"^test: 1 tests fail with the stack or cannot show its fix \(first: "
                                         r"test_autograd.TestAutograd::test_broken_by_the_stack\)$"):
        upstream_tests.main(stack, out, progress=quiet, pytorch=fake.path, patched_python=patched,
                            stock_python=sys.executable)
    assert "passed   failed   test_autograd.TestAutograd::test_broken_by_the_stack NEWLY FAILS" in out.getvalue()


def test_a_test_skipped_with_the_stack_that_passed_on_stock_fails_the_run(tmp_path, checkout, monkeypatch):
    fake, stack, patched = checkout
    monkeypatch.setenv("FAKE_SKIP", "1")
    out = io.StringIO()
    with pytest.raises(WorkFailed, match=r"^test: 1 tests fail with the stack or cannot show its fix \(first: "
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


UPSTREAM_FILES = {"test/area/test_suite.py": FAKE_SUITE, "test/area/test_other.py": FAKE_OTHER,
                  "test/area/test_unrelated.py": "def test_never_run():\n    assert False\n",
                  "test/area/helpers.py": "# imported by nothing; hashed as a helper beside the tests\n"}
# What the stack's first patch adds to TestSuite: fails on stock (unless FAKE_STOCK_PASSES), passes with
# the stack (unless FAKE_NEW_FAILS).
NEW_IN_SUITE = """\
    def test_new_by_the_stack(self):
        self.assertFalse(os.environ.get("FAKE_NEW_FAILS") == "1", "the fix is not in")
        self.assertTrue(PATCHED or os.environ.get("FAKE_STOCK_PASSES") == "1")

"""


def fake_upstream_tests(path: Path) -> Path:
    """A test double of a folder of upstream test files: DIR/test/area/..., and one file the
    map does not reach for this stack (its path is not touched)."""
    for rel, text in UPSTREAM_FILES.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text)
    return path


@pytest.fixture
def suite(tmp_path, monkeypatch):
    """(stack, the fake upstream folder, the patched python, the record folder). The stack's
    patches are made against the folder's text: the first adds a test to TestSuite, the
    second changes test_stable."""
    fake = fake_pytorch_tree(tmp_path / "pytorch")
    fake.base = fake.commit("Upstream's tests\n\nThe base.\n", UPSTREAM_FILES)
    fake.git.run("checkout", "--quiet", "-b", "work")
    cpp, suite_file = "torch/csrc/autograd/custom_function.cpp", "test/area/test_suite.py"
    fake.commit("[autograd] A fix\n\nWith its test.\n",
                {cpp: fake.edit(cpp, "line 3\n", "line 3 fixed\n"),
                 suite_file: fake.edit(suite_file, "    def test_fails_on_both",
                                       NEW_IN_SUITE + "    def test_fails_on_both")})
    fake.commit("[autograd] Check more\n\nA changed test.\n",
                {cpp: fake.edit(cpp, "line 9\n", "line 9 checked\n"),
                 suite_file: fake.edit(suite_file, "    def test_stable(self):\n        pass\n",
                                       "    def test_stable(self):\n        self.assertTrue(True)\n")})
    stack_from_commits(fake, tmp_path / "patches", head="work")
    stack = Stack(tmp_path / "patches")
    (stack.dir / "upstream-tests.toml").write_text(SUITE_MAP)
    record = tmp_path / "record"
    record.mkdir()
    monkeypatch.setenv("FAKE_RECORD", str(record))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "the caller's cache"))
    return stack, fake_upstream_tests(tmp_path / "upstream"), patched_python(tmp_path), record


def run_suite(suite, reports: Path, select: str | None = "all", **options):
    stack, upstream, patched, _ = suite
    out = io.StringIO()
    try:
        return upstream_tests.main(stack, out, reports, progress=quiet, upstream=upstream, select=select,
                                   patched_python=patched, command=["test.sh", "--select", str(select)],
                                   **options), out
    finally:
        print(out.getvalue())  # the report, for a failure's captured output


SUITE = "area/test_suite.py::TestSuite::"
NEW, CHANGED = f"test/{SUITE}test_new_by_the_stack", f"test/{SUITE}test_stable"


def test_the_stacks_own_tests_alone_by_default_with_the_hunks_in_a_copy_of_dir(tmp_path, suite):
    stack, upstream = suite[:2]
    before = dir_bytes(upstream)
    table, out = run_suite(suite, tmp_path / "reports", select=None)
    assert {row.test_id: (row.stock, row.stack) for row in table} == {
        SUITE + "test_new_by_the_stack": ("failed", "passed"), SUITE + "test_stable": ("passed", "passed")}
    first, second = stack.series()
    lines = out.getvalue().splitlines()
    assert lines[:3] == [
        "the stack's tests: 1 new (must fail on stock and pass with the stack), 0 kept (must pass on both: "
        "patches/regression-tests), 1 changed (must pass with the stack)",
        f"  ok: new {NEW} ({first}): stock failed, stack passed",
        f"  ok: changed {CHANGED} ({second}): stock passed, stack passed"]
    assert lines[-2].startswith("2 tests, --select own: 0 regressions, 1 newly pass, 0 fail on both sides, 0 skipped "
                                "or missing on one side only; the stack's 2 tests: 0 fail with it or cannot show its "
                                "fix; ")
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
    assert [(run["target"], run["k"], run["ids"]) for run in summary["runs"]] == [
        ("area/test_suite.py", None, [f"{SUITE}test_new_by_the_stack", f"{SUITE}test_stable"])]
    assert summary["stack_tests_per_patch"] == {first: [NEW], second: [CHANGED]}
    assert [(t["test_id"], t["kind"], t["verdict"]) for t in summary["stack_tests"]] == [
        (NEW, "new", ""), (CHANGED, "changed", "")]
    assert dir_bytes(upstream) == before  # the hunks went into a copy


def test_a_new_test_that_passes_on_stock_cannot_show_the_fix(tmp_path, suite, monkeypatch):
    monkeypatch.setenv("FAKE_STOCK_PASSES", "1")
    with pytest.raises(WorkFailed, match=rf"^upstream tests: 1 of the stack's tests fail with it or cannot show its "
                                         rf"fix \(first: {NEW}: passes on stock: it cannot show the fix\)$"):
        run_suite(suite, tmp_path / "reports", select="own")
    out = (tmp_path / "reports" / "summary.json").read_text()
    assert json.loads(out)["stack_tests"][0]["verdict"] == "passes on stock: it cannot show the fix"


def test_a_new_test_that_fails_with_the_stack_fails_the_run(tmp_path, suite, monkeypatch, capsys):
    monkeypatch.setenv("FAKE_NEW_FAILS", "1")
    with pytest.raises(WorkFailed, match=rf"\(first: {NEW}: failed with the stack\)$"):
        run_suite(suite, tmp_path / "reports", select="own")
    assert (f"  FAILS: new {NEW} ({suite[0].series()[0]}): stock failed, stack failed; failed with the stack"
            in capsys.readouterr().out.splitlines())


def test_upstream_tests_a_b_per_test_id_with_a_table_and_a_summary(tmp_path, suite):
    table, out = run_suite(suite, tmp_path / "reports")
    assert {row.test_id: (row.stock, row.stack) for row in table} == {
        SUITE + "test_broken_by_the_stack": ("passed", "passed"),
        SUITE + "test_fails_on_both": ("failed", "failed"),
        SUITE + "test_fixed_by_the_stack": ("failed", "passed"),
        SUITE + "test_new_by_the_stack": ("failed", "passed"),
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
    # The stack's own tests are reported apart: the upstream tests' lines are about the rest.
    assert not any("test_new_by_the_stack" in line for line in lines if line.startswith("newly passes"))
    assert f"  ok: new {NEW} ({suite[0].series()[0]}): stock failed, stack passed" in lines
    assert lines[-5:-1] == [
        "file                collected stock/stack  passed stock  passed stack  fail on both  newly pass  "
        "one side only  regressions",
        "area/test_suite.py  7/7                    4             6             1             2           "
        "0              0",
        "area/test_other.py  2/2                    2             2             0             0           "
        "0              0",
        "9 tests, --select all: 0 regressions, 2 newly pass, 1 fail on both sides, 0 skipped or missing on one "
        "side only; the stack's 2 tests: 0 fail with it or cannot show its fix; " + lines[-2].rsplit("; ", 1)[1]]
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
    assert summary["command"] == "test.sh --select all" and summary["select"] == "all"
    assert summary["dir"] == str(upstream) and summary["not_in_dir"] == ["test/area/test_not_in_dir.py"]
    assert summary["sha256"] == {f"test/area/{name}": hashlib.sha256((upstream / "test/area" / name).read_bytes())
                                 .hexdigest() for name in ("helpers.py", "test_other.py", "test_suite.py")}
    assert summary["deselected"] == ["area/test_suite.py::TestSweep"]
    assert [run["target"] for run in summary["runs"]] == ["area/test_suite.py", "area/test_other.py::TestOther"]
    assert summary["files"][0] == {"file": "area/test_suite.py", "collected": {"stock": 7, "stack": 7},
                                   "passed": {"stock": 4, "stack": 6}, "fail_on_both": 1, "newly_pass": 2,
                                   "one_side_only": 0, "regressions": 0}
    assert {t["test_id"]: t["kind"] for t in summary["tests"]} == {
        SUITE + "test_fails_on_both": "fails on both", SUITE + "test_fixed_by_the_stack": "newly passes"}
    assert [t["test_id"] for t in summary["stack_tests"]] == [NEW, CHANGED]
    for side, fixed in (("stock", ["failure"]), ("stack", [])):  # the JUnit files, per side and run
        assert junit_tags(tmp_path / "reports" / side / "area.test_suite.xml") == {
            ("area.test_suite.TestSuite", name): tags for name, tags in (
                ("test_stable", []), ("test_fixed_by_the_stack", fixed), ("test_broken_by_the_stack", []),
                ("test_skipped_by_the_stack", []), ("test_new_by_the_stack", fixed),
                ("test_fails_on_both", ["failure"]), ("test_runs_beside_the_other_side", []))}


def test_a_relative_junit_dir_is_the_callers_not_the_upstream_folders(tmp_path, suite, monkeypatch):
    # pytest runs in the copy of DIR/test: a relative --junit-dir once made it write its XML there (as .ci/run's
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


def test_quick_runs_each_entrys_quick_part_and_the_stacks_tests_and_full_adds_the_sweeps(tmp_path, suite):
    quick, _ = run_suite(suite, tmp_path / "quick", select="quick")
    assert sorted(row.test_id for row in quick) == [
        "area/test_other.py::TestOther::test_alias", SUITE + "test_broken_by_the_stack",
        SUITE + "test_new_by_the_stack", SUITE + "test_runs_beside_the_other_side", SUITE + "test_skipped_by_the_stack",
        SUITE + "test_stable"]
    summary = json.loads((tmp_path / "quick" / "summary.json").read_text())
    assert [(run["target"], run["k"], run["ids"]) for run in summary["runs"]] == [
        ("area/test_suite.py::TestSuite", "broken or skipped or runs_beside", []),
        ("area/test_other.py::TestOther", "alias", []),
        ("area/test_suite.py", None, [f"{SUITE}test_new_by_the_stack", f"{SUITE}test_stable"])]
    (suite[3] / "stock.cache").unlink()
    (suite[3] / "stack.cache").unlink()
    full, _ = run_suite(suite, tmp_path / "full", select="full")
    assert {row.test_id for row in full} - {row.test_id for row in run_suite(suite, tmp_path / "all")[0]} == {
        "area/test_suite.py::TestSweepOpInfo::test_every_op"}


def test_a_mapped_file_that_does_not_collect_on_stock_is_reported_and_fails_the_run(tmp_path, suite):
    stack, upstream = suite[:2]
    (stack.dir / "upstream-tests.toml").write_text(SUITE_MAP.replace(
        '"test/area/test_not_in_dir.py"]', '"test/area/test_not_in_dir.py", "test/area/test_needs_the_stack.py"]'))
    (upstream / "test/area/test_needs_the_stack.py").write_text(
        'import os\n\nif os.environ.get("FAKE_PATCHED") != "1":\n    raise ImportError("needs a newer torch")\n\n\n'
        'def test_here():\n    pass\n')
    with pytest.raises(WorkFailed, match=r"^upstream tests: test/area/test_needs_the_stack.py does not collect on "
                                         r"stock in .*/upstream: the gate cannot vouch for it$"):
        _, out = run_suite(suite, tmp_path / "reports")
    summary = json.loads((tmp_path / "reports" / "summary.json").read_text())
    assert summary["not_collected_on_stock"] == ["area/test_needs_the_stack.py"]


def test_an_empty_series_has_nothing_to_run(tmp_path, monkeypatch):
    patches = tmp_path / "patches"
    write_stack_data(patches, "0" * 40)
    out = io.StringIO()
    assert upstream_tests.main(Stack(patches), out, upstream=fake_upstream_tests(tmp_path / "upstream"),
                               select="quick", progress=quiet) == []
    assert out.getvalue() == "the series is empty: no tests of its own, nothing to compare\n"


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


def test_upstream_tests_refusals(tmp_path, suite, monkeypatch):
    stack, upstream, patched, _ = suite
    monkeypatch.delenv("NDV_UPSTREAM_TESTS", raising=False)
    with pytest.raises(BadInput, match=r"^--upstream-tests .*/nowhere: no test/ folder"):
        upstream_tests.main(stack, io.StringIO(), progress=quiet, upstream=tmp_path / "nowhere")
    (tmp_path / "empty" / "test").mkdir(parents=True)
    with pytest.raises(WorkFailed, match=rf"^{stack.series()[0]}: its test hunks do not apply to .*/empty/test "
                                         r"\(git apply, no fuzz\): error: test/area/test_suite.py: No such file"):
        upstream_tests.main(stack, io.StringIO(), progress=quiet, upstream=tmp_path / "empty")
    with pytest.raises(BadInput, match=r"^test needs upstream's test files .*: pass --upstream-tests DIR or set "
                                       r"NDV_UPSTREAM_TESTS=DIR"):
        upstream_tests.main(stack, io.StringIO(), progress=quiet, select="quick")
    with pytest.raises(BadInput, match="give one"):
        upstream_tests.main(stack, io.StringIO(), progress=quiet, upstream=upstream, pytorch=tmp_path)
    with pytest.raises(BadInput, match=r"^--select is for the upstream test files of --upstream-tests"):
        upstream_tests.main(stack, io.StringIO(), progress=quiet, select="all", pytorch=tmp_path)


def test_the_entry_point_has_help_and_refuses_bad_usage(tmp_path, capsys, monkeypatch):
    from ndvstack import cli
    with pytest.raises(SystemExit) as exit_:
        cli.main(["test", "--help"])
    assert exit_.value.code == 0
    help_text = capsys.readouterr().out
    assert help_text.startswith("usage: stack.sh test ")
    assert "--upstream-tests DIR" in help_text and "--select {own,quick,all,full}" in help_text
    with pytest.raises(SystemExit) as exit_:
        cli.main(["test", "--upstream-tests", str(tmp_path), "--select", "some"])
    assert exit_.value.code == 2
    assert "argument --select: invalid choice: 'some'" in capsys.readouterr().err
    # The stack's own tests need upstream's test files: one line naming both ways to give them.
    monkeypatch.delenv("NDV_UPSTREAM_TESTS", raising=False)
    assert cli.main(["test"]) == 2
    assert capsys.readouterr().err == (
        "error: test needs upstream's test files (the stack's tests are methods its patches add to them): pass "
        "--upstream-tests DIR or set NDV_UPSTREAM_TESTS=DIR (e.g. ../shared/upstream-2.15)\n")


def shared_upstream_tests() -> Path:
    return Path(os.environ.get("NDV_SHARED_UPSTREAM_TESTS") or REPO_ROOT.parent / "shared" / "upstream-2.15")


def test_the_real_maps_files_are_in_the_shared_upstream_2_15_folder():
    """--select all|quick on ../shared/upstream-2.15 runs every file the map names there; the files
    it lacks are checkout_only (run by --pytorch only)."""
    shared = shared_upstream_tests()
    if not (shared / "test").is_dir():
        pytest.skip(f"{shared} has no test/ (set NDV_SHARED_UPSTREAM_TESTS)")
    coverage = Stack(DEFAULT_PATCHES).coverage()
    named = {t.split("::")[0] for entry in coverage for t in (*entry.tests, *(q.test for q in entry.quick))}
    assert sorted(t for t in named if not (shared / t).is_file()) == []
    checkout_only = {t.split("::")[0] for entry in coverage for t in entry.checkout_only}
    assert checkout_only and all(not (shared / t).is_file() for t in checkout_only)


def test_the_real_maps_quick_gate_holds_the_known_regressions_tests():
    """The quick selection of the shipped map reaches the two upstream tests the stack once
    regressed (issue 13), by pytest's own -k matching."""
    from _pytest.mark.expression import Expression
    stack = Stack(DEFAULT_PATCHES)
    runs = upstream_tests.suite_runs(stack, "quick", touched=[entry.path for entry in stack.coverage()])
    for test_id in ("dynamo/test_aot_autograd.py::AotAutogradFallbackTests::test_alias_inputs",
                    "functorch/test_aotdispatch.py::TestAOTModuleSimplified::test_saved_tensors_hooks_donated_buffers"):
        file, cls, name = test_id.split("::")
        names = (file.rsplit("/", 1)[1], cls, name)
        assert any(test_id.startswith(run.target + "::") and (run.k is None or Expression.compile(run.k).evaluate(
            lambda sub, **_: any(sub.lower() in n.lower() for n in names))) for run in runs), test_id


def test_a_stack_test_pytest_does_not_collect_by_its_id_is_a_failure_that_says_why(tmp_path, suite):
    """A test collected under other names (a device-type class, instantiated per device and removed
    from the module) is not found by its id, and pytest then runs none of the ids it was given: the
    run says so and fails."""
    upstream, patched = suite[1], suite[2]
    fake = fake_pytorch_tree(tmp_path / "pytorch2")
    fake.base = fake.commit("Upstream's tests\n\nThe base.\n", UPSTREAM_FILES)
    fake.git.run("checkout", "--quiet", "-b", "work")
    other = "test/area/test_other.py"
    fake.commit("[autograd] A fix\n\nWith a device-type test.\n",
                {other: FAKE_OTHER + "\n\nclass TestGeneric(unittest.TestCase):\n    def test_on_device(self):\n"
                                     "        pass\n\n\ndel TestGeneric  # stands for instantiate_device_type_tests\n"})
    stack_from_commits(fake, tmp_path / "patches2", head="work")
    stack = Stack(tmp_path / "patches2")
    out = io.StringIO()
    with pytest.raises(WorkFailed, match=r"\(first: test/area/test_other.py::TestGeneric::test_on_device: not "
                                         r"collected with the stack\)$"):
        upstream_tests.main(stack, out, tmp_path / "reports", progress=quiet, upstream=upstream,
                            patched_python=patched)
    assert ("not collected: area/test_other.py: the stack's 1 tests: ERROR: not found: area/test_other.py::TestGeneric"
            "::test_on_device (no match in any of [<Module test_other.py>])") in out.getvalue().splitlines()


def test_a_kept_test_must_pass_on_both_sides_a_new_one_fail_on_stock():
    from ndvstack.upstream_tests import stack_test_verdict

    assert stack_test_verdict("kept", "passed", "passed") == ""
    assert "must pass there" in stack_test_verdict("kept", "failed", "passed")
    assert "with the stack" in stack_test_verdict("kept", "passed", "failed")
    assert "cannot show the fix" in stack_test_verdict("new", "passed", "passed")
    assert stack_test_verdict("new", "failed", "passed") == ""
