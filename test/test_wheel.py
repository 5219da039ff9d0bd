"""The patched wheel (build.sh), with the test-double stack: its name, manifest and
RECORD, a fresh venv that installs it, and the refusals that leave dist/ as it was."""

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from fake_release import assert_shim_overlay, fake_release_wheel, pinned_to
from fake_stack import CHECK_SCRIPT, quiet, stack_data
from ndvstack import progress, wheel
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.stack import DEFAULT_PATCHES, Stack

ROOT = Path(__file__).resolve().parents[1]
BASE = Stack(DEFAULT_PATCHES).base
def dist_state(dist: Path) -> dict:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(dist.iterdir())}


@pytest.fixture(scope="module")
def built(double):
    stack, src, _, tmp = double
    dist = tmp / "dist"
    dist.mkdir()
    (dist / "notes.txt").write_text("the user's own file\n")
    (dist / "torch-2.15.0+cu132.ndv9.00000000-cp311-cp311-manylinux_2_28_x86_64.whl").write_text("older")
    path = wheel.main(stack, dist, overlay_src=src, cache=tmp / "cache", progress=quiet)
    return stack, src, tmp, path


def test_exactly_one_wheel_with_the_release_tags_and_a_label_naming_the_stack(built):
    stack, _, tmp, path = built
    digest = hashlib.sha256(b"".join((stack.dir / n).read_bytes() for n in stack.series())).hexdigest()
    # The release wheel's own local label (its torch/version.py: 2.15.0+cu132), then the stack's.
    assert path.name == f"torch-2.15.0+cu132.ndv2.{digest[:8]}-cp311-cp311-manylinux_2_28_x86_64.whl"
    assert sorted(p.name for p in path.parent.iterdir()) == sorted(
        ["notes.txt", path.name, f"{path.name}.json"])


