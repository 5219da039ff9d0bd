"""Preconditions shared by the verbs that work on a pytorch git checkout."""

from __future__ import annotations

from pathlib import Path

from ndvstack.errors import BadInput
from ndvstack.git import Git
from ndvstack.stack import Base

DEFAULT_BRANCH = "ndv/stack"
# In a partial tree made by base-tree: the root commit that stands in for the upstream base.
PARTIAL_BASE_REF = "refs/ndv/partial-base"

# Files in the git dir that mean an operation is half done.
_IN_PROGRESS = ("rebase-apply", "rebase-merge", "MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD",
                "BISECT_LOG")


def open_checkout(path: Path | str) -> Git:
    """A Git for the top of the checkout at PATH, or BadInput naming it."""
    path = Path(path)
    if not path.is_dir():
        raise BadInput(f"{path}: no such directory (give --pytorch a pytorch git checkout)")
    result = Git(path).run("rev-parse", "--show-toplevel", check=False)
    if result.returncode != 0:
        raise BadInput(f"{path}: not a git checkout (give --pytorch a pytorch git checkout)")
    return Git(result.stdout.strip())


def require_clean(git: Git) -> None:
    git_dir = Path(git.out("rev-parse", "--absolute-git-dir"))
    for name in _IN_PROGRESS:
        if (git_dir / name).exists():
            raise BadInput(f"{git.cwd}: an operation is in progress ({name}); finish or abort it first")
    dirty = git.out("status", "--porcelain", "--untracked-files=normal")
    if dirty:
        first = dirty.splitlines()[0].strip()
        count = len(dirty.splitlines())
        raise BadInput(f"{git.cwd}: the checkout is not clean ({count} changed or untracked paths, "
                       f"first: {first}); commit or stash them first")


def require_commit(git: Git, rev: str, what: str) -> str:
    sha = git.commit_of(rev)
    if sha is None:
        raise BadInput(f"{git.cwd}: lacks {what} {rev}; fetch it first (git fetch origin {rev})")
    return sha


def require_new_branch(git: Git, branch: str) -> None:
    """BRANCH can be created here: a valid name, not taken, and git can commit (identity)."""
    if not git.ok("check-ref-format", "--branch", branch):
        raise BadInput(f"{branch!r} is not a valid branch name")
    if not git.ok("var", "GIT_COMMITTER_IDENT"):
        raise BadInput(f"{git.cwd}: git has no committer identity; set user.name and user.email")
    if git.commit_of(f"refs/heads/{branch}"):
        raise BadInput(f"{git.cwd}: branch {branch} already exists; delete it or pass --branch NAME")


def require_base(git: Git, base: Base) -> str:
    """The checkout's commit for BASE: the base itself or, in a partial tree, its stand-in."""
    if git.run("config", "--get", "ndv.base", check=False).stdout.strip() == base.commit:
        stand_in = git.commit_of(PARTIAL_BASE_REF)
        if stand_in:
            return stand_in
    return require_commit(git, base.commit, f"the base commit (v{base.release})")
