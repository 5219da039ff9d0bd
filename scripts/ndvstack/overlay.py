"""overlay: the stack laid over the installed stock torch, without a source build.

The overlay is a folder holding a torch/ package: hard links to the installed wheel's
files (never edited: each patched file is written as a new file), the stack's patched
Python files, and torch/_ndv_overlay/ with the compiled native shims and their loader.
Putting the folder first on PYTHONPATH (see `run`) makes `import torch` take it.
Overlays are cached by a content hash of everything that goes into them and built in
a temporary folder renamed into place, so an interrupted build never changes one. A new
build removes the cached overlays of torch installs that are gone (see prune_dead).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ndvstack import cpp_text, lint, shims
from ndvstack.atomic import build_dir, pause_point
from ndvstack.basetree import require_base_torch
from ndvstack.installed import InstalledTorch
from ndvstack.layers import DEFAULT_OVERLAY_SRC, lay_into, make_plan, manifest, patched_files, sha256
from ndvstack.progress import count
from ndvstack.stack import Stack


def default_cache() -> Path:
    if "NDV_CACHE" in os.environ:
        return Path(os.environ["NDV_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ndvstack"


def stack_label(stack: Stack, wheel_version: str) -> str:
    """The local version label naming the stack: <release local>.ndv<N>.<hash of patches>."""
    names = stack.series()
    digest = hashlib.sha256()
    for name in names:
        digest.update((stack.dir / name).read_bytes())
    local = wheel_version.split("+", 1)[1] + "." if "+" in wheel_version else ""
    return f"{local}ndv{len(names)}.{digest.hexdigest()[:8]}"


def overlay_key(stack: Stack, overlay_src: Path, torch_dir: Path, allow_unshimmed: bool) -> str:
    """Everything that decides the overlay's content, without importing torch (kept fast:
    a warm `run` only computes this)."""
    digest = hashlib.sha256(f"{sys.version}\0{allow_unshimmed}\0{torch_dir}\0".encode())
    inputs = [stack.dir / name for name in stack.series()]
    inputs += sorted(p for p in overlay_src.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    record = next(torch_dir.parent.glob("torch-*.dist-info/RECORD"), None)
    inputs += [record] if record else []
    for path in inputs:
        digest.update(str(path).encode() + b"\0" + path.read_bytes())
    cxx = shims.compiler()
    digest.update(subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.encode()
                  if shutil.which(cxx) else b"no compiler")
    return digest.hexdigest()


def _link_tree(source: Path, target: Path) -> None:
    """TARGET mirrors SOURCE with hard links (symlinks across filesystems)."""
    for folder, dirs, files in os.walk(source):
        rel = Path(folder).relative_to(source)
        (target / rel).mkdir(parents=True, exist_ok=True)
        for name in files:
            try:
                os.link(Path(folder, name), target / rel / name)
            except OSError:
                os.symlink(Path(folder, name), target / rel / name)


def prune_dead(builds: Path) -> list[Path]:
    """Removes the cached overlays whose torch install is gone (a deleted venv, a scratch
    clone): none can be used again, its key names that install, and its hard links would
    keep all of that torch's files (about 750 MB) on disk."""
    removed = []
    for folder in sorted(builds.iterdir()):
        try:
            data = json.loads((folder / "torch/_ndv_overlay/manifest.json").read_text())
            site = Path(data["origin"]["site"])
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a build in progress, or not an overlay: left alone
        if not site.is_dir():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def ensure(stack: Stack, overlay_src: Path = DEFAULT_OVERLAY_SRC, cache: Path | None = None,
           allow_unshimmed: bool = False, progress=lambda msg: print(msg, file=sys.stderr),
           cpp_from: Path | None = None, torch: InstalledTorch | None = None,
           toolchain: shims.Toolchain | None = None) -> Path:
    """The overlay's folder for the stack over the installed torch (or TORCH), built if not
    cached. Put it first on PYTHONPATH. With CPP_FROM (a source: see cpp_text), the C++
    patches' own text, compiled, stands in for their shims."""
    cache = cache or default_cache()
    start = time.monotonic()
    lint.check(stack)
    base = stack.base
    torch = torch or require_base_torch(base)
    torch_dir = Path(torch.location)
    builds = cache / "overlays"
    key = overlay_key(stack, overlay_src, torch_dir, allow_unshimmed)
    texts = None
    if cpp_from is not None:  # compiled (or found in the cache) first: the overlay depends on it
        toolchain = toolchain or shims.Toolchain.detect()
        texts, _, where = cpp_text.build(stack.patches(), shims.load_shims(overlay_src), cpp_from, base,
                                         overlay_src, toolchain, cache, progress)
        key = hashlib.sha256(f"{key}\0{where}".encode() +
                             b"".join(sha256(t.library).encode() for t in texts)).hexdigest()
    final = builds / key[:32]
    if (final / "torch").is_dir():
        progress(f"overlay: up to date ({final}, {time.monotonic() - start:.2f}s)")
        return final

    patches = stack.patches()
    plan = make_plan(patches, shims.load_shims(overlay_src), allow_unshimmed)
    patched = patched_files(plan, torch_dir.parent)
    if plan.shims and texts is None:
        toolchain = toolchain or shims.Toolchain.detect()
        libraries = {shim.name: shims.build(shim, toolchain, cache, progress) for shim in plan.shims}
    else:
        libraries = {t.name: t.library for t in texts or []}
    label = stack_label(stack, torch.version)
    data = manifest(plan, base, "overlay", label, toolchain,
                    {"torch": torch.version, "git_version": torch.git_version, "site": str(torch_dir)})
    if texts is not None:
        data["shims"] = cpp_text.manifest_entries(texts)
        data["cpp_from"] = where

    tmp = build_dir(builds, "building")
    try:
        progress(f"overlay: linking {torch_dir} ...")
        _link_tree(torch_dir, tmp / "torch")
        lay_into(tmp, patched, libraries, overlay_src / "loader", data)
        pause_point("overlay: laid")
        os.rename(tmp, final)
        pause_point("overlay: renamed")
    except OSError:
        if not (final / "torch").is_dir():  # not a lost race with an identical build
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    dead = prune_dead(builds)
    if dead:
        progress(f"overlay: removed {len(dead)} cached overlays of torch installs that no longer exist")
    native = "compiled C++ text" if texts is not None else "shim"
    progress(f"overlay: {count(len(patched), 'Python file')}, {count(len(libraries), native)}, "
             f"{count(len(plan.skipped), 'hunk')} skipped -> {final} ({time.monotonic() - start:.1f}s)")
    return final


def main(stack: Stack, out, overlay_src: Path = DEFAULT_OVERLAY_SRC, allow_unshimmed: bool = False) -> None:
    folder = ensure(stack, overlay_src, allow_unshimmed=allow_unshimmed)
    data = json.loads((folder / "torch/_ndv_overlay/manifest.json").read_text())
    for path, names in data["overlaid"].items():
        print(f"overlaid {path} ({', '.join(names)})", file=out)
    for shim in data["shims"]:
        print(f"{shim.get('kind', 'shim')} {shim['name']} for {shim['patch']}", file=out)
    for skipped in data["skipped"]:
        print(f"skipped {skipped['path']} ({skipped['patch']}, {skipped['hunks']} hunks): "
              f"{skipped['reason']}", file=out)
    print(folder, file=out)
