"""The overlay over the installed torch, with the test-double stack (fake_stack.py)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fake_stack import CHECK_SCRIPT, MARKER, PYTHON_FILE, overlay_src, quiet, stack_data
from ndvstack import overlay, run
from ndvstack.errors import BadInput
from ndvstack.installed import installed_torch

TORCH_DIR = Path(installed_torch().location)
@pytest.fixture(scope="module")
def overlaid(double):
    stack, src, _, tmp = double
    cache = tmp / "cache"
    return stack, src, cache, overlay.ensure(stack, src, cache=cache, progress=quiet)


def python_in(env):
    return subprocess.run([sys.executable, "-c", CHECK_SCRIPT], env=env, capture_output=True, text=True)


def test_the_overlay_lays_python_hunks_and_shims_and_skips_the_rest(overlaid):
    stack, _, _, folder = overlaid
    data = json.loads((folder / "torch/_ndv_overlay/manifest.json").read_text())
    names = stack.series()
    assert data["built_from"] == "overlay" and data["label"].startswith("cu132.ndv2.")
    assert data["overlaid"] == {PYTHON_FILE: [names[0]]}
    assert data["skipped"] == [
        {"patch": names[1], "path": "docs/source/notes/ndv_double.rst", "hunks": 1,
         "reason": "documentation: not part of the torch package"},
        {"patch": names[1], "path": "test/autograd/test_ndv_double.py", "hunks": 1,
         "reason": "a test file: not part of the torch package"},
        {"patch": names[1], "path": "torch/csrc/autograd/ndv_test_double.cpp", "hunks": 1,
         "reason": "C++: given by the native shim counting"},
    ]
    [shim] = data["shims"]
    assert shim["patch"] == names[1] and shim["library"] == "counting.so"
    assert "-std=c++20" in data["shim_build"]["cflags"]
    assert [p["name"] for p in data["patches"]] == names
    assert (folder / PYTHON_FILE).read_text().endswith(MARKER)


def test_the_overlay_never_edits_site_packages(overlaid):
    folder = overlaid[3]
    stock = TORCH_DIR / "autograd/function.py"
    assert MARKER not in stock.read_text()
    assert (folder / PYTHON_FILE).stat().st_ino != stock.stat().st_ino
    assert (folder / "torch/__init__.py").stat().st_ino != (TORCH_DIR / "__init__.py").stat().st_ino
    # Everything else is the installed files themselves, hard-linked.
    assert (folder / "torch/nn/functional.py").stat().st_ino == (TORCH_DIR / "nn/functional.py").stat().st_ino
    assert (folder / "torch/lib/libtorch_cpu.so").samefile(TORCH_DIR / "lib/libtorch_cpu.so")


def test_run_is_an_a_b_switch(overlaid):
    stack, src, cache, _ = overlaid
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NDV_CACHE", str(cache))
        patched = python_in(run.environment(stack, stock=False, overlay_src=src, progress=quiet))
        stock = python_in(run.environment(stack, stock=True))
    assert patched.returncode == 0, patched.stderr
    assert patched.stdout.split()[1:] == ["the_python_hunk_is_in_effect", "1"]
    assert stock.returncode == 0 and stock.stdout.split()[1:] == ["stock", "no_shim"]


def test_the_import_fails_loudly_when_a_shim_is_not_in_effect(overlaid):
    stack, src, cache, folder = overlaid
    env = {**os.environ, "PYTHONPATH": str(folder),
           # libtorch_cpu first in the global scope: its _wrap_outputs wins over the shim's
           "LD_PRELOAD": str(TORCH_DIR / "lib/libtorch_cpu.so")}
    result = python_in(env)
    assert result.returncode == 1
    assert ("ImportError: ndvstack overlay: shim counting (0002-autograd-Test-double-C-with-a-shim.patch) "
            "is not in effect: libtorch_python binds another definition") in result.stderr


def test_a_warm_overlay_is_reused_and_a_changed_input_rebuilds(overlaid, tmp_path):
    stack, src, cache, folder = overlaid
    messages = []
    assert overlay.ensure(stack, src, cache=cache, progress=messages.append) == folder
    assert messages[0].startswith("overlay: up to date")
    changed = shutil.copytree(src, tmp_path / "src")
    with open(changed / "native/counting_shim.cpp", "a") as source:
        source.write("// changed\n")
    messages.clear()
    rebuilt = overlay.ensure(stack, changed, cache=cache, progress=messages.append)
    assert rebuilt != folder and any(m.startswith("compiling shim counting") for m in messages)


def test_a_cpp_patch_without_a_shim_fails_unless_allowed(overlaid, tmp_path):
    stack, _, cache, _ = overlaid
    unshimmed = overlay_src(tmp_path / "src", shimmed_patch=None)
    with pytest.raises(BadInput, match=r"0002-autograd-Test-double-C-with-a-shim\.patch changes C\+\+ "
                                       r"\(torch/csrc/autograd/ndv_test_double\.cpp\) and has no shim"):
        overlay.ensure(stack, unshimmed, cache=cache, progress=quiet)
    folder = overlay.ensure(stack, unshimmed, cache=cache, allow_unshimmed=True, progress=quiet)
    data = json.loads((folder / "torch/_ndv_overlay/manifest.json").read_text())
    assert data["shims"] == [] and "C++ without a shim: NOT in effect" in data["skipped"][2]["reason"]


def test_a_hunk_that_does_not_apply_to_the_wheel_is_refused(overlaid, tmp_path):
    stack, _, _, _ = overlaid
    bad = stack_data(tmp_path / "patches")
    name = stack.series()[0]
    lines = (stack.dir / name).read_text().splitlines(keepends=True)
    first_context = next(i for i, line in enumerate(lines) if line.startswith("@@ ")) + 1
    lines[first_context] = " a line the wheel's file does not have\n"  # counts unchanged
    (bad.dir / name).write_text("".join(lines))
    with open(bad.dir / "series", "a") as series:
        series.write(name + "\n")
    cache = tmp_path / "cache"
    with pytest.raises(BadInput, match=rf"{name} does not apply to the installed wheel's files: "
                                       rf"{PYTHON_FILE} hunk #1 \(@@ "):
        overlay.ensure(bad, overlay_src(tmp_path / "src", None), cache=cache, progress=quiet)
    assert not (cache / "overlays").exists()


def test_refuses_a_torch_that_is_not_the_base(overlaid, tmp_path):
    stack, src, _, _ = overlaid
    other = stack_data(tmp_path / "patches")
    base = other.dir / "base.toml"
    base.write_text(base.read_text().replace("d0f2af8b66b20da4baa50644c0cd3f887a2eae2e", "2" * 40))
    with pytest.raises(BadInput, match=rf"the installed torch 2\.15\.0\+cu132 is git d0f2af8b66b20da4baa50644c0cd3f887a2eae2e, "
                                       rf"not the base {'2' * 40}"):
        overlay.ensure(other, src, cache=tmp_path / "cache", progress=quiet)


def test_refuses_without_a_cpp_compiler(overlaid, tmp_path, monkeypatch):
    stack, src, _, _ = overlaid
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.raises(BadInput, match=r"no C\+\+ compiler: /nonexistent/c\+\+ not found"):
        overlay.ensure(stack, src, cache=tmp_path / "cache", progress=quiet)
    assert not (tmp_path / "cache" / "overlays").exists()


def tree_state(folder: Path) -> list:
    return sorted((str(p.relative_to(folder)), p.stat().st_ino) for p in folder.rglob("*")
                  if "__pycache__" not in p.parts)


# "shim: compiled", "overlay: laid" and "overlay: renamed" are pause points (atomic.pause_point):
# the process is killed just before, or just after, the rename that publishes the shim or overlay.
@pytest.mark.parametrize("stage", ["compiling shim", "shim: compiled", "overlay: linking", "overlay: laid",
                                   "overlay: renamed"])
def test_sigkill_leaves_earlier_overlays_and_no_half_built_one(overlaid, tmp_path, stage):
    stack, src, cache, folder = overlaid
    changed = shutil.copytree(src, tmp_path / "src")
    with open(changed / "native/counting_shim.cpp", "a") as source:
        source.write(f"// {stage}\n")
    with open(changed / "loader/__init__.py", "a") as loader:  # the new overlay is told from the old
        loader.write(f"# {stage}\n")
    before = tree_state(folder)
    existing = set((cache / "overlays").iterdir())
    existing_shims = set((cache / "shims").iterdir())
    command = [str(Path(__file__).parents[1] / "scripts" / "stack.sh"), "--patches", str(stack.dir),
               "--overlay-src", str(changed), "overlay"]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "NDV_CACHE": str(cache), "NDV_TEST_PAUSE_AT": stage})
    for line in process.stderr:
        if line.startswith(stage):
            process.send_signal(9)
            break
    assert process.wait() == -9
    assert tree_state(folder) == before
    new = set((cache / "overlays").iterdir()) - existing
    new_shims = set((cache / "shims").iterdir()) - existing_shims
    if stage in ("compiling shim", "shim: compiled"):
        assert all(p.name.startswith(".shim-") for p in new_shims)  # no shim published half-built
    if stage == "overlay: renamed":  # published whole: every file an overlay has, the new loader
        [published] = new
        assert not published.name.startswith(".") and (published / "torch").is_dir()
        assert [path for path, _ in tree_state(published)] == [path for path, _ in before]
        assert (published / "torch/_ndv_overlay/__init__.py").read_text().endswith(f"# {stage}\n")
    else:
        assert all(p.name.startswith(".building-") for p in new)  # only the abandoned build folder
    rebuilt = overlay.ensure(stack, changed, cache=cache, progress=quiet)
    assert (rebuilt / "torch/_ndv_overlay/manifest.json").is_file()
    assert (rebuilt / "torch/_ndv_overlay/__init__.py").read_text().endswith(f"# {stage}\n")
    assert stage != "overlay: renamed" or rebuilt == published  # taken as it is, not built again
    assert not list((cache / "overlays").glob(".building-*"))  # the abandoned one was removed
    assert not list((cache / "shims").glob(".shim-*"))


def test_a_new_build_removes_the_overlays_of_torch_installs_that_are_gone(overlaid, tmp_path):
    stack, src, cache, folder = overlaid
    manifest = json.loads((folder / "torch/_ndv_overlay/manifest.json").read_text())

    def cached_overlay(name, site):
        entry = cache / "overlays" / name
        (entry / "torch/_ndv_overlay").mkdir(parents=True)
        data = {**manifest, "origin": {**manifest["origin"], "site": str(site)}}
        (entry / "torch/_ndv_overlay/manifest.json").write_text(json.dumps(data))
        return entry

    gone = tmp_path / "deleted-venv/lib/python3.11/site-packages/torch"
    dead = cached_overlay("0" * 32, gone)
    alive = cached_overlay("1" * 32, TORCH_DIR)
    unknown = cache / "overlays" / "not-an-overlay"
    unknown.mkdir(parents=True)
    messages = []
    assert overlay.ensure(stack, src, cache=cache, progress=messages.append) == folder
    assert dead.is_dir(), "a warm overlay (no build) looks at nothing else"
    changed = shutil.copytree(src, tmp_path / "src")
    with open(changed / "native/counting_shim.cpp", "a") as source:
        source.write("// changed again\n")
    overlay.ensure(stack, changed, cache=cache, progress=messages.append)
    assert not dead.exists() and alive.is_dir() and unknown.is_dir() and folder.is_dir()
    assert "overlay: removed 1 cached overlays of torch installs that no longer exist" in messages
