"""submit and checkout drive the real ghstack against its own fake GitHub
(ghstack.github_fake.FakeGitHubEndpoint) and a local bare repository standing in for
github.com/pytorch/pytorch (the checkout's remote URL is the real one, rewritten to the
bare repository with git's url.<base>.insteadOf)."""

import asyncio
import io
import logging
import subprocess
from pathlib import Path

import ghstack.github_fake
import ghstack.github_real
import ghstack.shell
import pytest

from fake_pytorch import FakePytorch, dir_bytes, five_patch_stack, stack_from_commits
from ndvstack import checkout, submit
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.stack import Stack

UPSTREAM_URL = "https://github.com/pytorch/pytorch.git"


def quiet(_):
    pass


class World:
    """The fake GitHub, its bare repository, a stack, and a contributor's checkout."""

    def __init__(self, tmp: Path, fake: FakePytorch, branches: dict[str, str] | None = None):
        """BRANCHES: the upstream branches (name -> rev of FAKE); default main at the base."""
        branches = branches or {"main": fake.base}
        five_patch_stack(fake, trailers=False)
        stack_from_commits(fake, tmp / "patches", head="work")
        self.stack = Stack(tmp / "patches")
        self.upstream = tmp / "upstream"
        self.upstream.mkdir()
        self.github = ghstack.github_fake.FakeGitHubEndpoint(
            ghstack.shell.Shell(cwd=str(self.upstream), testing=True))
        asyncio.run(self.github.state.initialize())
        for name, rev in branches.items():
            fake.git.run("push", "--quiet", "--force", str(self.upstream), f"{rev}:refs/heads/{name}")
        self.checkout = self.clone(tmp / "local")

    def clone(self, target: Path) -> FakePytorch:
        subprocess.run(["git", "clone", "--quiet", str(self.upstream), str(target)], check=True)
        fake = FakePytorch(target, self.stack.base.commit)
        fake.git.run("remote", "set-url", "origin", UPSTREAM_URL)
        fake.git.run("config", f"url.{self.upstream}.insteadOf", UPSTREAM_URL)
        return fake

    def submit(self, **options):
        options = {"base_branch": "main", "github": self.github, "username": "ndv-author",
                   "scoreboard": lambda: None, "progress": quiet,
                   "sh": ghstack.shell.Shell(cwd=str(self.checkout.path), testing=True), **options}
        return submit.main(self.stack, self.checkout.path, **options)

    def pull_requests(self) -> list[dict]:
        query = ('query { repository(name: "pytorch", owner: "pytorch") { pullRequests { nodes { '
                 'number title baseRefName headRefName closed } } } }')
        result = asyncio.run(self.github.graphql(query))
        return result["data"]["repository"]["pullRequests"]["nodes"]


def assert_stacked(world, prs: list[dict], start: str, diffs: bool = True) -> None:
    """Each PR holds its patch on top of the one below: its orig commit's parent is the
    previous PR's (the first's is START), its head branch has that commit's tree, its base
    branch the tree below, so the PR's diff is exactly its patch (with DIFFS: the patch
    file's diff, byte for byte)."""
    git = world.checkout.git
    git.run("fetch", "--quiet", "origin", "+refs/heads/gh/*:refs/remotes/origin/gh/*")

    def tree(rev):
        return git.out("rev-parse", f"{rev}^{{tree}}")

    below = start
    for pr, name in zip(prs, world.stack.series(), strict=True):
        head = git.out("rev-parse", f"origin/{pr['headRefName']}")
        base = git.out("rev-parse", f"origin/{pr['baseRefName']}")
        orig = git.out("rev-parse", "origin/" + pr["headRefName"].removesuffix("/head") + "/orig")
        assert git.out("rev-parse", f"{orig}^") == below, name
        assert (tree(base), tree(head)) == (tree(below), tree(orig)), name
        assert git.ok("merge-base", "--is-ancestor", base, head), name
        if diffs:
            text = (world.stack.dir / name).read_text()
            patch_diff = text[text.index("diff --git "):].split("\nbase-commit: ")[0].rstrip("\n")
            assert git.out("diff", "--full-index", base, head) == patch_diff, name
        below = orig


