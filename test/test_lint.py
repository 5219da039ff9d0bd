import os
import shutil
import subprocess
from pathlib import Path

import pytest

from fake_pytorch import AUTHOR, five_patch_stack, plan, stack_from_commits
from ndvstack import lint
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.stack import QuickPick, Stack


@pytest.fixture
def make_stack(tmp_path, fake_pytorch):
    """Commits made by CHANGE on a branch of the fake tree, as a stack (not linted)."""
    def make(*changes):
        fake_pytorch.git.run("checkout", "--quiet", "-B", "work", fake_pytorch.base)
        for message, change in changes:
            change(fake_pytorch)
            fake_pytorch.git.run("add", "-A")
            fake_pytorch.git.run("commit", "--quiet", "--allow-empty", "-m", message)
        patches = tmp_path / "patches"
        shutil.rmtree(patches, ignore_errors=True)
        stack_from_commits(fake_pytorch, patches)
        return Stack(patches)
    return make


def edit_test_file(fake):
    path = fake.path / "test/test_autograd.py"
    path.write_text(path.read_text() + "# more\n")


def test_a_clean_stack_has_no_findings(tmp_path, fake_pytorch, capsys):
    five_patch_stack(fake_pytorch)
    stack_from_commits(fake_pytorch, tmp_path / "patches")
    assert lint.findings(Stack(tmp_path / "patches")) == []
    lint.main(Stack(tmp_path / "patches"), out=None)
    assert capsys.readouterr().out == "lint: 5 patches, no problems\n"


def test_series_and_files_must_match(make_stack):
    stack = make_stack(("Edit\n\nbody\n", edit_test_file))
    (stack.dir / "series").write_text("0001-Edit.patch\n0001-Edit.patch\n0002-gone.patch\n# c\n\n")
    (stack.dir / "0003-extra.patch").write_text((stack.dir / "0001-Edit.patch").read_text())
    assert lint.findings(stack) == [
        "series: 0001-Edit.patch is listed twice",
        "series: 0002-gone.patch is listed but has no file",
        "0003-extra.patch: not listed in series",
    ]


def test_the_same_commit_twice(make_stack):
    stack = make_stack(("Edit\n\nbody\n", edit_test_file))
    shutil.copy(stack.dir / "0001-Edit.patch", stack.dir / "0002-again.patch")
    with open(stack.dir / "series", "a") as series:
        series.write("0002-again.patch\n")
    [finding] = lint.findings(stack)
    assert finding.startswith("0002-again.patch: the same commit as 0001-Edit.patch (patch-id ")


def test_unparsable_patches(make_stack):
    stack = make_stack(("Edit\n\nbody\n", edit_test_file))
    (stack.dir / "0002-empty.patch").write_text("")
    (stack.dir / "0003-noheader.patch").write_text("just some text\n")
    with open(stack.dir / "series", "a") as series:
        series.write("0002-empty.patch\n0003-noheader.patch\n")
    assert lint.findings(stack) == [
        "0002-empty.patch: empty file (format-patch writes one for an empty commit)",
        "0003-noheader.patch: git mailinfo cannot parse it: no From:/Date: header",
    ]


def test_message_needs_subject_and_body(make_stack):
    stack = make_stack(("Only a subject\n", edit_test_file), ("Second\n\nbody\n", edit_test_file))
    second = stack.dir / "0002-Second.patch"
    second.write_text(second.read_text().replace("Subject: [PATCH] Second\n", "Subject: [PATCH]\n"))
    assert lint.findings(stack) == [
        "0001-Only-a-subject.patch: commit message has no body (say why the change is right)",
        "0002-Second.patch: commit message has no subject",
    ]


def test_paths_outside_the_allow_list(make_stack):
    def edit_setup(fake):
        path = fake.path / "setup.py"
        path.write_text(path.read_text() + "# more\n")
    stack = make_stack(("Setup\n\nbody\n", edit_setup))
    assert lint.findings(stack) == [
        "0001-Setup.patch: path setup.py is outside the allow-list (allowed-paths)"]


@pytest.mark.parametrize("bad_path, finding", [
    ("/etc/test_autograd.py", "absolute path /etc/test_autograd.py"),
    ("test/../setup.py", "path test/../setup.py contains '..'"),
])
def test_absolute_and_dotdot_paths(make_stack, bad_path, finding):
    stack = make_stack(("Edit\n\nbody\n", edit_test_file))
    patch = stack.dir / "0001-Edit.patch"
    patch.write_text(patch.read_text().replace("test/test_autograd.py", bad_path))
    assert lint.findings(stack) == [f"0001-Edit.patch: {finding}"]


