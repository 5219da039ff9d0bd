"""verify-cpp on the [autograd] patch against upstream texts of custom_function.cpp (test
data, not part of the project): 2.15's, from $NDV_CPP_SOURCE (default ../shared/upstream-2.15
beside the checkout: a folder holding torch/csrc/autograd/custom_function.cpp and upstream's
test/), and the v2.13 reconstruction from $NDV_SHARED_CPP (default ../shared/cpp), which
must be refused. Without them these tests do not run, and say so: a skip, never a pass.

The stack is the real one: its [autograd] patch is its C++ patch. The tests compared are the ones
the stack adds to or changes in upstream's test files, as verify-cpp finds them (own_tests);
$NDV_VERIFY_CPP_TESTS (space-separated pytest ids or files) restricts them."""

import io
import os
import re
import shutil
from pathlib import Path

import pytest

from fake_stack import WRAP_OUTPUTS_ARRAYREF, WRAP_OUTPUTS_VECTOR, quiet
from ndvstack import cpp_text, own_tests, shims, verify_cpp
from ndvstack.errors import WorkFailed
from ndvstack.layers import DEFAULT_OVERLAY_SRC
from ndvstack.stack import DEFAULT_PATCHES, Stack

ROOT = Path(__file__).resolve().parents[1]
CPP_SOURCE = Path(os.environ.get("NDV_CPP_SOURCE") or ROOT.parent / "shared" / "upstream-2.15")
SHARED_CPP = Path(os.environ.get("NDV_SHARED_CPP") or ROOT.parent / "shared" / "cpp")
CUSTOM_FUNCTION = "torch/csrc/autograd/custom_function.cpp"
V2_15 = CPP_SOURCE / CUSTOM_FUNCTION
V2_13 = SHARED_CPP / "custom_function.v2.13-reconstruction.cpp"


def needs(text: Path):
    reason = f"not run: {text} is not there (an upstream text of {CUSTOM_FUNCTION}; set NDV_CPP_SOURCE/NDV_SHARED_CPP)"
    return pytest.mark.skipif(not text.is_file(), reason=reason)


@pytest.fixture(scope="module")
def stack():
    """(stack, overlay source, its C++ patch): the real stack and its first C++ patch."""
    real = Stack(DEFAULT_PATCHES)
    [first, *_] = cpp_text.cpp_patches(real.patches(), shims.load_shims(DEFAULT_OVERLAY_SRC))
    return real, DEFAULT_OVERLAY_SRC, first.patch


@needs(V2_15)
def test_the_autograd_patchs_text_on_2_15_defines_both_overloads_and_gives_the_shims_outcome(stack, tmp_path):
    stack, src, patch = stack
    tests = os.environ.get("NDV_VERIFY_CPP_TESTS", "").split() or None
    own = own_tests.apply_test_hunks(stack.patches(), CPP_SOURCE, tmp_path / "own")
    assert own.per_patch[patch.name], f"{patch.name} adds no tests to compare on"
    out = io.StringIO()
    result = verify_cpp.main(stack, CPP_SOURCE, out, overlay_src=src, tests=tests, progress=quiet)
    print(out.getvalue())  # the report, for pytest -s and for a failure's captured output
    [text] = result.texts
    assert text.unit == CUSTOM_FUNCTION and text.patches == [patch.name]
    assert text.symbols[patch.name] == [WRAP_OUTPUTS_ARRAYREF, WRAP_OUTPUTS_VECTOR]  # both interposed
    assert text.initialisers and not text.new
    shim, compiled = result.outcomes["shim"], result.outcomes["text"]
    assert shim == compiled and set(shim.values()) == {"passed"}
    assert len(shim) == len(tests or own.kind)  # by default, every test the stack adds or changes


@needs(V2_13)
@needs(V2_15)
def test_the_v2_13_text_is_refused_naming_the_patch_never_fuzzed(stack, tmp_path):
    stack, src, patch = stack
    source = tmp_path / "source"
    (source / CUSTOM_FUNCTION).parent.mkdir(parents=True)
    shutil.copy(V2_13, source / CUSTOM_FUNCTION)
    shutil.copytree(CPP_SOURCE / "test", source / "test")  # the tests: only the C++ text is wrong
    with pytest.raises(WorkFailed, match=rf"^{re.escape(patch.name)} does not apply to the source without "
                                         rf"fuzz: {CUSTOM_FUNCTION} hunk #\d+ \(@@ [^\n]*\)$"):
        verify_cpp.main(stack, source, io.StringIO(), overlay_src=src, cache=tmp_path / "cache", progress=quiet)
    assert not (tmp_path / "cache" / "texts").exists()  # refused before compiling anything
    assert (source / CUSTOM_FUNCTION).read_bytes() == V2_13.read_bytes()