@pytest.fixture
def world(tmp_path, fake_pytorch):
    return World(tmp_path, fake_pytorch)


@pytest.fixture
def release_world(tmp_path, fake_pytorch):
    """Upstream's shape: the base is on a release branch, not on main. Both fork from one
    commit; main has since changed a context line of the first patch (so the stack goes onto
    main by 3-way merge) and the release branch has its own commit, the base."""
    fork = fake_pytorch.base
    cpp = "torch/csrc/autograd/custom_function.cpp"
    main = fake_pytorch.commit("Main moves on\n\nA change near the first patch.\n",
                               {cpp: fake_pytorch.edit(cpp, "line 8\n", "line 8 (main)\n"),
                                "setup.py": fake_pytorch.edit("setup.py", "line 1\n", "line 1 (main)\n")})
    fake_pytorch.git.run("checkout", "--quiet", "-b", "release/2.13", fork)
    fake_pytorch.base = fake_pytorch.commit("Release 2.13\n\nThe release.\n", {"version.txt": "2.13.0\n"})
    world = World(tmp_path, fake_pytorch, {"main": main, "release/2.13": fake_pytorch.base})
    assert not world.checkout.git.ok("merge-base", "--is-ancestor", world.stack.base.commit, "origin/main")
    return world


def test_submit_opens_one_pull_request_per_patch_in_order(world):
    urls = world.submit(branch="submit-1")
    prs = world.pull_requests()
    assert [pr["title"] for pr in prs] == [
        "[autograd] Detach marked view outputs", "[autograd] Document marked views",
        "[aotautograd] Regenerate no_grad views", "[dynamo] Add new file", "Add tests for marked views"]
    assert urls == [f"https://github.com/pytorch/pytorch/pull/{pr['number']}" for pr in prs]
    # Each PR is stacked on the one below it.
    assert [pr["baseRefName"] for pr in prs[1:]] == [pr["headRefName"].replace("/head", "/base") for pr in prs[1:]]
    assert_stacked(world, prs, world.stack.base.commit)


def test_the_trailers_land_in_patches_and_a_second_submit_opens_no_new_prs(world):
    before = {name: (world.stack.dir / name).read_text() for name in world.stack.series()}
    urls = world.submit(branch="submit-1")
    for url, name in zip(urls, world.stack.series(), strict=True):
        text = (world.stack.dir / name).read_text()
        assert "\nghstack-source-id: " in text and f"\nPull-Request: {url}\n" in text
        # Only the trailers and (ghstack sets it) the author date changed.
        added = [line for line in text.splitlines() if line not in before[name].splitlines()]
        assert [line.split(":")[0] for line in added] == ["Date", "ghstack-source-id", "Pull-Request"]
    exported = dir_bytes(world.stack.dir)
    world.checkout.git.run("checkout", "--quiet", "main")
    urls = world.submit(branch="submit-2")
    assert len(world.pull_requests()) == 5 and len(urls) == 5
    assert dir_bytes(world.stack.dir) == exported  # unchanged stack: same trailers, same bytes


@pytest.mark.parametrize("url, message", [
    ("https://github.com/someone/pytorch.git", r"remote origin is https://github\.com/someone/pytorch\.git, "
                                              r"not github\.com/pytorch/pytorch: .*a fork does not work"),
    ("/srv/mirror/pytorch", r"remote origin is /srv/mirror/pytorch, not github\.com/pytorch/pytorch"),
])
def test_submit_refuses_a_fork_or_other_remote(world, url, message):
    world.checkout.git.run("remote", "set-url", "origin", url)
    before = world.checkout.snapshot()
    with pytest.raises(BadInput, match=message):
        world.submit()
    assert world.checkout.snapshot() == before and world.pull_requests() == []


def test_submit_refuses_when_the_scoreboard_is_not_green(world):
    def red():
        raise BadInput("the scoreboard is not green with the stack: 1 failed, 13 passed")
    before = world.checkout.snapshot()
    with pytest.raises(BadInput, match="scoreboard is not green"):
        submit.main(world.stack, world.checkout.path, base_branch="main", github=world.github,
                    username="ndv-author", scoreboard=red, progress=quiet)
    assert world.checkout.snapshot() == before and world.pull_requests() == []