def test_symlinks_binaries_and_mode_changes(make_stack):
    stack = make_stack(
        ("Link\n\nbody\n", lambda fake: os.symlink("test_autograd.py", fake.path / "test/link.py")),
        ("Binary\n\nbody\n", lambda fake: (fake.path / "test/data.bin").write_bytes(b"\0\1\2\3")),
        ("Mode\n\nbody\n", lambda fake: os.chmod(fake.path / "test/test_autograd.py", 0o755)),
    )
    assert lint.findings(stack) == [
        "0001-Link.patch: test/link.py is a symlink",
        "0002-Binary.patch: test/data.bin is a binary change",
        "0003-Mode.patch: test/test_autograd.py is a mode-only change (100644 -> 100755)",
    ]


def test_a_message_without_a_diff(make_stack):
    stack = make_stack(("Edit\n\nbody\n", edit_test_file))
    patch = stack.dir / "0001-Edit.patch"
    patch.write_text(patch.read_text().split("\ndiff --git")[0] + "\n")
    assert lint.findings(stack) == ["0001-Edit.patch: contains no diff"]


def test_an_invalid_base_and_missing_data_files(make_stack):
    stack = make_stack(("Edit\n\nbody\n", edit_test_file))
    base = stack.dir / "base.toml"
    base.write_text(base.read_text().replace('release = "2.15.0"', 'release = "2.15"')
                    .replace("commit = ", "extra = 1\ncommit = "))
    (stack.dir / "allowed-paths").unlink()
    findings = lint.findings(stack)
    assert findings[0] == (f"{base}: unknown key extra; release '2.15' is not X.Y.Z; wheel.file "
                           "'torch-2.15.0-cp311-cp311-manylinux_2_28_x86_64.whl' is not release 2.15")
    assert findings[1] == f"{stack.dir / 'allowed-paths'}: missing (the paths the stack may touch)"


def test_every_problem_is_reported_at_once(make_stack, capsys):
    stack = make_stack(("Only a subject\n", edit_test_file),
                       ("Mode\n\nbody\n", lambda fake: os.chmod(fake.path / "setup.py", 0o755)))
    (stack.dir / "0009-stray.patch").write_text("x\n")
    with pytest.raises(WorkFailed, match="lint: 6 problems in"):
        lint.main(stack, out=None)
    assert capsys.readouterr().out.splitlines() == [
        "0009-stray.patch: not listed in series",
        "0001-Only-a-subject.patch: commit message has no body (say why the change is right)",
        "0002-Mode.patch: path setup.py is outside the allow-list (allowed-paths)",
        "0002-Mode.patch: setup.py is a mode-only change (100644 -> 100755)",
        "0001-Only-a-subject.patch: commit message has no `Test Plan:` section (the exact commands that test it)",
        "0002-Mode.patch: commit message has no `Test Plan:` section (the exact commands that test it)",
    ]
    # The other verbs refuse the stack's form only: a stack being written still builds and tests.
    with pytest.raises(BadInput, match=r"invalid \(4 problems; see `stack.sh lint`\)"):
        lint.check(stack)


def test_upstream_tests_must_cover_every_touched_source_path(tmp_path, fake_pytorch):
    five_patch_stack(fake_pytorch)
    stack = Stack(tmp_path / "patches")
    stack_from_commits(fake_pytorch, stack.dir)
    coverage = stack.dir / "upstream-tests.toml"
    coverage.write_text('[[cover]]\npath = "torch/csrc/autograd/"\ntests = ["test/test_autograd.py::TestAutograd"]\n'
                        'quick = [{ test = "test/test_autograd.py::TestAutograd", k = "view" }]\n'
                        '[[cover]]\npath = "torch/autograd/"\ntests = ["test/test_autograd.py"]\n'
                        'quick = [{ test = "test/test_autograd.py" }]\n')
    names = stack.series()
    assert lint.findings(stack) == [  # test/ and docs/ need no covering tests
        f"{names[2]}: torch/_functorch/_aot_autograd/runtime_wrappers.py is covered by no entry of upstream-tests.toml",
        f"{names[3]}: torch/_dynamo/new_module.py is covered by no entry of upstream-tests.toml"]
    coverage.write_text('[[cover]]\npath = "torch/"\ntests = ["tests/x.py", "test/y.py::Class::method", "test/z.py"]\n'
                        'quick = [{ test = "test/z.py" }]\n[[cover]]\ntests = []\n')
    [finding] = lint.findings(stack)
    assert finding == (f"{coverage}: [[cover]] torch/: 'tests/x.py' is not test/....py or test/....py::Class; "
                       "[[cover]] torch/: 'test/y.py::Class::method' is not test/....py or test/....py::Class; "
                       '[[cover]] 2 needs path = "..." and tests = ["test/...", ...]')


