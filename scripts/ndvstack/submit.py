"""submit: the stack to upstream with the real ghstack, one pull request per patch.

Preflight, each refusal a one-line error with nothing changed: the stack lint-clean
(upstream's form included); the checkout clean; every patch's author the submitter's git
identity in that checkout (a CLA check refuses commits by anyone else); its remote the
upstream repository itself (ghstack pushes its
gh/<user>/<n>/* branches there, so a fork cannot work); ghstack configured; the base
(or REV) on the remote's target branch (else ghstack would submit upstream's own
commits too); the scoreboard green with the stack overlaid; the stack applying there.
With dry_run: every check but the scoreboard, then the plan; nothing is pushed or written.
Then the stack goes onto a new branch, ghstack submits it, and the trailers ghstack
writes into the commits (ghstack-source-id:, Pull-Request:) are carried back into
patches/: without them the next submit would open a second set of pull requests.
"""

from __future__ import annotations

import asyncio
import configparser
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from ndvstack import apply, export, lint
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.git import Git
from ndvstack.repo import open_checkout, require_base, require_clean, require_commit
from ndvstack.stack import AUTHOR_FILE, REPO_ROOT, Identity, Stack

_GITHUB_URL = re.compile(r"^(?:https://github\.com/|git@github\.com:|ssh://git@github\.com/)"
                         r"(?P<owner>[^/]+)/(?P<name>[^/]+?)(?:\.git)?/?$")


def upstream_of(base_repo: str) -> tuple[str, str]:
    owner, name = _GITHUB_URL.match(base_repo).group("owner", "name")
    return owner, name


def require_upstream_remote(git: Git, remote: str, owner: str, name: str) -> None:
    url = git.run("config", "--get", f"remote.{remote}.url", check=False).stdout.strip()
    if not url:
        raise BadInput(f"{git.cwd}: has no remote {remote}; add {owner}/{name} as it or pass --remote")
    match = _GITHUB_URL.match(url)
    if not match or (match["owner"], match["name"]) != (owner, name):
        raise BadInput(f"{git.cwd}: remote {remote} is {url}, not github.com/{owner}/{name}: ghstack "
                       f"pushes branches to the repository the pull requests are for, so it needs "
                       f"push access there (a fork does not work); pass --remote for the upstream one")


def require_submitter_is_author(git: Git, stack: Stack) -> Identity:
    """Every patch is by the submitter (git config user.name/user.email in the checkout)."""
    submitter = Identity(git.out("config", "user.name", check=False) or "(unset)",
                         git.out("config", "user.email", check=False) or "(unset)")
    for patch in stack.patches():
        author = Identity(patch.author, patch.email)
        if author != submitter:
            raise BadInput(f"{patch.name} is by {author}, but {git.cwd} submits as {submitter} (git config "
                           f"user.name/user.email): a CLA check refuses commits by anyone but the submitter; set the "
                           f"stack's author in {stack.dir / AUTHOR_FILE} and re-export (stack.sh export), or submit "
                           f"as {author}")
    return submitter


def read_ghstack_config() -> tuple[str, str]:
    """(username, token) from ghstack's own config file; the token is never printed."""
    path = Path(os.environ.get("GHSTACKRC_PATH", Path.home() / ".ghstackrc"))
    config = configparser.ConfigParser()
    config.read(path)
    username = config.get("ghstack", "github_username", fallback="")
    token = config.get("ghstack", "github_oauth", fallback="")
    if not username or not token:
        raise BadInput(f"ghstack is not configured: {path} needs github_username and github_oauth "
                       f"in its [ghstack] section (run `ghstack` once to write it)")
    return username, token


def run_scoreboard() -> None:
    """The semantics scoreboard must hold with the stack overlaid (test/semantics)."""
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "auto", "test/semantics"],
                            cwd=REPO_ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        summary = (result.stdout.strip().splitlines() or ["no output"])[-1]
        raise BadInput(f"the scoreboard is not green with the stack: {summary}")


def transplant(git: Git, base: str, trees_from: list[str], rest_from: list[str]) -> str:
    """Commits on BASE with the trees of TREES_FROM and the authors (name, email, date) and
    messages of REST_FROM, pairwise; returns the new head. Messages pass through
    `git stripspace`, as `git am` would pass them: ghstack's first submission leaves an extra
    blank line before its trailers, which an apply/export round trip would not keep."""
    head = base
    for tree_commit, commit in zip(trees_from, rest_from, strict=True):
        name, email, date = git.out("log", "-1", "--format=%an%x00%ae%x00%aD", commit).split("\0")
        env = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_AUTHOR_DATE": date}
        message = git.out("stripspace", input=git.run("log", "-1", "--format=%B", commit).stdout) + "\n"
        head = git.out("commit-tree", f"{tree_commit}^{{tree}}", "-p", head, input=message, env=env)
    return head


