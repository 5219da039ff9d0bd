"""checkout: a reviewer's copy of the stack.

From patches/ (default): the stack applied at the base on a new branch of the checkout,
or with --worktree in a new worktree beside it; then the commands to run next.
From a pull request (--pr URL): `ghstack checkout` of it, then the PR's stack compared
with patches/, patch by patch; exit 1 when they differ. A stack submitted onto another
revision (--onto: upstream's main, since the base is on a release branch) is its commits
not on that revision, as ghstack counts them (git merge-base); they are carried to the base
with `git am --3way`, as apply carried patches/ from it, and compared there.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from ndvstack import apply, lint
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.export import format_patches
from ndvstack.repo import (DEFAULT_BRANCH, open_checkout, require_base, require_clean, require_commit,
                           require_new_branch)
from ndvstack.stack import Patch, Stack
from ndvstack.submit import read_ghstack_config, transplant

NEXT_STEPS = """\
next:
  ./scripts/stack.sh run -- python {tree}/test/<a test file of the stack>   # with the stack overlaid
  ./scripts/test.sh --pytorch {tree}                 # the upstream tests that cover it, stock vs stack
  ./scripts/build.sh                                                    # the patched wheel in dist/
  ./scripts/build.sh --from-source --pytorch {tree} --dry-run   # the source build's plan, then without --dry-run
"""


def from_patches(stack: Stack, pytorch: Path, branch: str, worktree: Path | None, out, progress) -> None:
    if worktree is None:
        apply.main(stack, pytorch, branch=branch, progress=progress)
        print(NEXT_STEPS.format(tree=pytorch), end="", file=out)
        return
    lint.check(stack)
    git = open_checkout(pytorch)
    require_new_branch(git, branch)
    if worktree.exists():
        raise BadInput(f"{worktree}: already exists; give --worktree a new folder")
    head = apply.apply_detached(git, stack.patches(), require_base(git, stack.base), progress)
    git.run("worktree", "add", "--quiet", "-b", branch, str(worktree), head)
    progress(f"{worktree}: worktree on {branch}, {len(stack.series())} patches on the base")
    print(NEXT_STEPS.format(tree=worktree), end="", file=out)


def compare(stack: Stack, exported: Path, names: list[str], out) -> list[str]:
    """Patch-by-patch comparison of EXPORTED (NAMES in order) with the stack; returns the
    lines that report a difference."""
    ours = stack.series()
    differences = []
    for number in range(max(len(ours), len(names))):
        if number >= len(names):
            differences.append(f"{ours[number]}: not in the pull request's stack")
        elif number >= len(ours):
            differences.append(f"{names[number]}: in the pull request's stack only")
        else:
            mine = (stack.dir / ours[number]).read_text().splitlines()
            theirs = (exported / names[number]).read_text().splitlines()
            if mine == theirs and ours[number] == names[number]:
                print(f"same: {ours[number]}", file=out)
                continue
            line = next((i for i, (a, b) in enumerate(zip(mine, theirs)) if a != b), min(len(mine), len(theirs)))
            differences.append(f"{ours[number]}: differs from the PR's {names[number]} at line {line + 1}: "
                               f"{(mine + [''])[line]!r} vs {(theirs + [''])[line]!r}")
    for line in differences:
        print(f"DIFFERS: {line}", file=out)
    return differences


def carry_to_base(git, start: str, head: str, base_sha: str, tmp: Path, progress) -> list[str]:
    """The commits start..head re-applied on BASE_SHA with `git am --3way`; returns them."""
    names = format_patches(git, start, head, tmp)
    at_base = apply.apply_detached(git, [Patch.load(tmp / name) for name in names], base_sha, progress)
    return git.out("rev-list", "--reverse", f"{base_sha}..{at_base}").split()


def from_pull_request(stack: Stack, pytorch: Path, url: str, onto: str | None, remote: str, github, sh,
                      out, progress) -> None:
    import ghstack.checkout
    import ghstack.github_real
    import ghstack.shell

    git = open_checkout(pytorch)
    require_clean(git)
    base_sha = require_base(git, stack.base)
    onto_sha = require_commit(git, onto, "the revision") if onto else None
    if github is None:
        _, token = read_ghstack_config()
        github = ghstack.github_real.RealGitHubEndpoint(oauth_token=token, proxy=None, github_url="github.com")
    sh = sh or ghstack.shell.Shell(cwd=str(git.cwd))
    asyncio.run(ghstack.checkout.main(pull_request=url, github=github, sh=sh, remote_name=remote))
    head = git.out("rev-parse", "HEAD")
    if onto_sha is None:
        start = base_sha
        if not git.ok("merge-base", "--is-ancestor", base_sha, head):
            raise WorkFailed(f"{url} is not on the base {base_sha[:12]}: it was submitted onto another "
                             f"revision; pass that branch with --onto (e.g. {remote}/main)")
    else:
        start = git.out("merge-base", onto_sha, head)
    commits = git.out("rev-list", "--reverse", f"{start}..{head}").split()
    where = "the base" if start == base_sha else f"{onto} ({start[:12]})"
    progress(f"checkout: {url}: {len(commits)} commits on {where}, checked out in {git.cwd}")
    with tempfile.TemporaryDirectory(prefix="ndv-pr-") as tmp:
        if start != base_sha:
            commits = carry_to_base(git, start, head, base_sha, Path(tmp, "submitted"), progress)
        # Normalised as submit writes patches/: messages as `git am` would keep them.
        normalized = transplant(git, base_sha, commits, commits)
        names = format_patches(git, base_sha, normalized, Path(tmp, "at-base"))
        differences = compare(stack, Path(tmp, "at-base"), names, out)
    if differences:
        raise WorkFailed(f"the pull request's stack differs from {stack.dir} in {len(differences)} patches")
    print(f"the pull request's stack is patches/ byte for byte ({len(names)} patches)", file=out)


def main(stack: Stack, pytorch: Path, pr: str | None = None, worktree: Path | None = None,
         branch: str = DEFAULT_BRANCH, remote: str = "origin", onto: str | None = None, github=None, sh=None,
         out=sys.stdout, progress=lambda msg: print(msg, file=sys.stderr)) -> None:
    if onto and pr is None:
        raise BadInput("--onto goes with --pr: the revision the pull request's stack was submitted onto")
    if pr is None:
        from_patches(stack, pytorch, branch, worktree, out, progress)
    else:
        from_pull_request(stack, pytorch, pr, onto, remote, github, sh, out, progress)
