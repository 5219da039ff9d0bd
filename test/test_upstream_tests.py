"""test.sh without a checkout: the stack's own new upstream test files, stock vs stack."""

import io
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
    assert lines[-1] == "2 tests: 1 newly pass with the stack, 0 fail with it"
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
