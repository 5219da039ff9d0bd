"""Test doubles: a small pytorch-shaped git repository, and stacks made from its commits.

`fake_pytorch_tree` is not upstream code: a few files at pytorch's paths with our own
placeholder text, enough for git to apply, conflict and 3-way merge the way it would on
the real tree.
"""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ndvstack.export import format_patches
from ndvstack.git import Git
from ndvstack.stack import SERIES_FILE

ALLOWED = ["torch/csrc/autograd/", "torch/autograd/", "torch/_functorch/", "torch/_dynamo/",
           "torch/_inductor/", "test/", "docs/"]

# Forty numbered lines per file: room for hunks far enough apart to be separate.
FILES = {
    "torch/csrc/autograd/custom_function.cpp": "// fake custom_function.cpp\n",
    "torch/autograd/function.py": "# fake function.py\n",
    "torch/_functorch/_aot_autograd/runtime_wrappers.py": "# fake runtime_wrappers.py\n",
    "test/test_autograd.py": "# fake test_autograd.py\n",
    "docs/source/notes/extending.rst": ".. fake extending.rst\n",
    "setup.py": "# fake setup.py\n",
}


def numbered(head: str, name: str) -> str:
    return head + "".join(f"{name} line {n}\n" for n in range(1, 41))


@dataclass
class FakePytorch:
    path: Path
    base: str

    @property
    def git(self) -> Git:
        return Git(self.path)

    def commit(self, message: str, changes: dict[str, str | None], date: str | None = None) -> str:
        """Writes CHANGES (path -> text, None deletes) and commits them; returns the sha."""
        for rel, text in changes.items():
            target = self.path / rel
            if text is None:
                target.unlink()
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(text)
        self.git.run("add", "-A")
        env = {"GIT_AUTHOR_DATE": date} if date else None
        self.git.run("commit", "--quiet", "-m", message, env=env)
        return self.git.out("rev-parse", "HEAD")

    def edit(self, rel: str, old: str, new: str) -> str:
        text = (self.path / rel).read_text()
        assert old in text, (rel, old)
        return text.replace(old, new, 1)

    def snapshot(self) -> dict[str, str]:
        """Everything a failed command must leave as it was: refs, HEAD, index, work tree."""
        git = self.git
        files = sorted(p for p in self.path.rglob("*") if ".git" not in p.relative_to(self.path).parts)
        tree = hashlib.sha256()
        for p in files:
            tree.update(str(p.relative_to(self.path)).encode() + b"\0")
            tree.update(p.read_bytes() if p.is_file() and not p.is_symlink() else b"<dir>")
        return {
            "HEAD": git.out("symbolic-ref", "-q", "HEAD", check=False) or git.out("rev-parse", "HEAD"),
            "head_sha": git.out("rev-parse", "HEAD"),
            "refs": git.out("for-each-ref", "--format=%(refname) %(objectname)"),
            "status": git.run("status", "--porcelain", "--untracked-files=all", "--ignored").stdout,
            "index": git.out("ls-files", "--stage", "--debug"),
            "index_tree": hashlib.sha256(git.run("ls-files", "--stage").stdout.encode()).hexdigest(),
            "worktree": tree.hexdigest(),
            "worktrees": git.out("worktree", "list", "--porcelain"),
            "stash": git.out("stash", "list"),
        }


def fake_pytorch_tree(path: Path, edits: dict[str, tuple[str, str]] | None = None) -> FakePytorch:
    """A new git repository at PATH with one commit, the fake tree's base. EDITS (path ->
    (old, new)) makes a tree with other history; without, every call makes the same commit."""
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "--quiet", "--initial-branch=main", str(path)], check=True)
    files = {rel: numbered(head, Path(rel).name) for rel, head in FILES.items()}
    for rel, (old, new) in (edits or {}).items():
        files[rel] = files[rel].replace(old, new, 1)
    fake = FakePytorch(path, "")
    fake.base = fake.commit("Fake pytorch base", files, date="2026-01-02T03:04:05+00:00")
    return fake


# The git identity of the tests (environment_for_git), and so the fake stacks' one author.
AUTHOR = "Test Author <test-author@users.noreply.github.com>"


