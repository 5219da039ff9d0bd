"""The harness's own rules, on the installed torch: which check an error message names, and
which observations diff_records compares (no compile, except one dynamo-wrapped error)."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from harness import ERROR_CLASSES, diff_records, error_class, observe  # noqa: E402
from cases import Case, ViewOfInputFn  # noqa: E402


def _x():
    return torch.randn(2, 3, requires_grad=True)


def _no_grad_view(x):
    y = x * 2
    with torch.no_grad():
        return y, y.view(-1)


def _inference_view(x):
    y = x * 2
    with torch.inference_mode():
        return y, y.view(-1)


def _base_modified(make):
    """make() -> (base, view); modify the base in place, then read the view's grad_fn."""
    base, view = make()
    base.add_(1)
    return view.grad_fn


def _saved_modified():
    y = _x().exp()
    z = y.exp()
    y.add_(1)
    z.sum().backward()


def _inference_tensor():
    with torch.inference_mode():
        t = torch.ones(3)
    t.add_(1)


# One eager program per class of ERROR_CLASSES: the check torch 2.13 runs, and its class.
PROVOKE = {
    "view-of-leaf-inplace": lambda: _x().view(-1).add_(1),
    "leaf-inplace": lambda: _x().add_(1),
    "multi-output-view-inplace": lambda: (_x() * 2).unbind(0)[0].add_(1),
    "multi-output-view-base-modified": lambda: _base_modified(lambda: (lambda y: (y, y.unbind(0)[0]))(_x() * 2)),
    "custom-function-view-inplace": lambda: ViewOfInputFn.apply(_x() * 1).add_(1),
    "custom-function-view-base-modified": lambda: _base_modified(lambda: (lambda y: (y, ViewOfInputFn.apply(y)))(
        _x() * 1)),
    "no_grad-view-inplace": lambda: _no_grad_view(_x())[1].add_(1),
    "no_grad-view-base-modified": lambda: _base_modified(lambda: _no_grad_view(_x())),
    "inference_mode-view-inplace": lambda: _inference_view(_x())[1].add_(1),
    "inference_mode-view-base-modified": lambda: _base_modified(lambda: _inference_view(_x())),
    "version-counter": _saved_modified,
    "inference-tensor-inplace": _inference_tensor,
    "no-grad-fn": lambda: torch.autograd.grad(torch.ones(2).sum(), [_x()]),
}


def test_every_error_class_is_provoked_here():
    assert sorted(PROVOKE) == sorted(name for _, name in ERROR_CLASSES)


@pytest.mark.parametrize("expected", sorted(PROVOKE))
def test_the_class_of_the_message_torch_raises(expected):
    with pytest.raises(Exception) as raised:
        PROVOKE[expected]()
    assert error_class(raised.value) == expected


def test_a_message_dynamo_wraps_keeps_its_class(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))

    def f(x):
        x.add_(1)
        return x * 2

    torch._dynamo.reset()
    try:
        with pytest.raises(Exception) as raised:
            torch.compile(f, backend="eager")(_x())
    finally:
        torch._dynamo.reset()
    assert type(raised.value).__name__ == "TorchRuntimeError"
    assert error_class(raised.value) == "leaf-inplace"


def test_an_unknown_message_is_its_own_class():
    e = ValueError("cannot do it at 0x7f00aa | twice; #3\nsecond line")
    assert error_class(e) == "ValueError(cannot do it at 0x? twice 3)"
    assert error_class(TypeError("cannot do it")) != error_class(ValueError("cannot do it"))


def _case(fn, inputs=(((2, 3), True),)):
    return Case(fn.__name__, fn, list(inputs))


def _leaf_inplace(x):
    x.add_(1)
    return (x,)


def _value_error(x):
    raise ValueError("no")


def test_both_sides_raising_agree_only_on_the_same_class():
    leaf = observe(_leaf_inplace, _case(_leaf_inplace))
    assert diff_records(leaf, leaf) == []
    assert diff_records(leaf, observe(_value_error, _case(_value_error))) == [
        "run: eager=raise leaf-inplace compiled=raise ValueError(no)"]


class _DirtyNoGradInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        y.add_(1)
        ctx.mark_dirty(y)
        return x * 2, y

    @staticmethod
    def backward(ctx, gx, gy):
        return gx * 2, gy


def _dirty(x, y):
    return _DirtyNoGradInput.apply(x, y)


def _not_dirty(x, y):
    y.data.add_(1)  # the same value, without autograd seeing the mutation
    return x * 2, y


def test_inputs_are_compared_after_the_call():
    inputs = (((2, 3), True), ((2, 3), False))
    dirty = observe(_dirty, _case(_dirty, inputs))
    assert dirty["ins"][1]["requires_grad"] and not dirty["ins"][1]["is_leaf"]
    d = diff_records(dirty, observe(_not_dirty, _case(_not_dirty, inputs)))
    assert "in[1].requires_grad: eager=True compiled=False" in d
    assert "in[1].is_leaf: eager=False compiled=True" in d
    assert not [x for x in d if x.startswith("in[1].value")]


def _then_view(x):
    y = x * 2
    return y, y.view(-1)


def test_gradients_after_an_in_place_are_compared_by_value():
    case = _case(_then_view)
    eager = observe(_then_view, case)
    # in-place on out[0], then grad through out[1]: out[1] sees the rebased history
    assert isinstance(eager["outs"][0]["grad_after_inplace"][1], tuple)
    compiled = observe(_then_view, case)
    compiled["outs"][0]["grad_after_inplace"][1] = tuple(
        g * 2 for g in compiled["outs"][0]["grad_after_inplace"][1])
    assert diff_records(eager, compiled) == ["out[0].add_(1) then grad(out[1])[0]: value mismatch"]
