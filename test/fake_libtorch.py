"""Test doubles for verify-cpp and --cpp-from (not upstream code): a tiny fake torch whose
"libtorch_cpu.so" is built from a fake C++ source file, a "libtorch_python.so" that calls
it through its GOT like the real bindings do, a git repository holding that source with a
one-patch stack against it, and a shim for the patch. Everything compiles in about a
second without torch's headers, so the tool's apply, compile, symbol and initialiser
checks, the interposition (the overlay's real loader and its GOT check) and the comparison
of the two test runs are tested fast and offline.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from fake_pytorch import FakePytorch, stack_from_commits
from ndvstack.installed import InstalledTorch
from ndvstack.layers import DEFAULT_OVERLAY_SRC
from ndvstack.shims import Toolchain
from ndvstack.stack import Stack

UNIT = "torch/csrc/autograd/ndv_fake_ops.cpp"
TEST_FILE = "test/test_ndv_fake_ops.py"
SCALE = "_ZN8ndv_fake5scaleEi"         # ndv_fake::scale(int): what the fake patch changes
REGISTER = "_ZN8ndv_fake11register_opEPKc"

HEADER = """\
// A test double of a libtorch header (not upstream code).
#pragma once

namespace ndv_fake {
int scale(int x);
int offset(int x);
int register_op(const char* name);
extern int registrations;
} // namespace ndv_fake
"""

# The fake upstream source at the base: scale()'s signature is more than three lines above
# the line the patch changes, so a changed signature still lets the hunk apply.
SOURCE = """\
// A test double of a libtorch source file (not upstream code).
#include <ndv_fake/ops.h>

namespace ndv_fake {

int scale(int x) {
  // How much every caller of scale() gets:
  // the test double's patch changes the
  // factor below and nothing else.
  int factor = 2;
  return x * factor;
}

int offset(int x) {
  return x + 1;
}

} // namespace ndv_fake
"""

REGISTRY = """\
// The rest of the fake libtorch (not upstream code).
#include <ndv_fake/ops.h>

namespace ndv_fake {
int registrations = 0;
int register_op(const char*) {
  return ++registrations;
}
} // namespace ndv_fake
"""

# Called through libtorch_python's GOT, as torch's Python bindings call libtorch.
BINDINGS = """\
// A test double of libtorch_python (not upstream code).
#include <ndv_fake/ops.h>

extern "C" int ndv_fake_scale(int x) { return ndv_fake::scale(x); }
extern "C" int ndv_fake_offset(int x) { return ndv_fake::offset(x); }
"""

PACKAGE_INIT = """\
# A test double of torch/__init__.py (not upstream code).
import ctypes
import os

_C = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "lib", "libtorch_python.so"))


def scale(x):
    return _C.ndv_fake_scale(x)


def offset(x):
    return _C.ndv_fake_offset(x)
"""

# The stack's own test file: fails on the fake stock library (scale by two).
TESTS = """\
import torch


def test_scale_by_three():
    assert torch.scale(2) == 6


def test_scale_of_a_negative():
    assert torch.scale(-1) == -3


def test_offset_unchanged():
    assert torch.offset(2) == 3
"""

SHIM = """\
// A test double of a native shim (not upstream code): the fake patch's fix{note}.
#include <ndv_fake/ops.h>

#include "ndv_shim_support.h"

namespace ndv_fake {{
int scale(int x) {{
  return {body};
}}
}} // namespace ndv_fake
"""
SHIM_BODIES = {"faithful": ("", "x * 3"),
               "drifted": (", except for negative numbers (it drifted)", "x > 0 ? x * 3 : x * 2")}


@dataclass
class FakeWorld:
    root: Path
    stack: Stack
    source: FakePytorch       # the fake upstream checkout: base, then the patch's commit
    torch: InstalledTorch     # the fake torch package
    toolchain: Toolchain      # compiling against it

    def overlay_src(self, shim: str = "faithful", symbol: str = SCALE) -> Path:
        """The real loader and shim support, with the fake patch's shim (a new folder each call)."""
        target = self.root / f"overlay-{shim}-{len(list(self.root.glob('overlay-*')))}"
        (target / "native").mkdir(parents=True)
        shutil.copytree(DEFAULT_OVERLAY_SRC / "loader", target / "loader",
                        ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy(DEFAULT_OVERLAY_SRC / "native" / "ndv_shim_support.h", target / "native")
        note, body = SHIM_BODIES[shim]
        (target / "native" / "scale_shim.cpp").write_text(SHIM.format(note=note, body=body))
        (target / "shims.toml").write_text(
            f'[[shim]]\npatch = "{self.stack.series()[0]}"\nname = "scale"\n'
            f'source = "native/scale_shim.cpp"\nsymbols = ["{symbol}"]\nbound_in = "libtorch_python"\n')
        return target

    def source_folder(self, name: str, text: str = SOURCE) -> Path:
        """A plain folder holding the fake source file at its repo path, with TEXT."""
        folder = self.root / "sources" / name
        (folder / UNIT).parent.mkdir(parents=True)
        (folder / UNIT).write_text(text)
        return folder

    def options(self, **more) -> dict:
        return {"torch": self.torch, "toolchain": self.toolchain, **more}


def _compile(*args: str) -> None:
    subprocess.run(["c++", "-O2", "-std=c++20", "-fPIC", "-shared", *args], check=True)


def fake_world(root: Path) -> FakeWorld:
    package = root / "site" / "torch"
    include, lib = package / "include", package / "lib"
    (include / "ndv_fake").mkdir(parents=True)
    lib.mkdir()
    (include / "ndv_fake" / "ops.h").write_text(HEADER)
    (package / "__init__.py").write_text(PACKAGE_INIT)
    build = root / "build"
    build.mkdir()
    for name, text in (("ops.cpp", SOURCE), ("registry.cpp", REGISTRY), ("bindings.cpp", BINDINGS)):
        (build / name).write_text(text)
    # The "release" libtorch_cpu is built from the fake source at the base, as upstream's is.
    _compile("-I", str(include), str(build / "ops.cpp"), str(build / "registry.cpp"), "-o",
             str(lib / "libtorch_cpu.so"))
    _compile("-I", str(include), str(build / "bindings.cpp"), "-o", str(lib / "libtorch_python.so"),
             f"-L{lib}", "-ltorch_cpu", "-Wl,-rpath,$ORIGIN", "-Wl,-z,now")

    path = root / "pytorch"
    path.mkdir()
    subprocess.run(["git", "init", "--quiet", "--initial-branch=main", str(path)], check=True)
    source = FakePytorch(path, "")
    source.base = source.commit("Fake pytorch base", {UNIT: SOURCE}, date="2026-01-02T03:04:05+00:00")
    source.commit("[autograd] Fake: scale by three\n\nThe factor was wrong.\n",
                  {UNIT: SOURCE.replace("int factor = 2;", "int factor = 3;"), TEST_FILE: TESTS},
                  date="2026-01-03T03:04:05+00:00")
    stack_from_commits(source, root / "patches")
    version = subprocess.run(["c++", "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    toolchain = Toolchain("c++", version, ("-O2", "-std=c++20", "-fPIC", "-shared", "-isystem", str(include)),
                          (f"-L{lib}", "-Wl,-rpath,$ORIGIN/../lib", "-Wl,--no-as-needed", "-ltorch_cpu", "-ldl"),
                          str(lib))
    torch = InstalledTorch("2.15.0+cu132", source.base, str(package))
    return FakeWorld(root, Stack(root / "patches"), source, torch, toolchain)
