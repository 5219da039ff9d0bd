"""wheel: the patched wheel, made from the release wheel of the base without a source build.

The release wheel (from the wheelhouse, fetched there by pip when missing; checked against
base.toml's sha256) is unpacked with the `wheel` package; the stack's Python hunks, the
compiled shims and their loader are laid in (layers.py, as in the overlay); `wheel pack
--local-version` repacks it under a local version label naming the release's build and the
stack (2.15.0+cu132.ndv<N>.<hash>, torch/version.py saying the same) and regenerates
RECORD. The wheel and its manifest `<wheel>.json` reach dist/ together: the new dist/ is
assembled beside the old one and the two are swapped with one atomic
renameat2(RENAME_EXCHANGE).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ndvstack import lint, shims
from ndvstack.atomic import build_dir, exchange, pause_point, remove
from ndvstack.basetree import require_base_torch
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.layers import DEFAULT_OVERLAY_SRC, lay_into, make_plan, manifest, patched_files, sha256
from ndvstack.overlay import default_cache, stack_label
from ndvstack.progress import heartbeat, written
from ndvstack.stack import REPO_ROOT, Base, Stack

DEFAULT_DIST = REPO_ROOT / "dist"
# The most a run writes beside dist/ at once: the unpacked release wheel, the new wheel and, while
# they are swapped, the old dist/ (1.6 GiB at the peak for 2.15.0, measured 2026-12-06); rounded up.
NEED_BYTES = 2 << 30


def check_dist(dist: Path) -> None:
    """Refuse at once (BadInput) a dist/ that cannot be written or whose disk has too little room:
    not after a minute of work, and before anything is written."""
    folder = dist.parent
    while not folder.exists():
        folder = folder.parent
    for where in (folder, dist) if dist.is_dir() else (folder,):
        try:  # a real write: permissions, a read-only mount and an immutable folder all refuse it
            os.rmdir(tempfile.mkdtemp(prefix=".ndv-probe-", dir=where))
        except OSError as e:
            raise BadInput(f"{dist}: cannot write {'it' if where == dist else where} ({e.strerror}); "
                           f"pass --dist DIR to put the wheel elsewhere") from None
    free = shutil.disk_usage(folder).free
    if free < NEED_BYTES:
        raise BadInput(f"{dist}: {free / (1 << 30):.1f} GiB free on its disk; the wheel needs about "
                       f"{NEED_BYTES >> 30} GiB there while it is made (pass --dist DIR on a larger disk)")


def _no_space(what: str) -> WorkFailed:
    return WorkFailed(f"{what}: no space left on device (the wheel needs about {NEED_BYTES >> 30} GiB beside "
                      f"dist/ while it is made); nothing was published")


def wheelhouse() -> Path:
    """Where torch's wheel and its dependencies' are kept once downloaded, for every venv and
    build on this machine (scripts/_venv.sh fills it too: pip's own cache keeps nothing where
    the package index sends no caching headers)."""
    if os.environ.get("NDV_WHEELHOUSE"):
        return Path(os.environ["NDV_WHEELHOUSE"])
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ndvstack" / "wheels"


def _fetch(base: Base, folder: Path, progress) -> None:
    """Downloads the release wheel into FOLDER (by rename: never a partial file there), and lists
    it in FOLDER/.complete, which scripts/_venv.sh keeps, under its lock."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / base.wheel).is_file():
            return  # another build fetched it meanwhile
        progress(f"wheel: fetching {base.wheel} with pip into {folder} ...")
        with tempfile.TemporaryDirectory(dir=folder, prefix=".fetch-") as tmp:
            result = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                                     "--only-binary=:all:", "--dest", tmp, f"torch=={base.wheel_version}"],
                                    capture_output=True, text=True)
            fetched = Path(tmp, base.wheel)
            if result.returncode != 0 or not fetched.is_file():
                raise WorkFailed(f"pip could not fetch {base.wheel}: "
                                 f"{(result.stderr.strip().splitlines() or ['no such file'])[-1]}")
            os.replace(fetched, folder / base.wheel)
        listed = (folder / ".complete").read_text().split() if (folder / ".complete").is_file() else []
        (folder / ".complete").write_text("".join(f"{n}\n" for n in sorted({*listed, base.wheel})))


def release_wheel(base: Base, given: Path | None, progress) -> Path:
    """The base's release wheel (GIVEN, or the wheelhouse's, fetched if it lacks it), verified
    against base.toml's sha256."""
    if given is None:
        given = wheelhouse() / base.wheel
        if not given.is_file():
            _fetch(base, given.parent, progress)
    if not given.is_file():
        raise BadInput(f"{given}: no such release wheel")
    if given.name != base.wheel:
        raise BadInput(f"{given}: not the base's release wheel {base.wheel}")
    actual = sha256(given)
    if actual != base.wheel_sha256:
        raise BadInput(f"{given}: truncated or corrupted (sha256 {actual[:16]}..., "
                       f"base.toml pins {base.wheel_sha256[:16]}...)")
    return given


