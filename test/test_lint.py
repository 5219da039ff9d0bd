import os
import shutil

import pytest

from fake_pytorch import five_patch_stack, stack_from_commits
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
    base.write_text(base.read_text().replace('release = "2.13.0"', 'release = "2.13"')
                    .replace("commit = ", "extra = 1\ncommit = "))
    (stack.dir / "allowed-paths").unlink()
    findings = lint.findings(stack)
    assert findings[0] == (f"{base}: unknown key extra; release '2.13' is not X.Y.Z; wheel.file "
                           "'torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl' is not release 2.13")
    assert findings[1] == f"{stack.dir / 'allowed-paths'}: missing (the paths the stack may touch)"


def test_every_problem_is_reported_at_once(make_stack, capsys):
    stack = make_stack(("Only a subject\n", edit_test_file),
                       ("Mode\n\nbody\n", lambda fake: os.chmod(fake.path / "setup.py", 0o755)))
    (stack.dir / "0009-stray.patch").write_text("x\n")
    with pytest.raises(WorkFailed, match="lint: 4 problems in"):
        lint.main(stack, out=None)
    assert capsys.readouterr().out.splitlines() == [
        "0009-stray.patch: not listed in series",
        "0001-Only-a-subject.patch: commit message has no body (say why the change is right)",
        "0002-Mode.patch: path setup.py is outside the allow-list (allowed-paths)",
        "0002-Mode.patch: setup.py is a mode-only change (100644 -> 100755)",
    ]
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
