"""test --each-prefix on a three-patch test double that does not bisect: patch 2's test needs
what patch 3 adds, so the whole stack passes its tests and prefix 2 does not."""

import io
import subprocess
from pathlib import Path

import pytest

from fake_stack import MARKER, PYTHON_FILE, TEST_FILE, TEST_TEXT, make_partial_tree, overlay_src, quiet, stack_data
from ndvstack import each_prefix, export
from ndvstack.errors import WorkFailed

ROOT = Path(__file__).resolve().parents[1]
LATER = "_NDV_LATER = True\n"
NEEDS_LATER = "\n    def test_needs_patch_3(self):\n        self.assertTrue(function._NDV_LATER)\n"
PATCH_3_TEST = "\n    def test_later(self):\n        self.assertTrue(hasattr(function, '_NDV_LATER'))\n"


@pytest.fixture(scope="module")
def unbisectable(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("each-prefix")
    with pytest.MonkeyPatch.context() as mp:  # the autouse git identity is per test; this is per module
        from fake_pytorch import environment_for_git
        for key, value in environment_for_git(tmp).items():
            mp.setenv(key, value)
        tree = make_partial_tree(tmp / "tree")
        tree.git.run("checkout", "--quiet", "-b", "ndv/stack")
        text = (tree.path / PYTHON_FILE).read_text()
        tree.commit("[autograd] Test double: a Python hunk\n\nMarks the module.\n",
                    {PYTHON_FILE: text + "\n" + MARKER}, date="2026-06-01T00:00:00+00:00")
        tree.commit("[autograd] Test double: C++ with a shim\n\nA C++ file and its test.\n",
                    {"torch/csrc/autograd/ndv_test_double.cpp": "// test double\n",
                     TEST_FILE: TEST_TEXT + NEEDS_LATER}, date="2026-06-02T00:00:00+00:00")
        tree.commit("[autograd] Test double: a later hunk\n\nWhat patch 2's test needs.\n",
                    {PYTHON_FILE: text + "\n" + MARKER + LATER, TEST_FILE: TEST_TEXT + NEEDS_LATER + PATCH_3_TEST},
                    date="2026-06-03T00:00:00+00:00")
        stack = stack_data(tmp / "patches")
        names = export.main(stack, tree.path, progress=quiet)
    return stack, overlay_src(tmp / "overlay", names[1]), tmp


def test_each_prefix_reports_per_prefix_and_fails_the_one_that_does_not_bisect(unbisectable, tmp_path):
    stack, src, tmp = unbisectable
    names = stack.series()
    out = io.StringIO()
    with pytest.raises(WorkFailed, match=rf"^test --each-prefix: 1 of 3 prefixes fail their own tests "
                                         rf"\(first: {names[1]}\)$"):
        each_prefix.main(stack, out, tmp_path / "junit", overlay_src=src, cache=tmp / "cache", progress=quiet)
    lines = [line.rsplit(" (", 1)[0] if line.endswith("s)") else line for line in out.getvalue().splitlines()]
    module = "test.autograd.test_ndv_double.TestNdvDouble"
    assert lines == [
        f"[1/3] {names[0]}: no test file of its own to run here",
        f"[2/3] {names[1]}: {TEST_FILE}: 2 passed, 1 failed, 0 skipped",
        f"  FAILED {module}::test_needs_patch_3",
        f"[3/3] {names[2]}: {TEST_FILE}: 4 passed, 0 failed, 0 skipped",
    ]
    assert sorted(p.name for p in (tmp_path / "junit").iterdir()) == ["prefix-02.xml", "prefix-03.xml"]
    # Each prefix is a stack of its own, in the cache, with the shims of its patches only.
    prefixes = sorted((tmp / "cache" / "prefixes").iterdir())
    series = sorted((p / "patches" / "series").read_text().split() for p in prefixes)
    assert series == [names[:1], names[:2], names[:3]]
    shims = {len(s): (p / "overlay" / "shims.toml").read_text()
             for p, s in ((p, (p / "patches" / "series").read_text().split()) for p in prefixes)}
    assert shims[1] == "shim = []\n" and f'patch = "{names[1]}"' in shims[2] and shims[3] == shims[2]


@pytest.mark.parametrize("option", [["--pytorch", "/nowhere"], ["--upstream-tests", "/nowhere"],
                                    ["--select", "quick"], ["--patched-python", "/nowhere/python"]])
def test_each_prefix_refuses_the_options_of_a_checkout_or_another_python(option):
    result = subprocess.run([str(ROOT / "scripts" / "test.sh"), "--each-prefix", *option],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr == ("error: --each-prefix runs the stack's own test files on the overlay; "
                             f"not with {option[0]}\n")
