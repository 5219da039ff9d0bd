"""lint --upstream-tests DIR: upstream's linters on the lines each patch adds.

The stacks here are made of commits on a small tree of our own (valid C++ and Python), with
settings of our own in the upstream-tree layout (DIR/lint/), so each linter's finding is one we
chose; test_the_real_stack_is_clean runs upstream's settings on the real stack.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fake_pytorch import FakePytorch, plan, stack_from_commits
from ndvstack import lint_code
from ndvstack.errors import BadInput
from ndvstack.stack import Stack

REPO = Path(__file__).resolve().parents[1]
CPP = "torch/csrc/autograd/thing.cpp"
TEST = "test/test_thing.py"
BASE = {
    CPP: '#include <torch/csrc/autograd/thing.h>\n\nint add_one(int a) {\n  return a + 1;\n}\n',
    TEST: 'import os\n\n\ndef test_one():\n    assert os.sep\n',
}
SETTINGS = {
    ".clang-format": "BasedOnStyle: Google\n",
    "pyproject.toml": '[tool.ruff]\nline-length = 88\n\n[tool.ruff.lint]\nselect = ["F", "E"]\n',
    ".flake8": "[flake8]\nselect = B,E,F\nmax-line-length = 120\n",
}


def _git(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture
def tree(tmp_path):
    """(the fake upstream tree at the base, with our settings in lint/; a function making a stack
    of one commit per dict of changes on a clone of it)."""
    upstream = tmp_path / "upstream"

    def write(folder: Path, files: dict[str, str]) -> None:
        for rel, text in files.items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)

    def make(*commits: dict[str, str], base: dict[str, str] = BASE) -> Stack:
        upstream.mkdir()
        _git(upstream, "init", "--quiet")
        write(upstream, {**base, **{f"lint/{k}": v for k, v in SETTINGS.items()}})
        _git(upstream, "add", "-A")
        _git(upstream, "commit", "--quiet", "-m", "base")
        work = tmp_path / "work"
        subprocess.run(["git", "clone", "--quiet", str(upstream), str(work)], check=True)
        for n, changes in enumerate(commits, 1):
            write(work, changes)
            _git(work, "add", "-A")
            _git(work, "commit", "--quiet", "-m", f"[x] change {n}\n\nWhy.\n{plan('test/test_thing.py')}")
        stack_from_commits(FakePytorch(work, _git(upstream, "rev-parse", "HEAD").strip()), tmp_path / "patches")
        return Stack(tmp_path / "patches")

    return upstream, make


def lint(stack: Stack, upstream: Path) -> list[str]:
    found, _ = lint_code.lint_patches(stack, upstream, torch_dir=None)
    return [str(f) for f in found]


def test_a_finding_is_the_patch_that_adds_it(tree):
    upstream, make = tree
    stack = make({TEST: BASE[TEST] + "\n\ndef test_two():\n    assert os.sep\n"},
                 {TEST: BASE[TEST] + "\n\ndef test_two():\n    unused = os.sep\n    assert os.sep\n"})
    assert lint(stack, upstream) == [
        "0002-x-change-2.patch: test/test_thing.py:9: ruff check: F841 Local variable `unused` is assigned to but "
        "never used",
        "0002-x-change-2.patch: test/test_thing.py:9: flake8: F841 local variable 'unused' is assigned to but never "
        "used",
    ]


def test_clang_format_on_the_cpp_a_patch_adds(tree):
    upstream, make = tree
    stack = make({CPP: BASE[CPP] + "\nint add_two(int a) { return a+2; }\n"})
    assert lint(stack, upstream) == [
        "0001-x-change-1.patch: torch/csrc/autograd/thing.cpp:7: clang-format: would reformat line 7"]


def test_ruff_format_counts_only_what_it_rewrites_on_added_lines(tree):
    upstream, make = tree
    bad_base = BASE[TEST].replace("assert os.sep", "assert os.sep == '/'")  # ruff format: "/"
    stack = make({TEST: bad_base},  # patch 1 writes the misformatted line
                 {TEST: bad_base + "\n\ndef test_two():\n    assert os.sep\n"})  # patch 2 is clean
    assert lint(stack, upstream) == [
        "0001-x-change-1.patch: test/test_thing.py:5: ruff format: would reformat line 5"]


def test_what_the_base_has_is_not_counted(tree):
    upstream, make = tree
    base = {**BASE, TEST: "import sys\n" + BASE[TEST]}  # an unused import at the base
    stack = make({TEST: base[TEST] + "\n\ndef test_two():\n    assert os.sep\n"}, base=base)
    assert lint(stack, upstream) == []


def test_flake8_codes_the_base_file_has_are_not_counted(tree):
    upstream, make = tree
    long_line = "    #" + " a long comment" * 10 + "\n"  # E501 for flake8 (ruff here selects E501 too)
    base = {**BASE, TEST: BASE[TEST] + long_line}
    stack = make({TEST: base[TEST] + "\n\ndef test_two():\n" + long_line + "    assert os.sep\n"}, base=base)
    found, skew = lint_code.lint_patches(stack, upstream, torch_dir=None)
    assert skew == {TEST: {"E501"}}
    assert [(f.linter, f.message.split(" ")[0]) for f in found] == [("ruff check", "E501")]


def test_upstreams_line_linters(tree):
    upstream, make = tree
    stack = make({TEST: BASE[TEST] + "\n\ndef test_two():  \n    assert os.sep  # noqa\n",
                  CPP: BASE[CPP].replace("#include <torch/csrc/autograd/thing.h>",
                                         '#include "torch/csrc/autograd/thing.h"')})
    found = lint(stack, upstream)
    assert "0001-x-change-1.patch: test/test_thing.py:8: SPACES trailing spaces" in found
    assert ("0001-x-change-1.patch: test/test_thing.py:9: NOQA a bare `# noqa`: name the code (`# noqa: F401`)"
            in found)
    assert ('0001-x-change-1.patch: torch/csrc/autograd/thing.cpp:1: INCLUDE `#include "..."`: upstream writes '
            '`#include <...>`' in found)


def test_a_tree_without_settings_is_refused(tree, tmp_path):
    upstream, make = tree
    stack = make({TEST: BASE[TEST] + "# more\n"})
    for name in SETTINGS:
        (upstream / "lint" / name).unlink()
    with pytest.raises(BadInput, match=r"no upstream linter settings \(\.clang-format, pyproject\.toml, "
                                       r"\.flake8\) in it or in its lint/ folder"):
        lint_code.main(stack, upstream, None, out=None)


def test_a_file_without_a_base_text_is_refused(tree):
    upstream, make = tree
    stack = make({"torch/autograd/function.py": "x = 2\n"}, base={**BASE, "torch/autograd/function.py": "x = 1\n"})
    (upstream / "torch/autograd/function.py").unlink()
    with pytest.raises(BadInput, match=r"no base text of torch/autograd/function\.py: --upstream-tests .* lacks "
                                       r"it, and the installed torch is not the base"):
        lint(stack, upstream)


def test_a_file_a_patch_creates_needs_no_base_text(tree):
    upstream, make = tree
    stack = make({"torch/autograd/new.py": "import os\n"})
    assert lint(stack, upstream) == [
        "0001-x-change-1.patch: torch/autograd/new.py:1: ruff check: F401 `os` imported but unused",
        "0001-x-change-1.patch: torch/autograd/new.py:1: flake8: F401 'os' imported but unused"]


def test_the_real_stack_is_clean():
    upstream = Path(os.environ.get("NDV_SHARED_UPSTREAM_TESTS") or REPO.parent / "shared" / "upstream-2.15")
    if not (upstream / "lint").is_dir():
        pytest.skip(f"{upstream} has no lint/ (set NDV_SHARED_UPSTREAM_TESTS)")
    result = subprocess.run([sys.executable, "-m", "ndvstack", "lint", "--upstream-tests", str(upstream)],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "clang-format 23.1.5, ruff 0.17.6, flake8 7.5.0 + flake8-bugbear 26.11.22" in result.stdout
    assert result.stdout.rstrip().endswith("add: no problems")
