"""The [autograd] patch's native shim (overlay/native/mark_non_differentiable_views.cpp) on
the installed torch 2.15.0: compiled against the wheel, loaded before torch, and compared
with stock torch in the same script (A/B). Python Functions reach the shim through the
ArrayRef overload of _wrap_outputs (libtorch_python's GOT), a C++ torch::autograd::Function
(an extension, torch.utils.cpp_extension.load_inline) through the vector overload (the
global symbol lookup at the extension's load)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fake_stack import WRAP_OUTPUTS_ARRAYREF, WRAP_OUTPUTS_VECTOR, quiet
from ndvstack import shims
from ndvstack.layers import DEFAULT_OVERLAY_SRC

SHIM = shims.Shim("the [autograd] patch", "mark_non_differentiable_views",
                  DEFAULT_OVERLAY_SRC / "native" / "mark_non_differentiable_views.cpp",
                  (WRAP_OUTPUTS_ARRAYREF, WRAP_OUTPUTS_VECTOR), (("libtorch_python",), ("libtorch_cpu", "global")))

# A C++ Function that marks its view output, as upstream's test of the patch has it.
CPP_FUNCTION = """
struct ViewOfInput : public torch::autograd::Function<ViewOfInput> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    auto out = x.view(-1);
    ctx->mark_non_differentiable({out});
    return out;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_output) {
    return {torch::Tensor()};
  }
};

torch::Tensor view_of_input(torch::Tensor x) {
  return ViewOfInput::apply(x);
}
"""

# argv: the shim's library, when to load it (before torch, after torch, after libtorch_cpu.so
# but before torch, never), the C++
# extension's build folder. Prints one JSON object: what each case returned, and the shim's
# counters and bindings.
SCRIPT = r"""
import ctypes, json, os, sys
library, when, build = sys.argv[1:4]

def load():
    return ctypes.CDLL(library, mode=os.RTLD_NOW | os.RTLD_GLOBAL)

if when == "libtorch_first":  # libtorch_cpu.so in the global scope ahead of the shim
    ctypes.CDLL(os.path.join(os.path.dirname(library), "..", "lib", "libtorch_cpu.so"),
                mode=os.RTLD_NOW | os.RTLD_GLOBAL)
shim = load() if when in ("before", "libtorch_first") else None
import torch
from torch.utils.cpp_extension import load_inline
shim = load() if when == "after" else shim
ext = load_inline(name="ndv_shim_cpp_function", cpp_sources=[CPP], functions=["view_of_input"],
                  build_directory=build)

def counters():
    if shim is None:
        return None
    names = ("ndv_shim_calls", "ndv_shim_calls_arrayref", "ndv_shim_calls_vector")
    for name in names:
        getattr(shim, name).restype = ctypes.c_long
    return [getattr(shim, name)() for name in names]

class ViewOfInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = x.view(-1)
        ctx.mark_non_differentiable(out)
        return out

    @staticmethod
    def backward(ctx, grad):
        return None

    @staticmethod
    def jvp(ctx, x_t):
        return None

def forward_ad():
    # A dual input that does not require grad: the output is differentiable by its forward grad only.
    import torch.autograd.forward_ad as fwAD
    with fwAD.dual_level():
        x = fwAD.make_dual(torch.randn(2, 3), torch.randn(2, 3))
        before = counters()
        out = ViewOfInput.apply(x)
        after = counters()
        return {"tangent": fwAD.unpack_dual(out).tangent is not None, "is_view": out._is_view(),
                "alias": torch._C._is_alias_of(out, x),
                "calls": None if before is None else [a - b for a, b in zip(after, before)]}

def observe(apply, requires_grad):
    x = torch.randn(2, 3, requires_grad=requires_grad)
    before = counters()
    out = apply(x)
    after = counters()
    seen = {"requires_grad": out.requires_grad, "grad_fn": out.grad_fn is not None,
            "is_view": out._is_view(), "base_is_input": out._base is x,
            "same_storage": out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()}
    version = x._version
    try:  # a view made in a custom Function refuses in-place (stock's); an alias bumps the shared counter
        with torch.no_grad():
            out.add_(1)
        seen["version_shared"] = x._version == version + 1 == out._version
    except RuntimeError:
        seen["version_shared"] = "in-place refused"
    return {**seen,
            "calls": None if before is None else [a - b for a, b in zip(after, before)]}

result = {"python_requires_grad": observe(ViewOfInput.apply, True),
          "python_no_grad": observe(ViewOfInput.apply, False),
          "cpp_requires_grad": observe(ext.view_of_input, True),
          "python_forward_ad": forward_ad(),
          "counters": counters()}
if shim is not None:
    shim.ndv_bound_in.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    result["bound"] = [shim.ndv_bound_in(place.encode(), symbol.encode()) for place, symbol in PLACES]
