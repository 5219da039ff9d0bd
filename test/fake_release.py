"""A test double of the base's release wheel, so that a wheel build takes seconds instead of
repacking the real one (hundreds of MB): the installed torch's own torch/__init__.py,
version.py and autograd/function.py (what the test-double stack touches), packed under
the release wheel's file name, and the stack with its base.toml pinning that wheel's
sha256. Also the overlay source with the assert shim, a test-double shim without torch
headers."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from fake_stack import DOUBLES, overlay_src
from ndvstack.installed import installed_torch
from ndvstack.stack import Stack

FILES = ("__init__.py", "version.py", "autograd/function.py")
GLOBAL_CONTEXT = "_ZN2at13globalContextEv"


def fake_release_wheel(stack: Stack, folder: Path) -> Path:
    """FOLDER/<the base's release wheel name>: a valid wheel (RECORD and all) of a few files."""
    base = stack.base
    name, version, *_ = base.wheel.split("-")
    tags = base.wheel.removesuffix(".whl").split("-", 2)[2]
    torch_dir = Path(installed_torch().location)
    tree = folder / "tree"
    for rel in FILES:
        (tree / "torch" / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(torch_dir / rel, tree / "torch" / rel)
    info = tree / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "WHEEL").write_text(f"Wheel-Version: 1.0\nGenerator: ndvstack-test\nRoot-Is-Purelib: false\n"
                                f"Tag: {tags}\n")
    subprocess.run([sys.executable, "-m", "wheel", "pack", "--dest-dir", str(folder), str(tree)],
                   check=True, capture_output=True)
    shutil.rmtree(tree)
    wheel = folder / base.wheel
    assert wheel.is_file(), sorted(p.name for p in folder.iterdir())
    return wheel


def pinned_to(stack: Stack, wheel: Path, folder: Path) -> Stack:
    """A copy of STACK in FOLDER whose base.toml pins WHEEL's sha256."""
    shutil.copytree(stack.dir, folder)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    toml = folder / "base.toml"
    toml.write_text(toml.read_text().replace(stack.base.wheel_sha256, digest))
    return Stack(folder)


def assert_shim_overlay(target: Path, shimmed_patch: str) -> Path:
    """The real loader and shim support, with the assert shim standing in for SHIMMED_PATCH."""
    overlay_src(target, None)
    shutil.copy(DOUBLES / "assert_shim.cpp", target / "native")
    (target / "shims.toml").write_text(
        f'[[shim]]\npatch = "{shimmed_patch}"\nname = "asserting"\nsource = "native/assert_shim.cpp"\n'
        f'symbols = ["{GLOBAL_CONTEXT}"]\nbound_in = "libtorch_python"\n')
    return target
