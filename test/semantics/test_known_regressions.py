"""Programs that work on stock torch and behave differently with the stack, found after a patch
landed, and not fixed yet: each runs on both sides (A/B in one run) and is a strict xfail, so
that this file fails the day the stack fixes one (then it moves to the scoreboard or a
patch's tests). docs/known-differences.md ("Known regressions") says why each is open.
"""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from scoreboard import side_command  # noqa: E402

# Patch 1 returns a marked view that requires grad as a detached alias, also inside
# autograd_function_apply when backend="eager" runs Dynamo's graph with real tensors; Dynamo's
# example values keep it requiring grad (as on stock, so that the code after the Function
# compiles as on stock). Compiled code that branches on its requires_grad takes stock's branch,
# and here registers a hook on a tensor that no longer requires grad: RuntimeError, where stock
# (and eager, which skips the branch) run.
HOOK_IF_REQUIRES_GRAD = f"""
import sys
import torch
sys.path.insert(0, {HERE!r})
from cases import NondiffViewOfOut  # y = x * 2; v = y.view(-1), marked; return y, v

def fn(x):
    y, v = NondiffViewOfOut.apply(x)
    if v.requires_grad:
        v.register_hook(lambda grad: grad * 10)
    return y * 3

x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
try:
    torch.compile(fn, backend="eager")(x).sum().backward()
    print("grad", x.grad.tolist())
except RuntimeError as e:
    print("RuntimeError", str(e).splitlines()[0])
"""


def run(side, program):
    result = subprocess.run(side_command(side, "python", "-c", program), capture_output=True, text=True)
    assert result.returncode == 0, f"{side} failed ({result.returncode}):\n{result.stderr[-3000:]}"
    return result.stdout


@pytest.mark.xfail(strict=True, reason="open regression of patch 1 (docs/known-differences.md)")
def test_hook_registered_if_a_marked_view_requires_grad_backend_eager():
    stock = run("stock", HOOK_IF_REQUIRES_GRAD)
    assert stock == "grad [6.0, 6.0, 6.0]\n"
    assert run("stack", HOOK_IF_REQUIRES_GRAD) == stock
