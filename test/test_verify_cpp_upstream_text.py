"""verify-cpp on the real stack against upstream texts of the C++ files it patches, read
from $NDV_SHARED_CPP (default: ../shared/cpp beside the checkout; test data, not part of
the project). Without them these tests do not run, and say so: a skip, never a pass."""

import io
import os
from pathlib import Path

import pytest

from fake_stack import quiet
from ndvstack import cpp_text, shims, verify_cpp
from ndvstack.errors import WorkFailed
from ndvstack.layers import DEFAULT_OVERLAY_SRC
from ndvstack.stack import DEFAULT_PATCHES, Stack

ROOT = Path(__file__).resolve().parents[1]
SHARED_CPP = Path(os.environ.get("NDV_SHARED_CPP") or ROOT.parent / "shared" / "cpp")
CUSTOM_FUNCTION = "torch/csrc/autograd/custom_function.cpp"
V2_13 = SHARED_CPP / "custom_function.v2.13-reconstruction.cpp"
NEWER = SHARED_CPP / "custom_function.newer.cpp"
STACK = Stack(DEFAULT_PATCHES)
# All the stack's test files unless restricted (space-separated paths, e.g. for a tighter CI budget).
TESTS = os.environ.get("NDV_VERIFY_CPP_TESTS", "").split() or None


def needs(text: Path):
    reason = f"not run: {text} is not there (an upstream text of {CUSTOM_FUNCTION}; set NDV_SHARED_CPP)"
    return pytest.mark.skipif(not text.is_file(), reason=reason)


def source_with(folder: Path, text: Path) -> Path:
    (folder / CUSTOM_FUNCTION).parent.mkdir(parents=True)
    (folder / CUSTOM_FUNCTION).write_bytes(text.read_bytes())
    return folder


def patches_touching(path: str) -> list[str]:
    cpp = cpp_text.cpp_patches(STACK.patches(), shims.load_shims(DEFAULT_OVERLAY_SRC))
    return [item.patch.name for item in cpp if path in item.units]


@needs(V2_13)
def test_the_stacks_cpp_text_on_v2_13_gives_the_shims_outcome_on_every_stack_test(tmp_path):
    out = io.StringIO()
    result = verify_cpp.main(STACK, source_with(tmp_path / "source", V2_13), out, tests=TESTS, progress=quiet)
    print(out.getvalue())  # the report, for pytest -s and for a failure's captured output
    [text] = result.texts
    assert text.unit == CUSTOM_FUNCTION and text.patches == patches_touching(CUSTOM_FUNCTION)
    assert text.initialisers and not text.new
    shim, compiled = result.outcomes["shim"], result.outcomes["text"]
    assert shim == compiled and set(shim.values()) == {"passed"}
    assert len(shim) > (10 if TESTS else 200)  # every test of the files that ran, not a handful


@needs(NEWER)
def test_newer_upstream_text_is_refused_naming_the_patch_never_fuzzed(tmp_path):
    source = source_with(tmp_path / "source", NEWER)
    first = patches_touching(CUSTOM_FUNCTION)[0]
    with pytest.raises(WorkFailed, match=rf"^{first} does not apply to the source without fuzz: "
                                         rf"{CUSTOM_FUNCTION} hunk #\d+ \(@@ "):
        verify_cpp.main(STACK, source, io.StringIO(), cache=tmp_path / "cache", progress=quiet)
    assert not (tmp_path / "cache" / "texts").exists()  # refused before compiling anything
    assert (source / CUSTOM_FUNCTION).read_bytes() == NEWER.read_bytes()
