"""own_tests: a patch's tests are the test functions its test hunks add or change, found by
applying them to a copy of a small fake upstream test tree (our own text at upstream-like paths)."""

import pytest

from fake_pytorch import dir_bytes, fake_pytorch_tree, stack_from_commits
from ndvstack import own_tests
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.stack import Stack

UPSTREAM_FILE = "test/area/test_things.py"
UPSTREAM_TEXT = '''\
import unittest


def helper():
    return 1


def test_module_level():
    assert helper() == 1


class TestThings(unittest.TestCase):
    def test_first(self):
        self.assertEqual(helper(), 1)

    def test_second(self):
        self.assertTrue(True)


class TestOther(unittest.TestCase):
    def test_other(self):
        pass
'''
ADDED = '''
    def test_added_by_patch_1(self):
        self.assertEqual(helper() + 1, 2)
'''


def edit(text: str, old: str, new: str) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


@pytest.fixture
def series(tmp_path):
    """(the stack, the upstream folder): three patches against UPSTREAM_TEXT."""
    fake = fake_pytorch_tree(tmp_path / "pytorch")
    fake.base = fake.commit("Upstream's test file\n\nThe base.\n", {UPSTREAM_FILE: UPSTREAM_TEXT})
    fake.git.run("checkout", "--quiet", "-b", "work")
    text = edit(UPSTREAM_TEXT, "        self.assertTrue(True)\n", "        self.assertTrue(True)\n" + ADDED)
    fake.commit("Add a method to TestThings\n\nbody\n", {UPSTREAM_FILE: text})
    text = edit(text, "        self.assertEqual(helper(), 1)\n", "        self.assertEqual(helper(), 1, 'first')\n")
    text = edit(text, "    def test_other(self):", "    @unittest.skipIf(False, 'never')\n    def test_other(self):")
    fake.commit("Change two tests and add a module-level one\n\nbody\n",
                {UPSTREAM_FILE: text + "\n\ndef test_module_added():\n    assert helper()\n",
                 "test/area/test_created.py": "def test_in_a_new_file():\n    pass\n"})
    fake.commit("Change only a helper\n\nbody\n",
                {UPSTREAM_FILE: edit((fake.path / UPSTREAM_FILE).read_text(), "    return 1\n", "    return 0 + 1\n"),
                 "torch/autograd/function.py": edit((fake.path / "torch/autograd/function.py").read_text(),
                                                    "line 3\n", "line 3 changed\n")})
    stack_from_commits(fake, tmp_path / "patches", head="work")
    upstream = tmp_path / "upstream"
    (upstream / "test" / "area").mkdir(parents=True)
    (upstream / UPSTREAM_FILE).write_text(UPSTREAM_TEXT)
    (upstream / "test" / "area" / "helpers.py").write_text("# a helper beside the tests\n")
    return Stack(tmp_path / "patches"), upstream


def test_each_patchs_tests_are_the_test_functions_its_hunks_add_or_change(series, tmp_path):
    stack, upstream = series
    before = dir_bytes(upstream)
    own = own_tests.apply_test_hunks(stack.patches(), upstream, tmp_path / "scratch" / "tree")
    first, second, third = stack.series()
    assert own.per_patch == {
        first: [f"{UPSTREAM_FILE}::TestThings::test_added_by_patch_1"],
        second: ["test/area/test_created.py::test_in_a_new_file", f"{UPSTREAM_FILE}::TestThings::test_first",
                 f"{UPSTREAM_FILE}::TestOther::test_other", f"{UPSTREAM_FILE}::test_module_added"],
        third: [],  # a helper changed: no test function of its own
    }
    assert own.new == [f"{UPSTREAM_FILE}::TestThings::test_added_by_patch_1", f"{UPSTREAM_FILE}::test_module_added",
                       "test/area/test_created.py::test_in_a_new_file"]
    assert own.changed == [f"{UPSTREAM_FILE}::TestThings::test_first", f"{UPSTREAM_FILE}::TestOther::test_other"]
    assert own.patch_of(f"{UPSTREAM_FILE}::TestThings::test_first") == second
    # The copy has every hunk and DIR's helpers; DIR itself is as it was.
    tree = own.tree / "test" / "area"
    assert "return 0 + 1" in (tree / "test_things.py").read_text() and (tree / "helpers.py").is_file()
    assert dir_bytes(upstream) == before


def test_a_test_hunk_that_does_not_apply_without_fuzz_names_the_patch(series, tmp_path):
    stack, upstream = series
    # DIR's text moved on where patch 2's hunk has its context: git apply refuses (no fuzz).
    (upstream / UPSTREAM_FILE).write_text(edit(UPSTREAM_TEXT, "        pass\n", "        pass  # moved on\n"))
    before = dir_bytes(upstream)
    with pytest.raises(WorkFailed, match=rf"^{stack.series()[1]}: its test hunks do not apply to "
                                         rf"{upstream / 'test'} \(git apply, no fuzz\): error: patch failed: "
                                         rf"{UPSTREAM_FILE}:\d+$"):
        own_tests.apply_test_hunks(stack.patches(), upstream, tmp_path / "scratch" / "tree")
    assert dir_bytes(upstream) == before


def test_a_test_file_that_does_not_parse_after_the_hunks_names_the_patch():
    with pytest.raises(WorkFailed, match=r"^0001-x.patch: test/test_x.py does not parse as Python \(line 1: "):
        own_tests.changed_tests("test/test_x.py", "", "def test_x(:\n", "0001-x.patch")


def test_the_upstream_tree_comes_from_the_option_or_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(own_tests.ENV_VAR, raising=False)
    with pytest.raises(BadInput, match=r"^test needs upstream's test files \(.*\): pass --upstream-tests DIR or set "
                                       r"NDV_UPSTREAM_TESTS=DIR \(e\.g\. \.\./shared/upstream-2\.15\)$"):
        own_tests.upstream_dir(None, "test")
    (tmp_path / "dir" / "test").mkdir(parents=True)
    assert own_tests.upstream_dir(tmp_path / "dir", "test") == tmp_path / "dir"
    monkeypatch.setenv(own_tests.ENV_VAR, str(tmp_path / "dir"))
    assert own_tests.upstream_dir(None, "test") == tmp_path / "dir"
    monkeypatch.setenv(own_tests.ENV_VAR, str(tmp_path / "nowhere"))
    with pytest.raises(BadInput, match=r"^NDV_UPSTREAM_TESTS .*/nowhere: no test/ folder"):
        own_tests.upstream_dir(None, "test")
    with pytest.raises(BadInput, match=r"^--upstream-tests .*/other: no test/ folder"):
        own_tests.upstream_dir(tmp_path / "other", "test")
