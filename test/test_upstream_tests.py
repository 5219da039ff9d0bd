"""test.sh without a checkout: the stack's own new upstream test files, stock vs stack."""

import io
import sys
import tempfile
import xml.etree.ElementTree as ElementTree

from pathlib import Path

import pytest

from fake_stack import TEST_FILE, TEST_TEXT, double_stack, quiet, stack_data
from ndvstack import export, upstream_tests
from ndvstack.errors import BadInput, WorkFailed


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
    for side in ("stock", "stack"):
        assert ElementTree.parse(tmp_path / "junit" / f"{side}.xml").getroot().iter("testcase")


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


class TestOther(unittest.TestCase):
    def test_not_selected(self):
        self.fail("not in upstream-tests.toml")
'''
NEW_TEST = 'import os\n\n\ndef test_new():\n    assert os.environ.get("FAKE_PATCHED") == "1"\n'
COVERAGE = ('[[cover]]\npath = "torch/csrc/autograd/"\n'
            'tests = ["test/test_autograd.py::TestAutograd", "test/test_not_in_this_checkout.py"]\n')


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
        "test_autograd.TestAutograd::test_stable": ("passed", "passed"),
        "test_new_feature::test_new": ("failed", "passed"),
    }
    lines = out.getvalue().splitlines()
    assert lines[0] == "not run: test/test_not_in_this_checkout.py (not in the checkout at %s)" % fake.base[:12]
    assert "failed   passed   test_autograd.TestAutograd::test_fixed_by_the_stack newly passes" in lines
    assert "failed   passed   test_new_feature::test_new newly passes" in lines
    assert lines[-1] == "5 tests: 2 newly pass with the stack, 0 fail with it (1 fail on both sides)"
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


def test_checkout_mode_refusals(tmp_path, checkout):
    fake, stack, patched = checkout
    with pytest.raises(BadInput, match="--patched-python /nope: no such python"):
        upstream_tests.main(stack, io.StringIO(), progress=quiet, pytorch=fake.path, patched_python="/nope")
    with pytest.raises(BadInput, match="lacks the revision no-such-rev"):
        upstream_tests.main(stack, io.StringIO(), progress=quiet, pytorch=fake.path, onto="no-such-rev")
    (stack.dir / "upstream-tests.toml").unlink()
    with pytest.raises(BadInput, match="upstream-tests.toml: missing"):
        upstream_tests.main(stack, io.StringIO(), progress=quiet, pytorch=fake.path)
