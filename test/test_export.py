import os
import re

import pytest

from fake_pytorch import dir_bytes, five_patch_stack, write_stack_data
from ndvstack import export
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.stack import Stack


@pytest.fixture
def stack_dir(tmp_path, fake_pytorch):
    patches = tmp_path / "patches"
    write_stack_data(patches, fake_pytorch.base)
    (patches / "test-map.toml").write_text("# data that rides along\n")
    return patches


def quiet(_):
    pass


def test_export_writes_one_format_patch_per_commit(fake_pytorch, stack_dir):
    five_patch_stack(fake_pytorch)
    names = export.main(Stack(stack_dir), fake_pytorch.path, branch="work", progress=quiet)
    assert names == [
        "0001-autograd-Detach-marked-view-outputs.patch",
        "0002-autograd-Document-marked-views.patch",
        "0003-aotautograd-Regenerate-no_grad-views.patch",
        "0004-dynamo-Add-new-file.patch",
        "0005-Add-tests-for-marked-views.patch",
    ]
    assert (stack_dir / "series").read_text().splitlines()[-5:] == names
    assert (stack_dir / "test-map.toml").read_text() == "# data that rides along\n"
    first = (stack_dir / names[0]).read_text()
    assert first.startswith("From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n")
    assert "Subject: [PATCH] [autograd] Detach marked view outputs\n" in first
    assert "Date: Sun, 1 Feb 2026 10:00:00 +0100\n" in first
    assert " 1 file changed, 1 insertion(+)\n" in first
    assert f"base-commit: {fake_pytorch.base}\n" in first
    assert re.search(r"^index [0-9a-f]{40}\.\.[0-9a-f]{40} 100644$", first, re.M)  # full index
    assert "\n-- \n" not in first  # no signature


def test_reexport_of_an_unchanged_stack_is_byte_identical(fake_pytorch, stack_dir):
    five_patch_stack(fake_pytorch)
    export.main(Stack(stack_dir), fake_pytorch.path, branch="work", progress=quiet)
    first = dir_bytes(stack_dir)
    export.main(Stack(stack_dir), fake_pytorch.path, branch="work", progress=quiet)
    assert dir_bytes(stack_dir) == first


def test_export_ignores_the_users_git_config(fake_pytorch, stack_dir, git_identity):
    five_patch_stack(fake_pytorch)
    export.main(Stack(stack_dir), fake_pytorch.path, branch="work", progress=quiet)
    plain = dir_bytes(stack_dir)
    with open(git_identity / "gitconfig", "a") as config:
        config.write("[diff]\n\tnoprefix = true\n\talgorithm = patience\n\tcontext = 7\n"
                     "[format]\n\tsignature = hello\n\tnumbered = true\n\tsignOff = true\n"
                     "[core]\n\tabbrev = 7\n")
    export.main(Stack(stack_dir), fake_pytorch.path, branch="work", progress=quiet)
    assert dir_bytes(stack_dir) == plain


def test_export_keeps_trailers(fake_pytorch, stack_dir):
    five_patch_stack(fake_pytorch)
    export.main(Stack(stack_dir), fake_pytorch.path, branch="work", progress=quiet)
    text = (stack_dir / "0003-aotautograd-Regenerate-no_grad-views.patch").read_text()
    assert "\nghstack-source-id: 0123456789abcdef\n" in text
    assert "\nPull-Request: https://github.com/pytorch/pytorch/pull/1\n" in text


def test_export_keeps_the_series_comments(fake_pytorch, stack_dir):
    (stack_dir / "series").write_text("# our own header\n# second line\n")
    five_patch_stack(fake_pytorch)
    export.main(Stack(stack_dir), fake_pytorch.path, branch="work", progress=quiet)
    lines = (stack_dir / "series").read_text().splitlines()
    assert lines[:2] == ["# our own header", "# second line"] and len(lines) == 7