def test_the_manifest_lists_base_patches_files_skips_and_shim_flags(built):
    stack, _, _, path = built
    data = json.loads(Path(f"{path}.json").read_text())
    assert data["built_from"] == "overlay"
    assert data["base"]["commit"] == BASE.commit and data["base"]["wheel"] == BASE.wheel
    assert [(p["name"], p["sha256"]) for p in data["patches"]] == [
        (n, hashlib.sha256((stack.dir / n).read_bytes()).hexdigest()) for n in stack.series()]
    assert list(data["overlaid"]) == ["torch/autograd/function.py"]
    assert [s["path"] for s in data["skipped"]] == ["docs/source/notes/ndv_double.rst",
                                                    "test/autograd/test_ndv_double.py",
                                                    "torch/csrc/autograd/ndv_test_double.cpp"]
    assert data["shim_build"]["cflags"][:3] == ["-O2", "-std=c++20", "-fPIC"]
    assert data["wheel"] == {"file": path.name, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    assert data["origin"]["release_wheel_sha256"] == BASE.wheel_sha256


def test_the_record_is_regenerated_and_holds_the_overlay(built, tmp_path):
    path = built[3]
    with zipfile.ZipFile(path) as whl:
        names = whl.namelist()
        info = next(n for n in names if n.endswith(".dist-info/RECORD"))
        record = whl.read(info).decode()
        metadata = whl.read(info.replace("RECORD", "METADATA")).decode()
        function_py = whl.read("torch/autograd/function.py")
        version_py = whl.read("torch/version.py").decode()
    assert info.startswith("torch-2.15.0+cu132.ndv2.")
    version = info.split("/")[0].removeprefix("torch-").removesuffix(".dist-info")
    assert f"\nVersion: {version}\n" in metadata and version == path.name.split("-")[1]
    assert f"\n__version__ = '{version}'\n" in version_py  # torch.__version__ says the same
    for member in ("torch/_ndv_overlay/__init__.py", "torch/_ndv_overlay/counting.so",
                   "torch/_ndv_overlay/manifest.json"):
        assert member in names and f"\n{member}," in f"\n{record}"
    digest = hashlib.sha256(function_py).digest()
    assert f"torch/autograd/function.py,sha256={base64.urlsafe_b64encode(digest).rstrip(b'=').decode()}," in record
    # `wheel unpack` verifies every RECORD hash.
    subprocess.run([sys.executable, "-m", "wheel", "unpack", "-d", str(tmp_path), str(path)], check=True,
                   capture_output=True)


def fresh_venv(folder: Path):
    """A new venv: its python, its quiet pip, and an environment free of our overlay. pip
    installs from the machine's wheelhouse alone (scripts/_venv.sh filled it with the release
    wheel's dependency closure, which the patched wheel shares): no 2.8 GB download per venv.
    A venv with torch holds 5.4 GB: its test is in the xdist group "fresh_venv" (one at a time)
    and makes it in tmp_path (removed when the test passes)."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True)
    python = str(folder / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "NDV_", "LD_"))}
    return python, [python, "-m", "pip", "--disable-pip-version-check", "--quiet"], env


def install(pip: list[str], *what: str) -> None:
    """pip install WHAT from the machine's wheelhouse alone."""
    subprocess.run([*pip, "install", "--no-index", "--find-links", str(wheel.wheelhouse()), *what], check=True)


def assert_pip_check(pip: list[str]) -> None:
    check = subprocess.run([*pip, "check"], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout


@pytest.mark.xdist_group("fresh_venv")
def test_a_fresh_venv_gets_the_whole_stack_and_a_reinstall_restores_stock(built, tmp_path):
    _, _, _, path = built
    python, pip, env = fresh_venv(tmp_path / "venv")
    install(pip, str(path))
    assert_pip_check(pip)
    out = subprocess.run([python, "-c", CHECK_SCRIPT], capture_output=True, text=True, env=env, cwd=tmp_path)
    version = path.name.split("-")[1]
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [version, "the_python_hunk_is_in_effect", "1"]
    subprocess.run([*pip, "uninstall", "-y", "torch"], check=True)
    install(pip, "torch==2.15.0")
    out = subprocess.run([python, "-c", CHECK_SCRIPT], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert out.stdout.split() == ["2.15.0+cu132", "stock", "no_shim"]


EAGER_BUG = ("import torch\n"
             "class F(torch.autograd.Function):\n"
             "    @staticmethod\n"
             "    def forward(ctx, x):\n"
             "        y = x * 2\n"
             "        v = y.view(-1)\n"
             "        ctx.mark_non_differentiable(v)\n"
             "        return y, v\n"
             "    @staticmethod\n"
             "    def backward(ctx, gy, gv):\n"
             "        return gy * 2\n"
             "y, v = F.apply(torch.randn(2, 3, requires_grad=True))\n"
             "print(torch.__version__, v.requires_grad)\n")


# A Python-only [aotautograd] patch (the dealias patch): inductor returns h * 1 and h.detach() as
# one object, and marking the detached slot marked the other: it came back without a grad_fn
# (stock), and backward through it failed.
COMPILED_BUG = ("import torch\n"
                "x = torch.randn(8, requires_grad=True)\n"
                "def f(x):\n"
                "    h = x.sin()\n"
                "    return h * 1, h.detach()\n"
                "out = torch.compile(f, backend='inductor')(x)[0]\n"
                "print(torch.__version__, out.grad_fn is not None)\n")


@pytest.mark.xdist_group("fresh_venv")
def test_the_real_stacks_wheel_fixes_the_eager_bug_in_a_fresh_venv(tmp_path):
    """The C++ shim (the [autograd] patch, eager) and the Python hunks (the dealias patch, compiled)
    are all active, and pip check is clean. Needs those patches in the series."""
    path = wheel.main(Stack(DEFAULT_PATCHES), tmp_path / "dist", progress=quiet)
    data = json.loads(Path(f"{path}.json").read_text())
    assert [s["name"] for s in data["shims"]] == ["mark_non_differentiable_views"]
    assert any(path.startswith("torch/_functorch/_aot_autograd/") for path in data["overlaid"])
    python, pip, env = fresh_venv(tmp_path / "venv")
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp_path / "inductor")
    install(pip, str(path))
    assert_pip_check(pip)
    fixed = subprocess.run([python, "-c", EAGER_BUG], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert fixed.stdout.split() == [path.name.split("-")[1], "False"], fixed.stderr
    fixed = subprocess.run([python, "-c", COMPILED_BUG], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert fixed.stdout.split() == [path.name.split("-")[1], "True"], fixed.stderr
    install(pip, "--force-reinstall", "--no-deps", "torch==2.15.0")
    stock = subprocess.run([python, "-c", EAGER_BUG], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert stock.stdout.split() == ["2.15.0+cu132", "True"], stock.stderr
    stock = subprocess.run([python, "-c", COMPILED_BUG], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert stock.stdout.split() == ["2.15.0+cu132", "False"], stock.stderr


def test_a_truncated_release_wheel_is_refused_and_dist_is_unchanged(built, tmp_path):
    stack, src, tmp, path = built
    truncated = tmp_path / BASE.wheel
    with open(wheel.wheelhouse() / BASE.wheel, "rb") as whole:
        truncated.write_bytes(whole.read(1 << 20))
    before = dist_state(path.parent)
    with pytest.raises(BadInput, match=rf"{re.escape(BASE.wheel)}: truncated or corrupted \(sha256 "):
        wheel.main(stack, path.parent, given_wheel=truncated, overlay_src=src, cache=tmp / "cache",
                   progress=quiet)
    renamed = tmp_path / "torch-other.whl"
    truncated.rename(renamed)
    with pytest.raises(BadInput, match=f"not the base's release wheel {re.escape(BASE.wheel)}"):
        wheel.main(stack, path.parent, given_wheel=renamed, overlay_src=src, cache=tmp / "cache",
                   progress=quiet)
    assert dist_state(path.parent) == before


def test_wrong_torch_and_no_compiler_are_refused_and_dist_is_unchanged(built, tmp_path, monkeypatch):
    stack, src, tmp, path = built
    before = dist_state(path.parent)
    other = stack_data(tmp_path / "patches")
    (other.dir / "base.toml").write_text((other.dir / "base.toml").read_text().replace(BASE.commit, "3" * 40))
    with pytest.raises(BadInput, match=f"not the base {'3' * 40}"):
        wheel.main(other, path.parent, overlay_src=src, cache=tmp / "cache", progress=quiet)
    monkeypatch.setenv("CXX", "/nonexistent/g++")
    with pytest.raises(BadInput, match=r"no C\+\+ compiler"):
        wheel.main(stack, path.parent, overlay_src=src, cache=tmp_path / "cold-cache", progress=quiet)
    assert dist_state(path.parent) == before


@pytest.fixture(scope="module")
def changed(built):
    """Another stack (patch 1's message changed: another label, wheel and manifest) and the
    dist/ a complete build of it makes from the built one: the user's file and its wheel."""
    stack, src, tmp, path = built
    folder = tmp / "patches-changed"
    shutil.copytree(stack.dir, folder)
    first = folder / stack.series()[0]
    first.write_text(first.read_text().replace("so tests see it.", "so tests see it (changed)."))
    expected = tmp / "dist-changed"
    expected.mkdir()
    shutil.copy(path.parent / "notes.txt", expected)
    new_path = wheel.main(Stack(folder), expected, overlay_src=src, cache=tmp / "cache", progress=quiet)
    assert new_path.name != path.name
    return Stack(folder), dist_state(expected)


# The last two are pause points inside the publish (atomic.pause_point), not progress lines:
# killed there, the new dist/ is assembled beside the old one, or has just been swapped in.
@pytest.mark.parametrize("stage", ["wheel: unpacking", "wheel: packing", "publish: assembled", "publish: swapped"])
def test_sigkill_at_any_stage_leaves_dist_as_it_was(built, changed, tmp_path, stage):
    stack, src, tmp, path = built
    new_stack, new_state = changed
    dist = tmp_path / "dist"
    shutil.copytree(path.parent, dist, copy_function=os.link)
    before = dist_state(dist)
    assert new_state != before and set(new_state) != set(before)
    command = [str(ROOT / "scripts" / "stack.sh"), "--patches", str(new_stack.dir), "--overlay-src", str(src),
               "wheel", "--dist", str(dist)]
    env = {**os.environ, "NDV_CACHE": str(tmp / "cache"), "NDV_TEST_PAUSE_AT": stage}
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    for line in process.stderr:
        if line.startswith(stage):
            process.send_signal(signal.SIGKILL)
            break
    assert process.wait() == -signal.SIGKILL
    # The old dist/ until the swap, the whole new one from it: never a mix.
    assert dist_state(dist) == (new_state if stage == "publish: swapped" else before)


def test_the_wheel_is_reproducible(built, tmp_path):
    stack, src, tmp, path = built
    again = wheel.main(stack, tmp_path / "dist", overlay_src=src, cache=tmp / "cache", progress=quiet)
    assert again.read_bytes() == path.read_bytes()


# With a fake release wheel (fake_release.py: a few of torch's files under the release wheel's
# name) and the assert shim: a build takes seconds, so every Ctrl-C window and two clones can be tried.
@pytest.fixture(scope="module")
def small(double):
    """The test-double stack pinned to a fake release wheel, built once into the dist/ of a git
    repository laid out as the project's (its .gitignore); another stack (patch 1's message
    changed) and the dist/ its build makes from that one."""
    stack, _, _, tmp = double
    folder = tmp / "small"
    folder.mkdir()
    release = fake_release_wheel(stack, folder)
    old = pinned_to(stack, release, folder / "patches")
    new = pinned_to(stack, release, folder / "patches-changed")
    first = new.dir / new.series()[0]
    first.write_text(first.read_text().replace("so tests see it.", "so tests see it (changed)."))
    src = assert_shim_overlay(folder / "overlay", old.series()[1])
    repo = folder / "repo"
    repo.mkdir()
    shutil.copy(ROOT / ".gitignore", repo)
    subprocess.run(["git", "init", "--quiet", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com",
                    "commit", "--quiet", "-m", "a clone"], check=True)
    wheel.main(old, repo / "dist", release, src, cache=folder / "cache", progress=quiet)
    expected = folder / "dist-new"
    wheel.main(new, expected, release, src, cache=folder / "cache", progress=quiet)
    return SimpleNamespace(release=release, old=old, new=new, src=src, repo=repo, cache=folder / "cache",
                           new_state=dist_state(expected))


def git_status(repo: Path) -> str:
    return subprocess.run(["git", "-C", str(repo), "status", "--porcelain"], capture_output=True, text=True,
                          check=True).stdout


# Before publishing (the first two are progress lines: the signal comes while that step runs), while
# (the new dist/ assembled beside the old one), after (just swapped in, the old one not yet removed).
@pytest.mark.parametrize("stage", ["wheel: unpacking", "wheel: packing", "publish: assembled", "publish: swapped"])
def test_ctrl_c_at_any_stage_exits_130_with_one_line_and_leaves_no_trace(small, tmp_path, stage):
    repo = tmp_path / "repo"
    shutil.copytree(small.repo, repo)
    before, status = dist_state(repo / "dist"), git_status(repo)
    assert status == "" and before != small.new_state
    command = [str(ROOT / "scripts" / "stack.sh"), "--patches", str(small.new.dir), "--overlay-src",
               str(small.src), "wheel", "--dist", "dist", "--release-wheel", str(small.release)]
    env = {**os.environ, "NDV_CACHE": str(small.cache), "NDV_TEST_PAUSE_AT": stage}
    # In a session of its own, and the signal to the whole group: as Ctrl-C in a terminal does.
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, cwd=repo,
                               start_new_session=True)
    for line in process.stderr:
        if line.startswith(stage):
            os.killpg(process.pid, signal.SIGINT)
            break
    rest = process.stderr.read().splitlines()
    assert process.wait() == 130
    swapped = stage == "publish: swapped"
    assert rest == ["interrupted: dist/ already holds the new wheel (complete: it was swapped in just before)"
                    if swapped else "interrupted: dist/ unchanged"]
    assert git_status(repo) == status and not list(repo.glob(".ndv-*"))
    assert dist_state(repo / "dist") == (small.new_state if swapped else before)


def test_two_clones_in_different_paths_build_byte_identical_wheels(small, tmp_path):
    """Everything a build reads from its clone (the tool, patches/, overlay/, the shim cache) is at
    another path; the wheel and its manifest are the same bytes and name neither clone."""
    built = []
    for clone in (tmp_path / "a", tmp_path / "b" / "elsewhere" / "clone"):
        shutil.copytree(ROOT / "scripts", clone / "scripts", ignore=shutil.ignore_patterns("__pycache__",
                                                                                           "node_modules"))
        for name in ("pyproject.toml", "constraints.txt"):
            shutil.copy(ROOT / name, clone)
        shutil.copytree(small.old.dir, clone / "patches")
        assert_shim_overlay(clone / "overlay", small.old.series()[1])
        env = {**os.environ, "PYTHONPATH": str(clone / "scripts"), "NDV_VENV": sys.prefix,
               "NDV_CACHE": str(clone / "cache")}
        result = subprocess.run([str(clone / "scripts" / "build.sh"), "--release-wheel", str(small.release)],
                                cwd=clone, env=env, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        [path] = (clone / "dist").glob("*.whl")
        with zipfile.ZipFile(path) as whl:
            for member in whl.namelist():
                assert str(tmp_path).encode() not in whl.read(member), member
                assert sys.prefix.encode() not in whl.read(member), member
        built.append(dist_state(clone / "dist"))
    assert built[0] == built[1] and len(built[0]) == 2


def test_every_long_step_of_the_build_says_how_it_goes(small, tmp_path, monkeypatch):
    """The heartbeat (progress.heartbeat, every 10 s; here every 10 ms) covers each step that can
    take long with the real release wheel: fetching and checking it, the shims, unpack, pack, publish."""
    monkeypatch.setattr(progress, "EVERY", 0.01)
    lines = []
    wheel.main(small.old, tmp_path / "dist", small.release, small.src, cache=tmp_path / "cache",
               progress=lines.append)
    steps = {line.split(" ...")[0] for line in lines if line.startswith("wheel: still ")}
    assert {"wheel: still compiling the shims", "wheel: still unpacking", "wheel: still packing"} <= steps
    assert any(re.search(r"^wheel: still packing \.\.\. \d+ s, \d+ of about 0 MB written$", line) for line in lines)


def _build_sh(dist: Path, wrap: list[str] = ()) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    result = subprocess.run([*wrap, str(ROOT / "scripts" / "build.sh"), "--dist", str(dist)], capture_output=True,
                            text=True, cwd=ROOT)
    return result, time.monotonic() - start


def _git_status() -> str:
    return subprocess.run(["git", "status", "--porcelain"], capture_output=True, text=True, cwd=ROOT).stdout


def test_an_unwritable_dist_and_a_small_disk_are_refused_at_once(tmp_path):
    """In one line, exit 2, within 5 s, nothing written: not a traceback after a minute of work."""
    status = _git_status()
    disk = tmp_path / "disk"
    disk.mkdir()
    # A small disk and a read-only one: a tmpfs of a user namespace of our own (no privileges needed).
    small, took = _build_sh(disk / "dist", ["unshare", "-rm", "sh", "-c", f'mount -t tmpfs -o size=64m tmpfs {disk}'
                                            ' && exec "$@"', "sh"])
    assert (small.returncode, small.stdout) == (2, ""), small.stderr
    assert re.fullmatch(rf"error: {disk}/dist: 0\.1 GiB free on its disk; the wheel needs about 2 GiB there "
                        r"while it is made \(pass --dist DIR on a larger disk\)\n", small.stderr), small.stderr
    assert took < 5
    ro, took = _build_sh(disk / "dist", ["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=4g tmpfs {disk} && "
                                         f"mkdir {disk}/dist && mount -o remount,ro {disk} && exec \"$@\"", "sh"])
    assert ro.returncode == 2 and ro.stderr == (f"error: {disk}/dist: cannot write {disk} (Read-only file system); "
                                                "pass --dist DIR to put the wheel elsewhere\n"), ro.stderr
    assert took < 5
    # A dist/ of ours that cannot be written (immutable for root, who ignores permissions).
    dist = tmp_path / "dist"
    dist.mkdir()
    (dist / "notes.txt").write_text("mine\n")
    lock = ["chattr", "+i", str(dist)] if os.geteuid() == 0 else ["chmod", "555", str(dist)]
    subprocess.run(lock, check=True)
    try:
        result, took = _build_sh(dist)
    finally:
        subprocess.run(["chattr", "-i", str(dist)] if os.geteuid() == 0 else ["chmod", "755", str(dist)], check=True)
    assert result.returncode == 2 and result.stderr.startswith(f"error: {dist}: cannot write it ("), result.stderr
    assert result.stderr.count("\n") == 1 and took < 5
    assert sorted(p.name for p in dist.iterdir()) == ["notes.txt"] and not list(tmp_path.glob(".ndv-*"))
    assert _git_status() == status


def test_a_disk_that_fills_up_midway_is_one_line(monkeypatch):
    def full(*args, **kwargs):
        return subprocess.CompletedProcess(args, 1, "", "Traceback ...\nOSError: [Errno 28] No space left on device\n")
    monkeypatch.setattr(wheel.subprocess, "run", full)
    with pytest.raises(WorkFailed, match=r"^wheel unpack: no space left on device \(the wheel needs about 2 GiB "
                                         r"beside dist/ while it is made\); nothing was published$"):
        wheel._run_wheel(lambda msg: None, "wheel: still unpacking", "unpack", "x.whl")