def test_submit_refuses_a_base_that_is_not_on_the_target_branch(world):
    world.checkout.git.run("push", "--quiet", "origin", f"{world.stack.base.commit}:refs/heads/release")
    world.checkout.git.run("checkout", "--quiet", "--orphan", "other")
    world.checkout.commit("Unrelated\n\nbody\n", {"x.py": "x\n"})
    world.checkout.git.run("push", "--quiet", "origin", "other:refs/heads/other")
    world.checkout.git.run("checkout", "--quiet", "main")
    world.checkout.git.run("fetch", "--quiet", "origin")
    with pytest.raises(BadInput, match=r"is not on origin/other: ghstack would submit the commits between"):
        world.submit(base_branch="other")


def test_submit_refuses_a_dirty_checkout_and_missing_ghstack_config(world, tmp_path, monkeypatch):
    (world.checkout.path / "stray.txt").write_text("x\n")
    with pytest.raises(BadInput, match="the checkout is not clean"):
        world.submit()
    (world.checkout.path / "stray.txt").unlink()
    monkeypatch.setenv("GHSTACKRC_PATH", str(tmp_path / "no-ghstackrc"))
    with pytest.raises(BadInput, match=r"ghstack is not configured: .*no-ghstackrc needs github_username "
                                       r"and github_oauth"):
        submit.main(world.stack, world.checkout.path, base_branch="main", scoreboard=lambda: None,
                    progress=quiet)


def test_the_token_is_never_printed(world, tmp_path, monkeypatch, capfd, caplog, git_identity):
    """The token is in ghstack's config before every call, and each call that reads it is
    made: a refused submit, a submit, a reviewer's checkout (the real endpoint is swapped for
    the fake one, which is handed the token). It appears in no output, log, message, file or
    git object they leave."""
    secret = "ghp_SECRET123"
    rc = tmp_path / "ghstackrc"
    rc.write_text(f"[ghstack]\ngithub_username = someone\ngithub_oauth = {secret}\n")
    monkeypatch.setenv("GHSTACKRC_PATH", str(rc))
    handed = []

    def endpoint(oauth_token, proxy, github_url):
        handed.append(oauth_token)
        return world.github
    monkeypatch.setattr(ghstack.github_real, "RealGitHubEndpoint", endpoint)
    caplog.set_level(logging.DEBUG)
    messages = []

    def red():
        raise BadInput("the scoreboard is not green with the stack: 1 failed")
    with pytest.raises(BadInput) as refused:
        submit.main(world.stack, world.checkout.path, base_branch="main", scoreboard=red,
                    progress=messages.append)
    urls = submit.main(world.stack, world.checkout.path, base_branch="main", branch="submit-1",
                       scoreboard=lambda: None, progress=messages.append)
    reviewer = world.clone(tmp_path / "reviewer")
    report = io.StringIO()
    checkout.main(world.stack, reviewer.path, pr=urls[-1], out=report, progress=messages.append)
    username, token = submit.read_ghstack_config()
    assert handed == [secret] * 3 and len(urls) == 5  # every call had the token and used it
    assert report.getvalue().endswith("the pull request's stack is patches/ byte for byte (5 patches)\n")

    out, err = capfd.readouterr()
    assert secret not in out + err + str(refused.value)
    assert secret not in caplog.text + "\n".join(messages) + report.getvalue()
    assert caplog.records and messages  # the logs and progress searched are not empty
    for folder in (tmp_path, git_identity):
        for path in folder.rglob("*"):
            if path.is_file() and path != rc:
                assert secret.encode() not in path.read_bytes(), path
    for repo in (world.checkout.path, reviewer.path, world.upstream):
        objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo,
                                 capture_output=True, check=True).stdout
        assert len(objects) > 1000 and secret.encode() not in objects, repo
    assert (username, token) == ("someone", secret)


def test_a_reviewers_checkout_of_the_top_pr_is_patches_byte_for_byte(world, tmp_path):
    urls = world.submit(branch="submit-1")
    reviewer = world.clone(tmp_path / "reviewer")
    out = io.StringIO()
    checkout.main(world.stack, reviewer.path, pr=urls[-1], github=world.github, out=out,
                  sh=ghstack.shell.Shell(cwd=str(reviewer.path), testing=True), progress=quiet)
    lines = out.getvalue().splitlines()
    assert lines == [f"same: {name}" for name in world.stack.series()] + [
        "the pull request's stack is patches/ byte for byte (5 patches)"]