def pr_stack(git: Git, remote: str, username: str, ghnum: str, start: str) -> list[str]:
    """The commits of a ghstack PR's orig branch on START, bottom first."""
    git.run("fetch", "--quiet", remote, f"refs/heads/gh/{username}/{ghnum}/orig")
    return git.out("rev-list", "--reverse", f"{start}..FETCH_HEAD").splitlines()


def main(stack: Stack, pytorch: Path, onto: str | None = None, base_branch: str | None = None,
         remote: str = "origin", branch: str | None = None, github=None, username: str | None = None,
         sh=None, scoreboard=run_scoreboard, dry_run: bool = False, out=sys.stdout,
         progress=lambda msg: print(msg, file=sys.stderr)) -> list[str]:
    """Submits; returns the pull requests' URLs, bottom of the stack first (none with DRY_RUN)."""
    import ghstack.github_real
    import ghstack.shell
    import ghstack.submit

    lint.check(stack, messages=True)
    git = open_checkout(pytorch)
    require_clean(git)
    submitter = require_submitter_is_author(git, stack)
    base = stack.base
    owner, name = upstream_of(base.repo)
    require_upstream_remote(git, remote, owner, name)
    if github is None:
        username, token = read_ghstack_config()
        github = ghstack.github_real.RealGitHubEndpoint(oauth_token=token, proxy=None, github_url="github.com")
    base_sha = require_base(git, base)
    start = require_commit(git, onto, "the revision") if onto else base_sha
    if base_branch is None:
        head_ref = git.run("rev-parse", "--abbrev-ref", f"{remote}/HEAD", check=False).stdout.strip()
        if not head_ref.startswith(f"{remote}/"):
            raise BadInput(f"{git.cwd}: {remote}/HEAD is not set; pass --base-branch (e.g. main)")
        base_branch = head_ref.split("/", 1)[1]
    target = base_branch
    target_sha = require_commit(git, f"{remote}/{target}", "the remote branch")
    if not git.ok("merge-base", "--is-ancestor", start, target_sha):
        raise BadInput(f"{start[:12]} is not on {remote}/{target}: ghstack would submit the commits "
                       f"between them too; apply onto {remote}/{target} (--onto) or submit against a "
                       f"branch that contains it (--base-branch)")
    if dry_run:
        print(f"dry run: every check passed but the scoreboard (not run); would submit {len(stack.series())} "
              f"pull requests to {owner}/{name} {target} as {submitter}, onto {start[:12]}:", file=out)
        for number, patch in enumerate(stack.patches(), 1):
            print(f"  {number}. {patch.subject}", file=out)
        return []
    progress("submit: the scoreboard with the stack overlaid ...")
    scoreboard()
    branch = branch or time.strftime("ndv/submit-%Y%m%d-%H%M%S", time.gmtime())
    apply.main(stack, pytorch, onto=onto, branch=branch, progress=progress)

    sh = sh or ghstack.shell.Shell(cwd=str(git.cwd))
    diffs = asyncio.run(ghstack.submit.main(
        msg="Update", username=username, github=github, sh=sh, repo_owner_opt=owner,
        repo_name_opt=name, github_url="github.com", remote_name=remote, base_opt=target,
        stack=True, direct_opt=False))
    urls = [diff.pr_url for diff in diffs]

    # patches/ takes the stack as the top PR's orig branch holds it (what `ghstack checkout`
    # gives a reviewer: ghstack's trailers and its author dates), so that a resubmit that
    # ghstack skips changes nothing. Submitted onto another REV, the same messages and
    # authors go onto the stack at the base, where patches/ lives.
    top = diffs[-1].elab_diff
    submitted = pr_stack(git, remote, top.username, top.ghnum, start)
    if len(submitted) != len(stack.series()):
        raise WorkFailed(f"the top pull request holds {len(submitted)} commits on {start[:12]}, the stack "
                         f"has {len(stack.series())}; patches/ unchanged")
    trees = submitted
    if start != base_sha:
        at_base = apply.apply_detached(git, stack.patches(), base_sha, progress)
        trees = git.out("rev-list", "--reverse", f"{base_sha}..{at_base}").split()
    head = transplant(git, base_sha, trees, submitted)
    export.write_stack(stack, git, base_sha, head, "the submitted stack")
    for url in urls:
        progress(f"submit: {url}")
    progress(f"submit: {len(urls)} pull requests; their trailers are now in {stack.dir} (commit them)")
    return urls