def write_stack_data(patches: Path, base: str) -> None:
    """base.toml (pointing at the fake base), allowed-paths, author and an empty series."""
    patches.mkdir(parents=True, exist_ok=True)
    (patches / "base.toml").write_text(
        'repo = "https://github.com/pytorch/pytorch"\n'
        f'commit = "{base}"\nrelease = "2.15.0"\n\n[wheel]\n'
        'file = "torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl"\n'
        f'sha256 = "{"0" * 64}"\n')
    (patches / "allowed-paths").write_text("".join(f"{p}\n" for p in ALLOWED))
    (patches / "author").write_text(f"{AUTHOR}\n")
    (patches / SERIES_FILE).write_text("# test stack\n")


def stack_from_commits(fake: FakePytorch, patches: Path, head: str = "HEAD") -> list[str]:
    """A stack in PATCHES made from fake.base..HEAD with the real format-patch options,
    bypassing export's lint so tests can build invalid stacks too."""
    write_stack_data(patches, fake.base)
    names = format_patches(fake.git, fake.base, fake.git.out("rev-parse", head), patches)
    with open(patches / SERIES_FILE, "a") as series:
        series.writelines(f"{name}\n" for name in names)
    return names


def plan(command: str) -> str:
    """A commit message's test plan, as upstream writes it."""
    return f"\nTest Plan: python {command}\n"


def five_patch_stack(fake: FakePytorch, branch: str = "work", trailers: bool = True) -> None:
    """Five commits on BRANCH in the fake tree, each a concern of its own, like the real stack;
    the third has ghstack's trailers unless not TRAILERS (a stack never submitted)."""
    fake.git.run("checkout", "--quiet", "-b", branch, fake.base)
    cpp = "torch/csrc/autograd/custom_function.cpp"
    fake.commit("[autograd] Detach marked view outputs\n\nThe mark was ignored for views.\n"
                + plan("test/test_autograd.py -k marked"),
                {cpp: fake.edit(cpp, "custom_function.cpp line 10\n",
                                "custom_function.cpp line 10\n// detach views too\n")},
                date="2026-02-01T10:00:00+01:00")
    fake.commit("[autograd] Document marked views\n\nSay what happens to views.\n"
                + plan("test/test_autograd.py -k marked"),
                {"torch/autograd/function.py": fake.edit("torch/autograd/function.py", "line 5\n",
                                                         "line 5 (views are detached)\n"),
                 "docs/source/notes/extending.rst": fake.edit("docs/source/notes/extending.rst",
                                                              "line 30\n", "line 30, views too\n")},
                date="2026-02-02T10:00:00-05:00")
    fake.commit("[aotautograd] Regenerate no_grad views\n\nMatch eager.\n"
                + plan("test/functorch/test_aotdispatch.py -k no_grad") + (
                "\nghstack-source-id: 0123456789abcdef\nPull-Request: https://github.com/pytorch/pytorch/pull/1\n"
                if trailers else ""),
                {"torch/_functorch/_aot_autograd/runtime_wrappers.py":
                 fake.edit("torch/_functorch/_aot_autograd/runtime_wrappers.py", "line 20\n",
                           "line 20\n# regenerate\n")}, date="2026-02-03T10:00:00+00:00")
    fake.commit("[dynamo] Add new file\n\nA new module.\n"
                + plan("test/dynamo/test_aot_autograd.py"),
                {"torch/_dynamo/new_module.py": "# new\n"}, date="2026-02-04T10:00:00+00:00")
    fake.commit("Add tests for marked views\n\nCovers the cases.\n"
                + plan("test/test_autograd.py -k test_marked_view"),
                {"test/test_autograd.py": fake.edit("test/test_autograd.py", "line 40\n",
                                                    "line 40\ndef test_marked_view(): pass\n")},
                date="2026-02-05T10:00:00+00:00")


def dir_bytes(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def environment_for_git(home: Path) -> dict[str, str]:
    """A git identity and config of the test's own, so the machine's ~/.gitconfig plays no part."""
    config = home / "gitconfig"
    config.write_text("[user]\n\tname = Test Author\n\temail = test-author@users.noreply.github.com\n"
                      "[init]\n\tdefaultBranch = main\n")
    return {"GIT_CONFIG_GLOBAL": str(config), "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(home),
            "GIT_COMMITTER_DATE": "2026-03-01T00:00:00+00:00"}
