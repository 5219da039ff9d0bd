"""test --each-prefix on a three-patch test double that does not bisect: patch 2's test needs
what patch 3 adds, so the whole stack passes its tests and prefix 2 does not. The patches add
their tests to a fake upstream test file (our own text at an upstream-like path), as methods
of its class; each prefix runs its last patch's tests, on the real torch with the overlay."""

import io
import os
import subprocess
from pathlib import Path

import pytest

from fake_stack import MARKER, PYTHON_FILE, make_partial_tree, overlay_src, quiet, stack_data
from ndvstack import each_prefix, export
from ndvstack.errors import WorkFailed
from ndvstack.repo import PARTIAL_BASE_REF

ROOT = Path(__file__).resolve().parents[1]
LATER = "_NDV_LATER = True\n"
UPSTREAM_FILE = "test/autograd/test_ndv_upstream.py"
UPSTREAM_TEXT = """\
import unittest

import torch.autograd.function as function


class TestNdvUpstream(unittest.TestCase):
    def test_upstream(self):
        self.assertTrue(function.Function)
"""
NEEDS_1 = ("\n    def test_python_hunk_in_effect(self):\n"
           "        self.assertTrue(hasattr(function, '_NDV_TEST_DOUBLE'))\n")
NEEDS_3 = "\n    def test_needs_patch_3(self):\n        self.assertTrue(function._NDV_LATER)\n"
PATCH_3_TEST = "\n    def test_later(self):\n        self.assertTrue(hasattr(function, '_NDV_LATER'))\n"


@pytest.fixture(scope="module")
def unbisectable(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("each-prefix")
    with pytest.MonkeyPatch.context() as mp:  # the autouse git identity is per test; this is per module
        from fake_pytorch import environment_for_git
        for key, value in environment_for_git(tmp).items():
            mp.setenv(key, value)
        tree = make_partial_tree(tmp / "tree")
        # Upstream's test file is part of the base the patches apply to.
        tree.commit("Upstream's test file\n\nThe base.\n", {UPSTREAM_FILE: UPSTREAM_TEXT})
        tree.git.run("update-ref", PARTIAL_BASE_REF, "HEAD")
        tree.git.run("checkout", "--quiet", "-b", "ndv/stack")
        text = (tree.path / PYTHON_FILE).read_text()
        tree.commit("[autograd] Test double: a Python hunk\n\nMarks the module.\n",
                    {PYTHON_FILE: text + "\n" + MARKER}, date="2026-06-01T00:00:00+00:00")
        tree.commit("[autograd] Test double: its tests\n\nOne needs patch 3.\n",
                    {UPSTREAM_FILE: UPSTREAM_TEXT + NEEDS_1 + NEEDS_3}, date="2026-06-02T00:00:00+00:00")
        tree.commit("[autograd] Test double: a later hunk\n\nWhat patch 2's test needs.\n",
                    {PYTHON_FILE: text + "\n" + MARKER + LATER, UPSTREAM_FILE: UPSTREAM_TEXT + NEEDS_1 + NEEDS_3 +
                     PATCH_3_TEST}, date="2026-06-03T00:00:00+00:00")
        stack = stack_data(tmp / "patches")
        export.main(stack, tree.path, progress=quiet)
    upstream = tmp / "upstream"
    (upstream / UPSTREAM_FILE).parent.mkdir(parents=True)
    (upstream / UPSTREAM_FILE).write_text(UPSTREAM_TEXT)
    return stack, overlay_src(tmp / "overlay", None), upstream, tmp


def test_each_prefix_runs_its_last_patchs_tests_and_fails_the_one_that_does_not_bisect(unbisectable, tmp_path):
    stack, src, upstream, tmp = unbisectable
    names = stack.series()
    out = io.StringIO()
    with pytest.raises(WorkFailed, match=rf"^test --each-prefix: 1 of 3 prefixes fail their own tests "
                                         rf"\(first: {names[1]}\)$"):
        each_prefix.main(stack, out, tmp_path / "junit", overlay_src=src, cache=tmp / "cache", upstream=upstream,
                         progress=quiet)
    lines = [line.rsplit(" (", 1)[0] if line.endswith("s)") else line for line in out.getvalue().splitlines()]
    assert lines == [
        f"[1/3] {names[0]}: no tests of its own (it adds or changes no test function)",
        f"[2/3] {names[1]}: 2 tests: 1 passed, 1 failed, 0 skipped, 0 not collected",
        f"  FAILED {UPSTREAM_FILE}::TestNdvUpstream::test_needs_patch_3",
        f"[3/3] {names[2]}: 1 tests: 1 passed, 0 failed, 0 skipped, 0 not collected",
    ]
    assert sorted(p.relative_to(tmp_path / "junit").as_posix() for p in (tmp_path / "junit").rglob("*.xml")) == [
        "prefix-02/stack/autograd.test_ndv_upstream.stack-tests.xml",
        "prefix-03/stack/autograd.test_ndv_upstream.stack-tests.xml"]
    # Each prefix is a stack of its own, in the cache.
    prefixes = sorted((tmp / "cache" / "prefixes").iterdir())
    series = sorted((p / "patches" / "series").read_text().split() for p in prefixes)
    assert series == [names[:1], names[:2], names[:3]]
    assert (upstream / UPSTREAM_FILE).read_text() == UPSTREAM_TEXT  # the hunks went into copies


@pytest.mark.parametrize("option", [["--pytorch", "/nowhere"], ["--select", "quick"],
                                    ["--patched-python", "/nowhere/python"]])
def test_each_prefix_refuses_the_options_of_a_checkout_or_another_python(option):
    result = subprocess.run([str(ROOT / "scripts" / "test.sh"), "--each-prefix", *option],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr == ("error: --each-prefix runs each patch's own tests on the overlay; "
                             f"not with {option[0]}\n")


def test_each_prefix_needs_the_upstream_test_files(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "NDV_UPSTREAM_TESTS"}
    result = subprocess.run([str(ROOT / "scripts" / "test.sh"), "--each-prefix"], capture_output=True, text=True,
                            env=env)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "error: test --each-prefix needs upstream's test files (the stack's tests are methods its patches add to "
        "them): pass --upstream-tests DIR or set NDV_UPSTREAM_TESTS=DIR (e.g. ../shared/upstream-2.15)\n")
