"""A test double of the stack: two small patches made at test time against the installed
wheel's own files (through base-tree and export, like a real Python-only patch), with a
test-double shim. Used to test the overlay and the wheel before, and besides, the real
stack: one Python hunk, one C++ file with its shim, one test file, one docs file.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from fake_pytorch import FakePytorch
from ndvstack import basetree, export
from ndvstack.layers import DEFAULT_OVERLAY_SRC
from ndvstack.stack import DEFAULT_PATCHES, Stack

DOUBLES = Path(__file__).parent / "doubles"
# torch 2.15.0's two _wrap_outputs overloads (overlay/native/wrap_outputs.h) and where the
# loader checks each: Python Functions reach the ArrayRef one through libtorch_python's GOT,
# C++ Functions the vector one (libtorch_cpu's GOT; an extension binds it by the global lookup).
WRAP_OUTPUTS_ARRAYREF = (
    "_ZN5torch8autograd13_wrap_outputsEN3c108ArrayRefIPKN2at6TensorEEERKSt13unordered_setIPNS1_10Tens"
    "orImplESt4hashISA_ESt8equal_toISA_ESaISA_EESI_NS2_ISt8optionalIS4_EEERKNS1_13intrusive_ptrINS0_4N"
    "odeENS1_6detail34intrusive_target_default_null_typeISN_EEEERKSt8functionIFSt6vectorIS4_SaIS4_EESX"
    "_SX_EESI_RKSU_IFS4_S4_EEbRSR_")
WRAP_OUTPUTS_VECTOR = (
    "_ZN5torch8autograd13_wrap_outputsERKSt6vectorIN2at6TensorESaIS3_EERKSt13unordered_setIPN3c1010Ten"
    "sorImplESt4hashISB_ESt8equal_toISB_ESaISB_EESJ_NS9_8ArrayRefISt8optionalIS3_EEERKNS9_13intrusive_"
    "ptrINS0_4NodeENS9_6detail34intrusive_target_default_null_typeISP_EEEERKSt8functionIFS5_S5_S5_EESJ"
    "_RKSW_IFS3_S3_EEbRST_")


def wrap_outputs_shim(patch: str, name: str, source: str) -> str:
    """A shims.toml stanza for a shim of both _wrap_outputs overloads (as the [autograd] patch's)."""
    return (f'[[shim]]\npatch = "{patch}"\nname = "{name}"\nsource = "{source}"\n'
            f'symbols = ["{WRAP_OUTPUTS_ARRAYREF}", "{WRAP_OUTPUTS_VECTOR}"]\n'
            f'bound_in = ["libtorch_python", ["libtorch_cpu", "global"]]\n')


PYTHON_FILE = "torch/autograd/function.py"
MARKER = '_NDV_TEST_DOUBLE = "the python hunk is in effect"\n'
# The double's own "upstream test file": one test the stack fixes, one it leaves alone.
TEST_FILE = "test/autograd/test_ndv_double.py"
TEST_TEXT = """\
import unittest

import torch.autograd.function as function


class TestNdvDouble(unittest.TestCase):
    def test_python_hunk_in_effect(self):
        self.assertTrue(hasattr(function, "_NDV_TEST_DOUBLE"))

    def test_unaffected(self):
        self.assertEqual(1 + 1, 2)
"""


# Run in a torch with the double laid in, prints: version, the marker (or "stock"), and
# how often the counting shim was called by one Function.apply (or "no shim").
CHECK_SCRIPT = """\
import torch, torch.autograd.function as f
class F(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x): return x * 2
    @staticmethod
    def backward(ctx, g): return g * 2
F.apply(torch.ones(2, requires_grad=True))
print(torch.__version__, getattr(f, "_NDV_TEST_DOUBLE", "stock").replace(" ", "_"),
      torch._ndv_overlay.calls("counting") if hasattr(torch, "_ndv_overlay") else "no_shim")
"""


def quiet(_):
    pass


def make_partial_tree(out: Path) -> FakePytorch:
    root = basetree.main(Stack(DEFAULT_PATCHES), out, progress=quiet)
    return FakePytorch(out, root)


def stack_data(patches: Path) -> Stack:
    patches.mkdir(parents=True)
    for name in ("base.toml", "allowed-paths", "author"):
        shutil.copy(DEFAULT_PATCHES / name, patches / name)
    (patches / "series").write_text("# test double stack\n")
    return Stack(patches)


def overlay_src(target: Path, shimmed_patch: str | None) -> Path:
    """The real loader and shim support, with the counting test double as the only shim."""
    (target / "native").mkdir(parents=True)
    shutil.copytree(DEFAULT_OVERLAY_SRC / "loader", target / "loader",
                    ignore=shutil.ignore_patterns("__pycache__"))
    for header in (DEFAULT_OVERLAY_SRC / "native").glob("*.h"):
        shutil.copy(header, target / "native")
    shutil.copy(DOUBLES / "counting_shim.cpp", target / "native")
    entry = wrap_outputs_shim(shimmed_patch, "counting", "native/counting_shim.cpp") if shimmed_patch \
        else "shim = []\n"
    (target / "shims.toml").write_text(entry)
    return target


def double_stack(tmp: Path, test_text: str = TEST_TEXT) -> tuple[Stack, Path, FakePytorch]:
    """(stack, overlay source, partial tree) of the test double."""
    tree = make_partial_tree(tmp / "tree")
    tree.git.run("checkout", "--quiet", "-b", "ndv/stack")
    text = (tree.path / PYTHON_FILE).read_text()
    tree.commit("[autograd] Test double: a Python hunk\n\nMarks the module so tests see it.\n",
                {PYTHON_FILE: text + "\n" + MARKER}, date="2026-06-01T00:00:00+00:00")
    tree.commit("[autograd] Test double: C++ with a shim\n\nA C++ file, its test and docs.\n",
                {"torch/csrc/autograd/ndv_test_double.cpp": "// test double\n",
                 TEST_FILE: test_text,
                 "docs/source/notes/ndv_double.rst": "Test double\n"},
                date="2026-06-02T00:00:00+00:00")
    stack = stack_data(tmp / "patches")
    names = export.main(stack, tree.path, progress=quiet)
    return stack, overlay_src(tmp / "overlay", names[1]), tree
