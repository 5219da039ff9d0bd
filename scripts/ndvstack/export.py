"""export: write the commits base..branch of a pytorch checkout back as patches/.

Deterministic (`git format-patch` with pinned options, so an unchanged stack re-exports
byte-identical) and all-or-nothing: the new patches/ is written beside the old one and
swapped in by rename only once it is complete and lint-clean. Every patch is written with
the stack's one author (patches/author): a commit by anyone else is exported as by it (its
tree, message and author date kept), so the patches' authors cannot drift.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from ndvstack import lint
from ndvstack.atomic import exchange, remove
from ndvstack.repo import DEFAULT_BRANCH, open_checkout, require_base
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.git import Git
from ndvstack.stack import SERIES_FILE, Identity, Stack

SERIES_HEADER = """\
# The stack, in order: one `git format-patch` file per line (quilt's format).
# Written by `scripts/stack.sh export`; edit the commits, not these files.
"""

FORMAT_PATCH_OPTIONS = (
    "--zero-commit", "--full-index", "--no-signature", "--no-numbered", "--no-cover-letter",
    "--no-thread", "--no-to", "--no-cc", "--no-add-header", "--no-notes", "--no-renames",
    "--subject-prefix=PATCH", "--stat=80", "--stat-graph-width=20", "--encode-email-headers",
    "--filename-max-length=100",
)


def format_patches(git: Git, base: str, head: str, out_dir: Path) -> list[str]:
    """Writes one format-patch file per commit of base..head into OUT_DIR; returns their names."""
    if git.out("rev-list", "--count", f"{base}..{head}") == "0":
        return []
    names = git.out("format-patch", *FORMAT_PATCH_OPTIONS, f"--base={base}", "-o", str(out_dir),
                    f"{base}..{head}").splitlines()
    return [Path(name).name for name in names]


def with_author(git: Git, base: str, head: str, author: Identity) -> str:
    """HEAD with every commit of base..head by AUTHOR: the same commits where they already
    are; from the first that is not, new commits (tree, message, author date kept) that no
    ref points to. Returns the new head."""
    parent, rewriting = base, False
    for sha in git.out("rev-list", "--reverse", f"{base}..{head}").split():
        name, email, date = git.out("log", "-1", "--format=%an%x00%ae%x00%ad", "--date=raw", sha).split("\0")
        rewriting = rewriting or (name, email) != (author.name, author.email)
        if not rewriting:
            parent = sha
            continue
        message = git.run("cat-file", "commit", sha).stdout.split("\n\n", 1)[1]
        env = {"GIT_AUTHOR_NAME": author.name, "GIT_AUTHOR_EMAIL": author.email, "GIT_AUTHOR_DATE": date,
               "GIT_COMMITTER_NAME": author.name, "GIT_COMMITTER_EMAIL": author.email, "GIT_COMMITTER_DATE": date}
        parent = git.out("commit-tree", f"{sha}^{{tree}}", "-p", parent, input=message, env=env)
    return parent


def _swap_in(new: Path, target: Path) -> None:
    """Replaces TARGET by NEW in one atomic exchange; TARGET is never missing or half-written.
    The old content ends up at NEW (the caller removes it)."""
    new.chmod(target.stat().st_mode)  # mkdtemp made it private
    exchange(new, target)


def write_stack(stack: Stack, git: Git, base_sha: str, head: str, what: str, upstream_commit: str | None = None,
                data: dict[str, str] | None = None) -> list[str]:
    """Replaces STACK's patches and series by the commits base_sha..head of GIT's repository
    (lint-clean or not at all); returns the names written. WHAT names head in messages.
    UPSTREAM_COMMIT: the upstream commit base_sha stands for (default: the stack's base); DATA:
    files of the stack's own to write instead (base.toml, on a move to another release)."""
    base = stack.base
    author = stack.author()
    merges = git.out("rev-list", "--merges", f"{base_sha}..{head}")
    if merges:
        raise BadInput(f"{git.cwd}: {what} has merge commits (first: {merges.split()[0][:12]}); "
                       f"a stack is linear, rebase it first")
    old_series = stack.dir / SERIES_FILE
    header = SERIES_HEADER
    if old_series.is_file():
        kept = [line for line in old_series.read_text().splitlines(keepends=True)
                if line.startswith("#")]
        header = "".join(kept) or header

    tmp = Path(tempfile.mkdtemp(prefix=f".{stack.dir.name}.export-", dir=stack.dir.parent))
    try:
        for item in stack.dir.iterdir():  # the stack's own data (base, allow-list, ...) carries over
            if item.is_file() and item.suffix != ".patch" and item.name != SERIES_FILE:
                shutil.copy2(item, tmp / item.name)
        for name, text in (data or {}).items():
            (tmp / name).write_text(text)
        upstream = upstream_commit or base.commit
        names = format_patches(git, base_sha, with_author(git, base_sha, head, author), tmp)
        if base_sha != upstream:  # a partial tree: name the upstream base, not its stand-in
            for name in names:
                text = (tmp / name).read_text()
                (tmp / name).write_text(text.replace(f"\nbase-commit: {base_sha}\n",
                                                     f"\nbase-commit: {upstream}\n"))
        (tmp / SERIES_FILE).write_text(header + "".join(f"{name}\n" for name in names))
        problems = lint.findings(Stack(tmp))
        if problems:
            raise WorkFailed(f"export of {what} would make an invalid stack, patches/ unchanged: "
                             + "; ".join(p.replace(str(tmp), str(stack.dir)) for p in problems))
        _swap_in(tmp, stack.dir)
    finally:
        remove(tmp)
    return names


def main(stack: Stack, pytorch: Path, branch: str = DEFAULT_BRANCH,
         progress=lambda msg: print(msg, file=sys.stderr)) -> list[str]:
    """Returns the names written to the series."""
    git = open_checkout(pytorch)
    base_sha = require_base(git, stack.base)
    head = git.commit_of(f"refs/heads/{branch}")
    if head is None:
        raise BadInput(f"{git.cwd}: has no branch {branch}; pass --branch NAME")
    if not git.ok("merge-base", "--is-ancestor", base_sha, head):
        raise BadInput(f"{git.cwd}: branch {branch} does not contain the base {base_sha[:12]}; "
                       f"rebase it onto the base first")
    names = write_stack(stack, git, base_sha, head, f"branch {branch}")
    progress(f"exported {len(names)} patches from {branch} ({head[:12]}) to {stack.dir}, by {stack.author()}")
    notes = lint.message_findings(stack)
    if notes:
        progress(f"note: {len(notes)} findings of upstream's form that lint and submit refuse (first: {notes[0]})")
    return names
