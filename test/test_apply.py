import shutil
import subprocess

import pytest

from fake_pytorch import (AUTHOR, dir_bytes, fake_pytorch_tree, five_patch_stack, stack_from_commits,
                          write_stack_data)
from ndvstack import apply, export
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.stack import Stack

CPP = "torch/csrc/autograd/custom_function.cpp"


def quiet(_):
    pass


@pytest.fixture
def stack(tmp_path, fake_pytorch):
    """The five-patch stack, exported from a branch of the fake tree."""
    five_patch_stack(fake_pytorch)
    stack_from_commits(fake_pytorch, tmp_path / "patches", head="work")
    fake_pytorch.git.run("checkout", "--quiet", "main")
    fake_pytorch.git.run("branch", "-D", "work")
    return Stack(tmp_path / "patches")


def clone(fake, tmp_path, name="checkout"):
    target = tmp_path / name
    subprocess.run(["git", "clone", "--quiet", str(fake.path), str(target)], check=True)
    return type(fake)(target, fake.base)


def test_apply_then_export_round_trips_byte_identical(tmp_path, fake_pytorch, stack):
    checkout = clone(fake_pytorch, tmp_path)
    original = dir_bytes(stack.dir)
    apply.main(stack, checkout.path, progress=quiet)
    export.main(stack, checkout.path, progress=quiet)
    assert dir_bytes(stack.dir) == original


def test_apply_keeps_author_date_message_and_tags_in_subjects(tmp_path, fake_pytorch, stack):
    checkout = clone(fake_pytorch, tmp_path)
    apply.main(stack, checkout.path, progress=quiet)
    git = checkout.git
    assert git.out("symbolic-ref", "HEAD") == "refs/heads/ndv/stack"
    log = git.out("log", "--reverse", "--format=%an <%ae>|%aI|%s", f"{fake_pytorch.base}..HEAD")
    assert log.splitlines() == [
        f"{AUTHOR}|2026-02-01T10:00:00+01:00|[autograd] Detach marked view outputs",
        f"{AUTHOR}|2026-02-02T10:00:00-05:00|[autograd] Document marked views",
        f"{AUTHOR}|2026-02-03T10:00:00+00:00|[aotautograd] Regenerate no_grad views",
        f"{AUTHOR}|2026-02-04T10:00:00+00:00|[dynamo] Add new file",
        f"{AUTHOR}|2026-02-05T10:00:00+00:00|Add tests for marked views",
    ]
    assert git.out("log", "-1", "--format=%B", "HEAD~2") == (
        "[aotautograd] Regenerate no_grad views\n\nMatch eager.\n\n"
        "Test Plan: python test/functorch/test_aotdispatch.py -k no_grad\n\n"
        "ghstack-source-id: 0123456789abcdef\nPull-Request: https://github.com/pytorch/pytorch/pull/1")
    assert "// detach views too\n" in (checkout.path / CPP).read_text()


def test_apply_onto_rev_and_branch(tmp_path, fake_pytorch, stack):
    upstream = fake_pytorch.commit("Upstream moves on\n\nbody\n", {"torch/_dynamo/other.py": "x\n"})
    checkout = clone(fake_pytorch, tmp_path)
    head = apply.main(stack, checkout.path, onto=upstream, branch="review/me", progress=quiet)
    assert checkout.git.out("rev-parse", "review/me~5") == upstream
    assert checkout.git.out("rev-parse", "HEAD") == head


def test_a_context_only_upstream_change_applies_by_three_way_merge(tmp_path, fake_pytorch, stack):
    # Upstream edits a line inside patch 1's context: a plain apply fails, 3-way merges it.
    moved = fake_pytorch.commit("Upstream edits context\n\nbody\n",
                                {CPP: fake_pytorch.edit(CPP, "line 9\n", "line 9 (upstream)\n")})
    checkout = clone(fake_pytorch, tmp_path)
    patch = stack.dir / stack.series()[0]
    plain = checkout.git.run("apply", "--check", str(patch), check=False)
    assert plain.returncode != 0 and "patch does not apply" in plain.stderr
    apply.main(stack, checkout.path, onto=moved, progress=quiet)
    text = (checkout.path / CPP).read_text()
    assert "line 9 (upstream)\ncustom_function.cpp line 10\n// detach views too\n" in text


def test_changed_context_without_the_base_blob_fails_instead_of_fuzzing(tmp_path, stack):
    # Other history: the patch's pre-image blob is unknown there, so no 3-way merge; its
    # outermost context line differs, which GNU patch applies "with fuzz 1" and we refuse.
    other = fake_pytorch_tree(tmp_path / "other", edits={CPP: ("line 8\n", "line eight\n")})
    write_stack_data(tmp_path / "patches2", other.base)
    for name in ["series", *stack.series()]:
        shutil.copy(stack.dir / name, tmp_path / "patches2" / name)
    first = stack.dir / stack.series()[0]
    gnu = subprocess.run(["patch", "--dry-run", "-p1", "-i", str(first)], cwd=other.path,
                         capture_output=True, text=True)
    assert "with fuzz 1" in gnu.stdout
    before = other.snapshot()
    with pytest.raises(WorkFailed, match=r"0001-autograd-Detach-marked-view-outputs\.patch does not apply "
                                         rf"on {other.base[:12]} after 0 patches: {CPP} hunk #1"):
        apply.main(Stack(tmp_path / "patches2"), other.path, progress=quiet)
    assert other.snapshot() == before