def test_every_entry_has_a_valid_quick_part_and_sweeps_name_classes(tmp_path, fake_pytorch):
    five_patch_stack(fake_pytorch)
    stack = Stack(tmp_path / "patches")
    stack_from_commits(fake_pytorch, stack.dir)
    coverage = stack.dir / "upstream-tests.toml"
    coverage.write_text('sweeps = ["test/a.py::TestOpInfo", "not a test"]\n'
                        '[[cover]]\npath = "torch/"\ntests = ["test/a.py::TestA", "test/b.py"]\n'
                        'quick = [{ test = "test/a.py::TestB" }, { test = "test/c.py" }, { test = "test/b.py", x = 1 },'
                        ' { test = "test/b.py", k = 3 }]\nextra = 1\n'
                        '[[cover]]\npath = "torch/_dynamo/"\ntests = ["test/b.py"]\n')
    [finding] = lint.findings(stack)
    assert finding == (
        f"{coverage}: [[cover]] torch/: quick test 'test/a.py::TestB' is not part of its tests; "
        "[[cover]] torch/: quick test 'test/c.py' is not part of its tests; "
        "[[cover]] torch/: quick item {'test': 'test/b.py', 'x': 1} is not { test = \"...\", k = \"...\" }; "
        "[[cover]] torch/: quick item {'test': 'test/b.py', 'k': 3} is not { test = \"...\", k = \"...\" }; "
        "[[cover]] torch/: unknown key extra; "
        '[[cover]] torch/_dynamo/: needs quick = [{ test = "test/...", k = "..." }, ...] (the subset --select quick '
        "runs); sweeps must be a list of test/....py::Class")
    coverage.write_text('sweeps = ["test/a.py::TestOpInfo"]\n'
                        '[[cover]]\npath = "torch/"\ntests = ["test/a.py", "test/b.py::TestB"]\n'
                        'quick = [{ test = "test/a.py::TestA", k = "view or alias" }, { test = "test/b.py::TestB" }]\n')
    assert lint.findings(stack) == []
    assert [entry.quick for entry in stack.coverage()] == [
        (QuickPick("test/a.py::TestA", "view or alias"), QuickPick("test/b.py::TestB"))]
    assert stack.sweeps() == ["test/a.py::TestOpInfo"]


# Upstream's form: what upstream's review and CLA check would refuse.

STACK_SH = Path(__file__).resolve().parents[1] / "scripts" / "stack.sh"
GOOD = "[autograd] Fix it\n\nWhy it is right.\n" + plan("test/test_autograd.py -k fix")


@pytest.fixture
def upstream_form(tmp_path, fake_pytorch):
    """A stack of commits (message, author or None for the tests' own, a file to add) on the fake tree."""
    def make(*commits):
        fake_pytorch.git.run("checkout", "--quiet", "-B", "work", fake_pytorch.base)
        for number, (message, author, path) in enumerate(commits, 1):
            name, email = (author or "").rstrip(">").split(" <") if author else (None, None)
            target = fake_pytorch.path / (path or f"test/test_autograd_part{number}.txt")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(f"# part {number}\n")
            fake_pytorch.git.run("add", "-A")
            env = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email} if author else None
            fake_pytorch.git.run("commit", "--quiet", "-m", message, env=env)
        patches = tmp_path / "patches"
        shutil.rmtree(patches, ignore_errors=True)
        stack_from_commits(fake_pytorch, patches)
        return Stack(patches)
    return make


def lint_sh(stack):
    return subprocess.run([str(STACK_SH), "--patches", str(stack.dir), "lint"], capture_output=True, text=True)


def test_a_stack_in_upstreams_form_has_no_findings(upstream_form):
    stack = upstream_form((GOOD, None, None), (
        "[dynamo] Fix that\n\nWhy.\n\nFixes #191449\nFixes pytorch/functorch#1052\n"
        "Fixes https://github.com/pytorch/pytorch/issues/186503\n\nTest Plan:\n```\n"
        "PYTORCH_TEST_WITH_DYNAMO=1 python test/dynamo/test_autograd_function.py -k mark\n```\n", None, None))
    assert lint.findings(stack) == [] and lint.message_findings(stack) == []