def test_a_reviewers_checkout_reports_each_patch_that_differs(world, tmp_path):
    urls = world.submit(branch="submit-1")
    second = world.stack.dir / world.stack.series()[1]
    second.write_text(second.read_text().replace("Say what happens to views.", "Say more."))
    reviewer = world.clone(tmp_path / "reviewer")
    out = io.StringIO()
    with pytest.raises(WorkFailed, match="differs from .* in 1 patches"):
        checkout.main(world.stack, reviewer.path, pr=urls[-1], github=world.github, out=out,
                      sh=ghstack.shell.Shell(cwd=str(reviewer.path), testing=True), progress=quiet)
    assert (f"DIFFERS: {second.name}: differs from the PR's {second.name} at line 6: "
            "'Say more.' vs 'Say what happens to views.'") in out.getvalue().splitlines()


def test_a_reviewers_checkout_from_patches_in_a_worktree(world, tmp_path):
    out = io.StringIO()
    before = world.checkout.snapshot()
    checkout.main(world.stack, world.checkout.path, worktree=tmp_path / "review", branch="review",
                  out=out, progress=quiet)
    git = world.checkout.git
    assert git.out("rev-parse", "review~5") == world.stack.base.commit
    assert "// detach views too" in (tmp_path / "review/torch/csrc/autograd/custom_function.cpp").read_text()
    assert out.getvalue().startswith("next:\n  ./scripts/stack.sh run -- python ")
    after = world.checkout.snapshot()
    assert after["HEAD"] == before["HEAD"] and after["status"] == before["status"]  # the checkout itself is untouched


def test_submit_onto_main_with_the_base_on_a_release_branch_and_a_reviewers_checkout(release_world, tmp_path):
    """The path of a real submission: v2.13.0 is on a release branch, so the stack goes
    --onto origin/main; the PRs are against main, patches/ stays on the base."""
    world = release_world
    before = {name: (world.stack.dir / name).read_text() for name in world.stack.series()}
    main = world.checkout.git.out("rev-parse", "origin/main")
    urls = world.submit(onto="origin/main", branch="submit-1")
    assert len(urls) == 5 and len(world.pull_requests()) == 5
    assert_stacked(world, world.pull_requests(), world.checkout.git.out("rev-parse", "origin/main"), diffs=False)
    # The stack in the PRs sits on main: the top PR's orig branch has main and five commits above it.
    git = world.checkout.git
    orig = git.out("rev-list", "--reverse", f"{main}..origin/gh/ndv-author/5/orig").split()
    assert len(orig) == 5 and git.out("rev-parse", f"{orig[0]}^") == main
    assert git.out("show", f"{orig[0]}:torch/csrc/autograd/custom_function.cpp").count("line 8 (main)") == 1
    # patches/ is still the stack at the base, now with the trailers.
    assert world.stack.base.commit == world.checkout.git.out("rev-parse", "origin/release/2.13")
    for url, name in zip(urls, world.stack.series(), strict=True):
        text = (world.stack.dir / name).read_text()
        assert f"\nPull-Request: {url}\n" in text
        added = [line for line in text.splitlines() if line not in before[name].splitlines()]
        assert [line.split(":")[0] for line in added] == ["Date", "ghstack-source-id", "Pull-Request"]
        removed = [line for line in before[name].splitlines() if line not in text.splitlines()]
        assert [line.split(":")[0] for line in removed] == ["Date"]
    first = (world.stack.dir / world.stack.series()[0]).read_text()
    assert f"\nbase-commit: {world.stack.base.commit}\n" in first
    assert "line 8 (main)" not in "".join((world.stack.dir / n).read_text() for n in world.stack.series())

    reviewer = world.clone(tmp_path / "reviewer")
    sh = ghstack.shell.Shell(cwd=str(reviewer.path), testing=True)
    with pytest.raises(WorkFailed, match=r"/pull/\d+ is not on the base [0-9a-f]{12}: it was submitted onto "
                                         r"another revision; pass that branch with --onto \(e\.g\. origin/main\)"):
        checkout.main(world.stack, reviewer.path, pr=urls[-1], github=world.github, sh=sh, progress=quiet)
    out = io.StringIO()
    checkout.main(world.stack, reviewer.path, pr=urls[-1], onto="origin/main", github=world.github, out=out,
                  sh=ghstack.shell.Shell(cwd=str(reviewer.path), testing=True), progress=quiet)
    assert out.getvalue().splitlines() == [f"same: {name}" for name in world.stack.series()] + [
        "the pull request's stack is patches/ byte for byte (5 patches)"]