def test_a_conflict_leaves_the_checkout_bit_identical(tmp_path, fake_pytorch, stack):
    conflicting = fake_pytorch.commit(
        "Upstream rewrites the lines the stack changes\n\nbody\n",
        {"docs/source/notes/extending.rst": fake_pytorch.edit("docs/source/notes/extending.rst",
                                                              "line 30\n", "line 30 rewritten\n")})
    checkout = clone(fake_pytorch, tmp_path)
    git = checkout.git
    git.run("checkout", "--quiet", "-b", "mine")   # the user is on a branch of their own
    (checkout.path / ".git" / "info" / "exclude").write_text("build/\n")
    (checkout.path / "build").mkdir()
    (checkout.path / "build" / "ignored.o").write_bytes(b"\0obj")
    git.run("stash", "list")
    before = checkout.snapshot()
    with pytest.raises(WorkFailed) as failure:
        apply.main(stack, checkout.path, onto=conflicting, progress=quiet)
    assert str(failure.value) == (
        f"0002-autograd-Document-marked-views.patch does not apply on {conflicting[:12]} after 1 patches: "
        "docs/source/notes/extending.rst hunk #1 (@@ -28,7 +28,7 @@ extending.rst line 26); "
        "the checkout is unchanged")
    assert checkout.snapshot() == before
    assert git.commit_of("refs/heads/ndv/stack") is None
    assert not list((checkout.path / ".git").glob("ndv-apply-*"))  # the throw-away worktree is gone


def test_a_missing_file_is_named(tmp_path, fake_pytorch, stack):
    gone = fake_pytorch.commit("Upstream deletes the file\n\nbody\n", {CPP: None})
    checkout = clone(fake_pytorch, tmp_path)
    before = checkout.snapshot()
    with pytest.raises(WorkFailed, match=rf"0001-.*does not apply on {gone[:12]} after 0 patches: "
                                         rf"{CPP} \(No such file or directory\)"):
        apply.main(stack, checkout.path, onto=gone, progress=quiet)
    assert checkout.snapshot() == before


@pytest.mark.parametrize("make_dirty, message", [
    (lambda p: (p / CPP).write_text("edited\n"), r"the checkout is not clean \(1 changed or untracked "
                                                 r"paths, first: M torch/csrc/autograd/custom_function.cpp\)"),
    (lambda p: (p / "stray.txt").write_text("x\n"), r"not clean .*first: \?\? stray\.txt"),
    (lambda p: (p / ".git" / "MERGE_HEAD").write_text("0" * 40 + "\n"),
     r"an operation is in progress \(MERGE_HEAD\)"),
])
def test_apply_refuses_a_dirty_checkout(tmp_path, fake_pytorch, stack, make_dirty, message):
    checkout = clone(fake_pytorch, tmp_path)
    make_dirty(checkout.path)
    before = checkout.snapshot()
    with pytest.raises(BadInput, match=message):
        apply.main(stack, checkout.path, progress=quiet)
    assert checkout.snapshot() == before


def test_apply_refuses_a_checkout_without_the_base(tmp_path, stack):
    other = fake_pytorch_tree(tmp_path / "other", edits={"setup.py": ("line 1\n", "line one\n")})
    before = other.snapshot()
    with pytest.raises(BadInput, match=rf"lacks the base commit \(v2\.15\.0\) {stack.base.commit}; "
                                       rf"fetch it first \(git fetch origin {stack.base.commit}\)"):
        apply.main(stack, other.path, progress=quiet)
    assert other.snapshot() == before


def test_apply_refuses_an_unknown_rev(tmp_path, fake_pytorch, stack):
    checkout = clone(fake_pytorch, tmp_path)
    before = checkout.snapshot()
    with pytest.raises(BadInput, match="lacks the revision v9.9.9"):
        apply.main(stack, checkout.path, onto="v9.9.9", progress=quiet)
    assert checkout.snapshot() == before


def test_apply_refuses_an_invalid_stack(tmp_path, fake_pytorch, stack):
    (stack.dir / "0099-stray.patch").write_text("not a patch\n")
    checkout = clone(fake_pytorch, tmp_path)
    before = checkout.snapshot()
    with pytest.raises(BadInput, match=r"is invalid \(1 problem; .*0099-stray\.patch: not listed in series"):
        apply.main(stack, checkout.path, progress=quiet)
    assert checkout.snapshot() == before


def test_apply_refuses_an_existing_branch_and_a_bad_name(tmp_path, fake_pytorch, stack):
    checkout = clone(fake_pytorch, tmp_path)
    checkout.git.run("branch", "ndv/stack")
    before = checkout.snapshot()
    with pytest.raises(BadInput, match="branch ndv/stack already exists"):
        apply.main(stack, checkout.path, progress=quiet)
    with pytest.raises(BadInput, match="'bad..name' is not a valid branch name"):
        apply.main(stack, checkout.path, branch="bad..name", progress=quiet)
    assert checkout.snapshot() == before


def test_apply_refuses_what_is_not_a_checkout(tmp_path, stack):
    with pytest.raises(BadInput, match="nowhere: no such directory"):
        apply.main(stack, tmp_path / "nowhere", progress=quiet)
    (tmp_path / "plain").mkdir()
    with pytest.raises(BadInput, match="plain: not a git checkout"):
        apply.main(stack, tmp_path / "plain", progress=quiet)


def test_apply_shows_progress(tmp_path, fake_pytorch, stack):
    checkout = clone(fake_pytorch, tmp_path)
    lines = []
    apply.main(stack, checkout.path, progress=lines.append)
    assert lines[0] == f"checking out {fake_pytorch.base[:12]} in a throw-away worktree"
    assert [line.split(" (")[0] for line in lines[1:6]] == [
        f"applied [{n}/5] {name}" for n, name in enumerate(stack.series(), 1)]
    assert lines[6].startswith(f"ndv/stack: 5 patches on {fake_pytorch.base[:12]}")
