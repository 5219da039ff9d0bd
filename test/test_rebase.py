"""rebase --release X.Y.Z: the stack moved to another release in one run, or nothing changed.

The current base and the release are fake pytorch trees (the release's: the base with edits);
the release wheel is a zip of the release tree's torch/ files and a torch/version.py naming it.
"""

from __future__ import annotations

import io
import re
import subprocess
import zipfile
from pathlib import Path

import pytest

from fake_pytorch import dir_bytes, fake_pytorch_tree, five_patch_stack, stack_from_commits
from ndvstack import lint, rebase
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.stack import Stack

RELEASE_COMMIT = "1" * 40
WHEEL = "torch-2.16.0-cp311-cp311-manylinux_2_28_x86_64.whl"


def release_wheel(tree: Path, folder: Path, version: str = "2.16.0+cu132") -> Path:
    """A torch wheel of TREE's torch/**/*.py (a wheel has no C++ sources) and a version.py."""
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / WHEEL
    with zipfile.ZipFile(wheel, "w") as z:
        for path in sorted((tree / "torch").rglob("*.py")):
            if path.is_file():
                z.write(path, path.relative_to(tree).as_posix())
        z.writestr("torch/version.py", f"__version__ = '{version}'\ngit_version = '{RELEASE_COMMIT}'\n")
    return wheel


@pytest.fixture
def stack_and_trees(tmp_path, fake_pytorch):
    five_patch_stack(fake_pytorch)
    stack_from_commits(fake_pytorch, tmp_path / "patches")
    fake_pytorch.git.run("checkout", "--quiet", fake_pytorch.base)
    return Stack(tmp_path / "patches"), fake_pytorch.path


def move(stack, base_tree, release_tree, tmp_path):
    out = io.StringIO()
    wheel = release_wheel(release_tree, tmp_path / "wheels")
    try:
        rebase.main(stack, "2.16.0", out, given_wheel=wheel, upstream=base_tree, release_tree=release_tree,
                    progress=lambda msg: None)
    finally:
        print(out.getvalue())
    return out.getvalue()


def test_a_release_the_stack_applies_to_is_a_clean_move(stack_and_trees, tmp_path):
    stack, base_tree = stack_and_trees
    release = fake_pytorch_tree(tmp_path / "release", {  # upstream moved on, away from the patches' lines
        "torch/autograd/function.py": ("function.py line 1\n", "function.py line 1 (2.16)\n"),
        "torch/csrc/autograd/custom_function.cpp": ("line 30\n", "line 30 (2.16)\n"),
        "test/test_autograd.py": ("line 2\n", "line 2 (2.16)\n")}).path
    before = {name: (stack.dir / name).read_text() for name in stack.series()}
    report = move(stack, base_tree, release, tmp_path)
    assert re.search(r"^0001-.*: applies$", report, re.M) and "conflicts" not in report
    base = Stack(stack.dir).base
    assert (base.release, base.commit, base.wheel) == ("2.16.0", RELEASE_COMMIT, WHEEL)
    assert base.wheel_sha256 == rebase.read_release("2.16.0", tmp_path / "wheels" / WHEEL).sha256
    assert stack.series() == list(before) and lint.findings(stack) == []
    for name, old in before.items():  # the same commits, on the release: only index lines and context move
        new = (stack.dir / name).read_text()
        assert new.split("\n---\n")[0] == old.split("\n---\n")[0], name
    assert f"\nbase-commit: {RELEASE_COMMIT}\n" in (stack.dir / stack.series()[0]).read_text()
    # The rebased patches apply to the release's tree with git am, as upstream would take them.
    git = ["git", "-C", str(release)]
    subprocess.run([*git, "am", *[str(stack.dir / n) for n in stack.series()]], check=True, capture_output=True)
    assert "line 5 (views are detached)" in (release / "torch/autograd/function.py").read_text()


def test_a_conflict_is_reported_per_patch_and_changes_nothing(stack_and_trees, tmp_path):
    stack, base_tree = stack_and_trees
    release = fake_pytorch_tree(tmp_path / "release", {
        "torch/autograd/function.py": ("function.py line 5\n", "function.py line 5 = upstream's own\n")}).path
    before = dir_bytes(stack.dir)
    with pytest.raises(WorkFailed, match="does not move to 2.16.0 whole; patches/ unchanged"):
        move(stack, base_tree, release, tmp_path)
    assert dir_bytes(stack.dir) == before


def test_the_report_names_the_conflict_and_the_releases_lines(stack_and_trees, tmp_path, capsys):
    stack, base_tree = stack_and_trees
    release = fake_pytorch_tree(tmp_path / "release", {
        "torch/autograd/function.py": ("function.py line 5\n", "function.py line 5 = upstream's own\n")}).path
    with pytest.raises(WorkFailed):
        move(stack, base_tree, release, tmp_path)
    report = capsys.readouterr().out
    lines = report.splitlines()
    assert lines[0].startswith(f"rebase: 5 patches onto torch 2.16.0+cu132 ({RELEASE_COMMIT[:12]}, {WHEEL}, sha256 ")
    second = next(i for i, line in enumerate(lines) if line.startswith("0002-"))
    assert lines[second].endswith(": conflicts")
    assert any(re.match(r"  torch/autograd/function\.py:\d+: conflict; the release has: function\.py line 5 = "
                        r"upstream's own", line) for line in lines[second + 1:])
    for prefix in ("0001-", "0003-", "0004-", "0005-"):  # the others are still checked
        assert any(line.startswith(prefix) and line.endswith(": applies") for line in lines), prefix


def test_files_without_a_text_at_the_release_are_named_and_block_the_move(stack_and_trees, tmp_path):
    stack, base_tree = stack_and_trees
    release = fake_pytorch_tree(tmp_path / "release").path
    wheel = release_wheel(release, tmp_path / "wheels")
    before = dir_bytes(stack.dir)
    out = io.StringIO()
    with pytest.raises(WorkFailed):  # no --release-tree: the C++, test and docs files have no text
        rebase.main(stack, "2.16.0", out, given_wheel=wheel, upstream=base_tree, progress=lambda m: None)
    report = out.getvalue()
    assert re.search(r"^0001-.*: applies; not checked, no text at the release: "
                     r"torch/csrc/autograd/custom_function\.cpp$", report, re.M), report
    assert dir_bytes(stack.dir) == before


def test_bad_input_is_one_line(stack_and_trees, tmp_path):
    stack, base_tree = stack_and_trees
    with pytest.raises(BadInput, match=r"^--release 2\.16: not a release X\.Y\.Z$"):
        rebase.main(stack, "2.16", io.StringIO(), wheelhouse=tmp_path)
    with pytest.raises(BadInput, match=r"^--release 2\.15\.0: the stack is already on 2\.15\.0$"):
        rebase.main(stack, "2.15.0", io.StringIO(), wheelhouse=tmp_path)
    other = release_wheel(fake_pytorch_tree(tmp_path / "release").path, tmp_path / "w", version="2.17.0")
    with pytest.raises(BadInput, match=r"its torch/version\.py says 2\.17\.0, not release 2\.16\.0$"):
        rebase.main(stack, "2.16.0", io.StringIO(), given_wheel=other)
    with pytest.raises(BadInput, match=r"^--release-tree .*/nowhere: no such folder$"):
        rebase.main(stack, "2.16.0", io.StringIO(), release_tree=tmp_path / "nowhere", given_wheel=other)