def test_checkout_refuses_an_onto_the_checkout_lacks_and_onto_without_pr(world, tmp_path):
    before = world.checkout.snapshot()
    with pytest.raises(BadInput, match=r"lacks the revision origin/nowhere; fetch it first"):
        checkout.main(world.stack, world.checkout.path, pr="https://github.com/pytorch/pytorch/pull/500",
                      onto="origin/nowhere", github=world.github, progress=quiet,
                      sh=ghstack.shell.Shell(cwd=str(world.checkout.path), testing=True))
    with pytest.raises(BadInput, match=r"^--onto goes with --pr"):
        checkout.main(world.stack, world.checkout.path, onto="origin/main", progress=quiet)
    assert world.checkout.snapshot() == before


def test_submit_refuses_a_patch_whose_author_is_not_the_submitter(world, capsys):
    """A CLA check refuses commits by anyone but the submitter: so does the preflight, --dry-run
    included, in one line naming the patch, both identities and the two ways out."""
    world.checkout.git.run("config", "user.name", "Other Person")
    world.checkout.git.run("config", "user.email", "other@users.noreply.github.com")
    before = world.checkout.snapshot()
    first = world.stack.series()[0]
    message = (f"{first} is by Test Author <test-author@users.noreply.github.com>, but {world.checkout.path} submits "
               f"as Other Person <other@users.noreply.github.com> (git config user.name/user.email): a CLA check "
               f"refuses commits by anyone but the submitter; set the stack's author in "
               f"{world.stack.dir / 'author'} and re-export (stack.sh export), or submit as Test Author "
               f"<test-author@users.noreply.github.com>")
    with pytest.raises(BadInput) as refused:
        world.submit()
    assert str(refused.value) == message
    from ndvstack import cli
    assert cli.main(["--patches", str(world.stack.dir), "submit", "--dry-run", "--pytorch",
                     str(world.checkout.path), "--base-branch", "main"]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert world.checkout.snapshot() == before and world.pull_requests() == []


def test_submit_refuses_a_stack_lint_refuses_for_upstreams_form(world):
    last = world.stack.dir / world.stack.series()[-1]
    last.write_text(last.read_text().replace("Test Plan: python test/test_autograd.py -k test_marked_view",
                                             "Tested in this session."))
    with pytest.raises(BadInput, match=r"invalid \(2 problems; see `stack.sh lint`\): 0005-Add-tests-for-marked-"
                                       r"views.patch: commit message has no `Test Plan:` section"):
        world.submit()
    assert world.pull_requests() == []


def test_submit_dry_run_checks_and_prints_the_plan_and_changes_nothing(world):
    before, patches = world.checkout.snapshot(), dir_bytes(world.stack.dir)
    out = io.StringIO()

    def scoreboard():
        raise AssertionError("--dry-run runs no scoreboard")
    assert world.submit(dry_run=True, out=out, scoreboard=scoreboard) == []
    assert out.getvalue().splitlines() == [
        "dry run: every check passed but the scoreboard (not run); would submit 5 pull requests to pytorch/pytorch "
        f"main as Test Author <test-author@users.noreply.github.com>, onto {world.stack.base.commit[:12]}:",
        "  1. [autograd] Detach marked view outputs", "  2. [autograd] Document marked views",
        "  3. [aotautograd] Regenerate no_grad views", "  4. [dynamo] Add new file", "  5. Add tests for marked views"]
    assert world.checkout.snapshot() == before and dir_bytes(world.stack.dir) == patches
    assert world.pull_requests() == []
