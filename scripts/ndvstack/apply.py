"""apply: create a branch at the base (or REV) of a pytorch checkout with the stack on it.

Each patch goes in with `git am --3way` (author, date and message kept; never fuzz). The
patches are applied in a throw-away worktree, so the user's checkout is not touched until
the whole stack has applied: on a conflict it is exactly as it was.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ndvstack import lint
from ndvstack.repo import (DEFAULT_BRANCH, open_checkout, require_base, require_new_branch,
                               require_clean, require_commit)
from ndvstack.errors import WorkFailed
from ndvstack.git import Git
from ndvstack.hunks import rejected_hunks
from ndvstack.stack import Patch, Stack


def _failed_hunks(worktree: Git, patch: Patch) -> list[str]:
    """Which files and hunks of PATCH do not apply at the worktree's HEAD."""
    failed = rejected_hunks(worktree, patch.path, patch.files)
    worktree.run("reset", "--hard", "--quiet")
    worktree.run("clean", "-fdq")
    return failed or [f"{path} (3-way merge failed)" for path in patch.touched]


def _apply_in(worktree: Git, patches: list[Patch], rev: str, progress) -> str:
    for number, patch in enumerate(patches, 1):
        start = time.monotonic()
        result = worktree.run("am", "--3way", "--keep-non-patch", "--whitespace=nowarn", "--quiet",
                              str(patch.path), check=False)
        if result.returncode != 0:
            worktree.run("am", "--abort", check=False)
            failed = _failed_hunks(worktree, patch)
            raise WorkFailed(f"{patch.name} does not apply on {rev[:12]} after {number - 1} patches: "
                             f"{'; '.join(failed)}; the checkout is unchanged")
        progress(f"applied [{number}/{len(patches)}] {patch.name} ({time.monotonic() - start:.2f}s)")
    return worktree.out("rev-parse", "HEAD")


@contextlib.contextmanager
def stacked_worktree(git: Git, patches: list[Patch], sha: str, progress):
    """A throw-away worktree of GIT's repository with PATCHES applied on SHA, as
    (folder, head), removed afterwards. Neither the checkout nor any branch changes; on a
    conflict, WorkFailed."""
    # Inside the git dir: same filesystem as the checkout, and never in the user's work tree.
    tmp = Path(tempfile.mkdtemp(prefix="ndv-apply-", dir=git.out("rev-parse", "--absolute-git-dir")))
    worktree_dir = tmp / "worktree"
    try:
        progress(f"checking out {sha[:12]} in a throw-away worktree")
        git.run("worktree", "add", "--detach", "--quiet", str(worktree_dir), sha)
        yield worktree_dir, _apply_in(Git(worktree_dir), patches, sha, progress)
    finally:
        git.run("worktree", "remove", "--force", str(worktree_dir), check=False)
        git.run("worktree", "prune", check=False)
        shutil.rmtree(tmp, ignore_errors=True)


def apply_detached(git: Git, patches: list[Patch], sha: str, progress) -> str:
    """Applies PATCHES on SHA without changing the checkout or any branch; returns the new head."""
    with stacked_worktree(git, patches, sha, progress) as (_, head):
        return head


def main(stack: Stack, pytorch: Path, onto: str | None = None, branch: str = DEFAULT_BRANCH,
         progress=lambda msg: print(msg, file=sys.stderr)) -> str:
    """Returns the sha of the new branch's head."""
    lint.check(stack)
    git = open_checkout(pytorch)
    require_clean(git)
    base = stack.base
    sha = require_commit(git, onto, "the revision") if onto else require_base(git, base)
    require_new_branch(git, branch)
    patches = stack.patches()
    head = apply_detached(git, patches, sha, progress)
    git.run("branch", branch, head)
    git.run("checkout", "--quiet", branch)
    progress(f"{branch}: {len(patches)} patches on {sha[:12]}, checked out in {git.cwd}")
    return head