def test_export_of_a_stack_lint_rejects_leaves_patches_untouched(fake_pytorch, stack_dir):
    five_patch_stack(fake_pytorch)
    export.main(Stack(stack_dir), fake_pytorch.path, branch="work", progress=quiet)
    before = dir_bytes(stack_dir)
    mode = stack_dir.stat().st_mode
    fake_pytorch.commit("Touch setup.py\n\nOutside the allow-list.\n",
                        {"setup.py": fake_pytorch.edit("setup.py", "line 1\n", "line one\n")})
    with pytest.raises(WorkFailed, match=r"invalid stack, patches/ unchanged: 0006-Touch-setup\.py\.patch: "
                                         r"path setup\.py is outside the allow-list"):
        export.main(Stack(stack_dir), fake_pytorch.path, branch="work", progress=quiet)
    assert dir_bytes(stack_dir) == before and stack_dir.stat().st_mode == mode
    assert sorted(os.listdir(stack_dir.parent)) == ["patches", "pytorch"]  # no temp folder left


def test_export_refuses_a_missing_branch(fake_pytorch, stack_dir):
    with pytest.raises(BadInput, match="has no branch nope; pass --branch NAME"):
        export.main(Stack(stack_dir), fake_pytorch.path, branch="nope", progress=quiet)


def test_export_refuses_a_checkout_without_the_base(tmp_path, fake_pytorch):
    patches = tmp_path / "other"
    write_stack_data(patches, "1" * 40)
    with pytest.raises(BadInput, match=f"lacks the base commit \\(v2.15.0\\) {'1' * 40}"):
        export.main(Stack(patches), fake_pytorch.path, branch="main", progress=quiet)


def test_export_refuses_a_branch_without_the_base(fake_pytorch, stack_dir):
    fake_pytorch.git.run("checkout", "--quiet", "--orphan", "unrelated")
    fake_pytorch.commit("Unrelated root\n\nbody\n", {"test/x.py": "x\n"})
    with pytest.raises(BadInput, match="branch unrelated does not contain the base"):
        export.main(Stack(stack_dir), fake_pytorch.path, branch="unrelated", progress=quiet)


def test_export_refuses_merge_commits(fake_pytorch, stack_dir):
    five_patch_stack(fake_pytorch)
    git = fake_pytorch.git
    git.run("checkout", "--quiet", "-b", "side", fake_pytorch.base)
    fake_pytorch.commit("Side\n\nbody\n", {"test/side.py": "side\n"})
    git.run("checkout", "--quiet", "work")
    git.run("merge", "--quiet", "--no-edit", "side")
    before = dir_bytes(stack_dir)
    with pytest.raises(BadInput, match="branch work has merge commits"):
        export.main(Stack(stack_dir), fake_pytorch.path, branch="work", progress=quiet)
    assert dir_bytes(stack_dir) == before


def test_export_writes_every_patch_by_the_stacks_one_author(fake_pytorch, stack_dir):
    """A commit by someone else is exported as by the stack's author (tree, message and date
    kept); the branch itself is not rewritten."""
    five_patch_stack(fake_pytorch)
    export.main(Stack(stack_dir), fake_pytorch.path, branch="work", progress=quiet)
    by_us = dir_bytes(stack_dir)
    fake_pytorch.git.run("checkout", "--quiet", "-b", "others", "work~3")
    for rev in ("work~2", "work~1", "work"):  # the last three, by two other people
        author = "lead <lead@example.com>" if rev == "work~1" else "Someone Else <someone@users.noreply.github.com>"
        fake_pytorch.git.run("cherry-pick", "--quiet", rev)
        fake_pytorch.git.run("commit", "--quiet", "--amend", "--no-edit", f"--author={author}")
    refs = fake_pytorch.git.out("for-each-ref")
    names = export.main(Stack(stack_dir), fake_pytorch.path, branch="others", progress=quiet)
    assert fake_pytorch.git.out("for-each-ref") == refs
    for name in names:
        assert "\nFrom: Test Author <test-author@users.noreply.github.com>\n" in (stack_dir / name).read_text()
    assert dir_bytes(stack_dir) == by_us  # the same patches, byte for byte, as if we had made every commit


def test_export_refuses_a_stack_without_its_author(fake_pytorch, stack_dir):
    five_patch_stack(fake_pytorch)
    (stack_dir / "author").unlink()
    before = dir_bytes(stack_dir)
    with pytest.raises(BadInput, match=r"patches/author: missing \(the one author of the stack's patches, "
                                       r"`Name <email>`\)$"):
        export.main(Stack(stack_dir), fake_pytorch.path, branch="work", progress=quiet)
    assert dir_bytes(stack_dir) == before