@pytest.mark.parametrize("author, why", [
    ("lead <lead@example.com>", "the address is at example.com"),
    ("Seed e409cdf0 maintainers <maintainers@users.noreply.a-seed-e409cdf0.example>",
     "the address is at users.noreply.a-seed-e409cdf0.example"),
    ("lead <lead@users.noreply.github.com>", "the name 'lead' is a placeholder"),
])
def test_a_placeholder_author_is_a_one_line_refusal_naming_the_patch(upstream_form, author, why):
    stack = upstream_form((GOOD, None, None), (GOOD.replace("it", "more"), author, None))
    result = lint_sh(stack)
    second = stack.series()[1]
    assert result.returncode == 1
    assert result.stdout == (f"{second}: author {author} is not the stack's author {AUTHOR} (author); re-export "
                             f"(stack.sh export) to write it; and it is a placeholder: {why}\n")
    assert result.stderr == f"error: lint: 1 problem in {stack.dir}\n"


def test_the_stacks_author_must_be_set_and_not_a_placeholder(upstream_form):
    stack = upstream_form((GOOD, None, None))
    (stack.dir / "author").write_text("# the one author\nlead <lead@example.com>\n")
    name = stack.series()[0]
    assert lint.message_findings(stack) == [
        f"{stack.dir / 'author'}: lead <lead@example.com> is a placeholder identity (the address is at "
        "example.com): a CLA check refuses it",
        f"{name}: author {AUTHOR} is not the stack's author lead <lead@example.com> (author); re-export "
        "(stack.sh export) to write it"]
    (stack.dir / "author").write_text("A <a@b.org>\nB <b@b.org>\n")
    assert lint.message_findings(stack)[0] == (
        f"{stack.dir / 'author'}: must hold one line `Name <email>` (the one author of the stack's patches)")
    (stack.dir / "author").unlink()
    assert lint.message_findings(stack) == [
        f"{stack.dir / 'author'}: missing (the one author of the stack's patches, `Name <email>`)"]


@pytest.mark.parametrize("message, finding", [
    ("[autograd] Fix it\n\nWhy it is right.\n",
     "commit message has no `Test Plan:` section (the exact commands that test it)"),
    ("[autograd] Fix it\n\nWhy.\n\nTest Plan:\nRan the tests, they pass.\n\nRelease note: none\n",
     "its `Test Plan:` names no command (e.g. `python test/test_autograd.py -k ...`)"),
    ("[autograd] Fix it\n\nWhy.\n\nTest Plan: CI\n\nRelease notes:\npython is fine\n",
     "its `Test Plan:` names no command (e.g. `python test/test_autograd.py -k ...`)"),
    (GOOD + "\nAs asked in issue 24 of this session, with the shim.\n",
     "commit message has process text upstream would not take: 'issue 24' (line 7: this project's tracker "
     "(upstream's issues are #N)), 'session' (line 7: how the work was done), 'shim' (line 7: this project's "
     "overlay of native code)"),
    ("[autograd] Fix it\n\nA reconstruction of the old text.\n" + plan("test/test_autograd.py"),
     "commit message has process text upstream would not take: 'reconstruction' (line 3: how the text was "
     "recovered)"),
    (GOOD + "\nFixes: #191449\n", "malformed Fixes line 'Fixes: #191449': write `Fixes #N`, `Fixes owner/repo#N` or "
                                  "`Fixes https://github.com/owner/repo/issues/N`, one per line"),
    (GOOD + "\nfixes #1, #2\n", "malformed Fixes line 'fixes #1, #2': write `Fixes #N`, `Fixes owner/repo#N` or "
                                "`Fixes https://github.com/owner/repo/issues/N`, one per line"),
])
def test_each_message_finding_is_one_line_naming_the_patch(upstream_form, message, finding):
    stack = upstream_form((message, None, None))
    assert lint.message_findings(stack) == [f"{stack.series()[0]}: {finding}"]
    assert lint.findings(stack) == []  # the stack's form is fine: only lint and submit refuse it


def test_a_new_test_file_needs_its_reason_in_the_message(upstream_form):
    stack = upstream_form((GOOD, None, "test/functorch/test_aotdispatch_marked_views.py"),
                          (GOOD.replace("it", "more") + "\nNew test file: the C++ Function needs a process of its "
                           "own\n", None, "test/cpp_extensions/test_marked.py"),
                          (GOOD.replace("it", "again"), None, "test/functorch/helpers_marked.py"))
    assert lint.message_findings(stack) == [
        f"{stack.series()[0]}: creates the test file test/functorch/test_aotdispatch_marked_views.py: put its "
        "tests in the upstream file and class that own the area, or say why in a line `New test file: <reason>`"]