print(json.dumps(result))
"""


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    """The compiled shim, where the overlay puts it: in a folder beside torch's lib/ (its rpath
    is $ORIGIN/../lib)."""
    toolchain = shims.Toolchain.detect()
    built = shims.build(SHIM, toolchain, tmp_path_factory.mktemp("cache"), quiet)
    package = tmp_path_factory.mktemp("package")
    (package / "lib").symlink_to(toolchain.torch_lib)
    (package / "_ndv_overlay").mkdir()
    return Path(shutil.copy(built, package / "_ndv_overlay"))


@pytest.fixture(scope="module")
def run(library, tmp_path_factory):
    """WHEN (see SCRIPT) -> the script's result; the extension is built once."""
    build = tmp_path_factory.mktemp("extension")
    places = [(place, symbol) for symbol, where in zip(SHIM.symbols, SHIM.bound_in) for place in where]
    script = f"CPP = {CPP_FUNCTION!r}\nPLACES = {places!r}\n{SCRIPT}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "NDV_", "LD_"))}
    results = {}

    def run_script(when):
        if when not in results:
            done = subprocess.run([sys.executable, "-c", script, str(library), when, str(build)],
                                  capture_output=True, text=True, env=env, cwd=build)
            assert done.returncode == 0, done.stderr[-3000:]
            results[when] = json.loads(done.stdout.splitlines()[-1])
        return results[when]
    return run_script


DETACHED = {"requires_grad": False, "grad_fn": False, "is_view": False, "base_is_input": False,
            "same_storage": True, "version_shared": True}


def without_calls(observed: dict) -> dict:
    return {k: v for k, v in observed.items() if k != "calls"}


def test_a_python_function_marking_a_view_that_requires_grad_gets_a_detached_alias(run):
    shimmed, stock = run("before")["python_requires_grad"], run("never")["python_requires_grad"]
    assert without_calls(shimmed) == DETACHED
    assert shimmed["calls"] == [1, 1, 0]  # through the ArrayRef overload
    assert stock["requires_grad"] and stock["is_view"] and stock["base_is_input"]  # A/B: stock's bug


def test_b_a_marked_view_that_does_not_require_grad_is_returned_as_stock_returns_it(run):
    shimmed, stock = run("before")["python_no_grad"], run("never")["python_no_grad"]
    assert without_calls(shimmed) == without_calls(stock) == {
        "requires_grad": False, "grad_fn": False, "is_view": True, "base_is_input": True,
        "same_storage": True, "version_shared": True}
    assert shimmed["calls"] == [1, 1, 0]  # the shim saw it and left it alone; stock has no shim
    assert stock["calls"] is None


def test_c_a_cpp_function_goes_through_the_vector_overload_with_the_same_result(run):
    shimmed, stock = run("before")["cpp_requires_grad"], run("never")["cpp_requires_grad"]
    assert without_calls(shimmed) == DETACHED
    assert shimmed["calls"] == [1, 0, 1]  # through the vector overload
    assert stock["requires_grad"] and stock["is_view"]  # A/B: stock's bug


def test_a_marked_view_with_a_forward_grad_only_is_detached_too(run):
    shimmed, stock = run("before")["python_forward_ad"], run("never")["python_forward_ad"]
    assert shimmed == {"tangent": False, "is_view": False, "alias": True, "calls": [1, 1, 0]}
    assert stock["tangent"] and stock["is_view"]  # A/B: stock's bug, in forward AD


def test_d_the_counters_count_both_paths(run):
    assert run("before")["counters"] == [4, 3, 1]  # three Python Functions, one C++ Function
    assert run("never")["counters"] is None


def test_each_binding_the_loader_checks_says_which_path_the_shim_is_on(run):
    """The loader's checks (shims.toml's bound_in): libtorch_python's GOT for the ArrayRef
    overload (Python Functions), libtorch_cpu's GOT and the global lookup for the vector one
    (C++ Functions inside libtorch, and in extensions loaded later). 1: the shim."""
    first = run("before")
    assert first["bound"] == [1, 1, 1]
    # Loaded after torch: libtorch_python's and libtorch_cpu's slots hold libtorch_cpu's own
    # definitions (0), so the loader would fail the import; only the global lookup finds the
    # shim (torch's libraries are not in the global scope), and indeed only the extension
    # loaded afterwards goes through it.
    late = run("after")
    assert late["bound"] == [0, 0, 1]
    assert late["python_requires_grad"]["requires_grad"] and late["python_requires_grad"]["calls"] == [0, 0, 0]
    assert without_calls(late["cpp_requires_grad"]) == DETACHED and late["cpp_requires_grad"]["calls"] == [1, 0, 1]
    # libtorch_cpu.so in the global scope before the shim: every check says another definition,
    # and neither path goes through the shim.
    shadowed = run("libtorch_first")
    assert shadowed["bound"] == [0, 0, 0]
    assert shadowed["python_requires_grad"]["requires_grad"] and shadowed["cpp_requires_grad"]["requires_grad"]
    assert shadowed["counters"] == [0, 0, 0]


def test_the_shim_says_it_targets_2_15_0():
    assert "native shim for torch 2.15.0" in SHIM.source.read_text().splitlines()[0]