def torch_version(package_root: Path, base: Base) -> str:
    """torch.__version__ of the unpacked release wheel (its file name may lack the local label:
    2.15.0's says 2.15.0, its torch/version.py 2.15.0+cu132); BadInput unless it is the base's release."""
    text = (package_root / "torch/version.py").read_text()
    match = re.search(r"^__version__ = '([^']+)'", text, re.M)
    if not match or match[1].split("+")[0] != base.release:
        raise BadInput(f"{base.wheel}: its torch/version.py says {match[1] if match else 'no version'}, "
                       f"not release {base.release}")
    return match[1]


def publish(built: Path, data: dict, dist: Path, tmp: Path) -> None:
    """dist/ becomes its old content less any torch wheel, plus BUILT and its manifest
    <wheel>.json (DATA, with the wheel's name and sha256 added), in one step. BUILT must
    be on dist's filesystem; TMP is a build_dir() beside dist."""
    data["wheel"] = {"file": built.name, "sha256": sha256(built)}
    manifest_file = built.parent / f"{built.name}.json"
    manifest_file.write_text(json.dumps(data, indent=2) + "\n")
    new = tmp / "dist"
    new.mkdir()
    if dist.is_dir():
        for item in dist.iterdir():
            if not (item.name.startswith("torch-") and item.name.endswith((".whl", ".whl.json"))):
                (os.link if item.is_file() else shutil.copytree)(item, new / item.name)
    for path in (built, manifest_file):
        os.rename(path, new / path.name)
    pause_point("publish: assembled")
    if dist.is_dir():
        exchange(new, dist)  # the old dist/ is now at NEW, removed with TMP
    else:
        os.rename(new, dist)
    pause_point("publish: swapped")


def _run_wheel(progress, what: str, *args: str, status=lambda: "") -> None:
    # A fixed zip timestamp (unless the caller chose one): the same stack gives the same bytes.
    env = {"SOURCE_DATE_EPOCH": "315532800", **os.environ}
    with heartbeat(progress, what, status):
        result = subprocess.run([sys.executable, "-m", "wheel", *args], capture_output=True, text=True, env=env)
    if result.returncode != 0:
        if "No space left on device" in result.stderr:
            raise _no_space(f"wheel {args[0]}")
        raise WorkFailed(f"wheel {args[0]} failed: {(result.stderr or result.stdout).strip()[-300:]}")


def main(stack: Stack, dist: Path = DEFAULT_DIST, given_wheel: Path | None = None,
         overlay_src: Path = DEFAULT_OVERLAY_SRC, cache: Path | None = None,
         allow_unshimmed: bool = False, progress=lambda msg: print(msg, file=sys.stderr)) -> Path:
    """Builds the patched wheel into DIST; returns its path."""
    start = time.monotonic()
    cache = cache or default_cache()
    lint.check(stack)
    check_dist(dist)
    base = stack.base
    require_base_torch(base)  # the shims are compiled against it
    with heartbeat(progress, "wheel: still getting the release wheel"):
        source = release_wheel(base, given_wheel, progress)
    plan = make_plan(stack.patches(), shims.load_shims(overlay_src), allow_unshimmed)
    with heartbeat(progress, "wheel: still compiling the shims"):
        toolchain = shims.Toolchain.detect() if plan.shims else None
        libraries = {shim.name: shims.build(shim, toolchain, cache, progress) for shim in plan.shims}

    tmp = build_dir(dist.parent, "ndv-wheel")
    try:
        progress(f"wheel: unpacking {source.name} ...")
        _run_wheel(progress, "wheel: still unpacking", "unpack", "--dest", str(tmp / "unpacked"), str(source))
        [root] = (tmp / "unpacked").iterdir()
        # The release's own local label (cu132) first, then the stack's: 2.15.0+cu132.ndv<N>.<hash>.
        label = stack_label(stack, torch_version(root, base))
        version = f"{base.release}+{label}"
        patched = patched_files(plan, root)
        data = manifest(plan, base, "overlay", label, toolchain,
                        {"release_wheel": source.name, "release_wheel_sha256": base.wheel_sha256})
        lay_into(root, patched, libraries, overlay_src / "loader", data, version=version)
        progress(f"wheel: packing {version} ...")
        (tmp / "out").mkdir()
        _run_wheel(progress, "wheel: still packing", "pack", "--local-version", label, "--dest-dir",
                   str(tmp / "out"), str(root), status=lambda: written(tmp / "out", source.stat().st_size))
        [built] = (tmp / "out").iterdir()
        progress(f"wheel: publishing into {dist} ...")
        with heartbeat(progress, "wheel: still publishing"):
            publish(built, data, dist, tmp)
        progress(f"wheel: {built.name} is in {dist}; removing the temporary files ...")
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise _no_space("wheel") from None
        raise
    finally:  # the unpacked release wheel (1.1 GB): 40 s where the disk is still writing it out
        with heartbeat(progress, "wheel: still removing the temporary files"):
            remove(tmp)
    progress(f"wheel: {dist / built.name} ({time.monotonic() - start:.0f}s)")
    return dist / built.name
