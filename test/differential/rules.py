"""Intended changes: for each patch, the differences from stock its message promises.

Each rule belongs to one patch and is the machine form of a sentence of that patch's message (its
BC-breaking note, or docs/known-differences.md): a difference that no rule covers, and that is
not a compiled program now agreeing with eager (compare.py), is a regression. A rule takes the
program (programs.Program), the observable's path, its stock and stack values, and both sides'
records of the program and of its eager run; it returns whether it covers the difference.

RULES lists (patch, name, rule); only the rules of the patches in the stack under test count
(differential.py --prefix).
"""

from __future__ import annotations

import re

RULES: list = []


def rule(patch: str, name: str):
    def deco(fn):
        RULES.append((patch, name, fn))
        return fn
    return deco


ACTIVE: set | None = None  # the patches under test (file names); None: all


def covering(program, path, stock_value, stack_value, stock, stack, eager_stock, eager_stack):
    """The name of the first active rule that covers this difference, or None."""
    for patch, name, fn in RULES:
        if ACTIVE is not None and patch not in ACTIVE:
            continue
        if fn(program, path, stock_value, stack_value, stock, stack, eager_stock, eager_stack):
            return "%s: %s" % (patch[:4], name)
    return None


# ---------------------------------------------------------------------------------------------
# Paths
# ---------------------------------------------------------------------------------------------

_OUT = re.compile(r"^out\[(\d+)\]\.(\w+)$")
_GRAD_OF = re.compile(r"^grad\(out\[(\d+)\]\)$")
_INPLACE = re.compile(r"^(inplace|inplace_no_grad)\[(\d+)\](?:\.grad\(out\[(\d+)\]\))?$")


def parse(path: str):
    """(what, output index, attribute or other output index): `out[1].is_view` -> ("out", 1,
    "is_view"); `grad(out[1])` -> ("grad", 1, None); `inplace[1].grad(out[0])` -> ("inplace",
    1, 0); anything else -> (path, None, None)."""
    m = _OUT.match(path)
    if m:
        return "out", int(m.group(1)), m.group(2)
    m = _GRAD_OF.match(path)
    if m:
        return "grad", int(m.group(1)), None
    m = _INPLACE.match(path)
    if m:
        return m.group(1), int(m.group(2)), None if m.group(3) is None else int(m.group(3))
    return path, None, None


def raised(value) -> bool:
    return isinstance(value, str) and value.startswith("raise ")


# ---------------------------------------------------------------------------------------------
# [autograd] Detach marked non-differentiable views that require grad
# ---------------------------------------------------------------------------------------------

AUTOGRAD = "0001-autograd-Detach-marked-non-differentiable-views-that-require-grad.patch"


def detached_marked_view(program, i, stock, stack) -> bool:
    """Output I is one the Function marked non-differentiable, was a view requiring grad on
    stock, and is a detached alias with the stack: not a view, no grad_fn, no grad."""
    from programs import marked_positions

    # A __torch_function__ subclass's __torch_function__ returns the alias re-wrapped by
    # as_subclass(): a view of the alias, whose base the program cannot see.
    alias = (stack.get("out[%d].is_view" % i) is False and stack.get("out[%d].base" % i) is None
             or program.inputs.startswith("tf_subclass") and stack.get("out[%d].base" % i) == "other")
    return (i in marked_positions(program.body)
            and stock.get("out[%d].is_view" % i) is True and stock.get("out[%d].requires_grad" % i) is True
            and stack.get("out[%d].requires_grad" % i) is False and stack.get("out[%d].grad_fn" % i) is None
            and alias)


# What the alias is, observable by observable ("A view output ... that ctx.mark_non_differentiable()
# was passed and that requires grad is now returned as a detached alias of the view: it does not
# require grad, out._is_view() is False and out._base is None").
_ALIAS = {"requires_grad": False, "is_view": False, "base": None, "grad_fn": None, "is_leaf": True}


def _detached_outputs(program, stock, stack):
    from programs import marked_positions

    return [i for i in sorted(marked_positions(program.body)) if detached_marked_view(program, i, stock, stack)]


@rule(AUTOGRAD, "a marked view that requires grad is returned as a detached alias")
def marked_view_detached(program, path, a, b, stock, stack, eager_stock, eager_stack):
    """Eager only: under torch.compile such a view is returned as traced, as on stock (with
    backend="eager" too: autograd_function_apply returns it as Dynamo traced it)."""
    if program.body.kind != "function" or program.runner != "eager":
        return False
    detached = _detached_outputs(program, stock, stack)
    if not detached:
        return False
    what, i, attr = parse(path)
    if what == "out" and i in detached:
        if attr in _ALIAS:
            return b == _ALIAS[attr]
        # "For a Tensor subclass that only overrides __torch_function__, the alias is a plain
        # torch.Tensor"
        return attr == "type" and b == "Tensor" and program.inputs.startswith("tf_subclass")
    if what == "grad" and i in detached:
        # "Calling backward through such an output alone now raises": it is not differentiable
        return b == "n/a"
    if what in ("inplace", "inplace_no_grad"):
        if attr is None:
            # "In-place operations on it are allowed (before, they raised, as on any view of a
            # leaf that requires grad or a view returned by a custom Function)"
            return i in detached and raised(a) and b == "ok"
        if attr in detached:  # backward through the alias: there is none
            return b == "n/a"
        # After an in-place on it, which now succeeds, backward through the other outputs is
        # what eager makes of a modified base ("they still bump the version counter of its
        # base, so saved-tensor checks still fire").
        return i in detached and raised(stock.get("%s[%d]" % (what, i))) and a == "n/a"
    return False


def _newly_not_requiring_grad(program, stock, stack):
    """The marked outputs that required grad on stock and do not with the stack."""
    from programs import marked_positions

    return [i for i in sorted(marked_positions(program.body))
            if stock.get("out[%d].requires_grad" % i) is True and stack.get("out[%d].requires_grad" % i) is False]


@rule(AUTOGRAD, "a module's full backward hooks no longer see the detached alias")
def module_hook_without_alias(program, path, a, b, stock, stack, eager_stock, eager_stack):
    """BackwardHookFunction wraps a module's outputs (as views of what the module computed) only
    when one of them requires grad, and gives the hook a gradient only for those that do: the
    hook gets none for the alias, what the module returns for the alias does not require grad,
    and when no output requires grad any more, none is wrapped (not a view, no base). The
    other outputs are no longer views of a multi-output BackwardHookFunction: an in-place on
    one still raises, naming the custom Function."""
    if program.wrapper != "module_hook" or program.body.kind != "function" or program.runner != "eager":
        return False
    detached = _newly_not_requiring_grad(program, stock, stack)
    if not detached:
        return False
    what, i, attr = parse(path)
    if what == "hooks":
        return True
    if what == "out" and i in detached and attr in ("requires_grad", "grad_fn", "is_leaf"):
        return b == _ALIAS[attr]
    if what == "out" and attr in ("is_view", "base"):  # the hook's wrapping, not the program's view
        return b in (False, None, "other")
    if what == "grad" and i in detached:
        return b == "n/a"
    if what in ("inplace", "inplace_no_grad"):
        if attr is None and i in detached:
            return raised(a) and b == "ok"
        if attr is None:
            return raised(a) and raised(b) and "returns multiple views" in a and "created inside a custom Function" in b
        if attr in detached:
            return b == "n/a"
        return raised(a) and raised(b) and "returns multiple views" in a and "created inside a custom Function" in b
    return False


@rule(AUTOGRAD, "code that hooks only outputs requiring grad skips the alias")
def hook_branch_skips_alias(program, path, a, b, stock, stack, eager_stock, eager_stack):
    """"register_hook() and retain_grad() on it now raise, as on any tensor that does not require
    grad": code that registers a hook only on the outputs that require grad (the
    requires_grad_hook caller) skips the alias. On stock it hooked the view and met the view's own
    check, as on any access of its grad_fn: a view made in forward (no_grad mode, in a custom
    Function) whose base was modified in place after it (an input marked dirty) raises there."""
    from programs import marked_positions

    if program.runner != "eager" or program.wrapper != "requires_grad_hook" or program.body.kind != "function":
        return False
    if path != "run" or not raised(a) or b != "ok" or "created inside a custom Function" not in a:
        return False
    return any(stack.get("out[%d].requires_grad" % i) is False and stack.get("out[%d].is_view" % i) is False
               for i in marked_positions(program.body))


@rule(AUTOGRAD, "a Function returning an inner Function's marked view returns a non-view")
def outer_function_returns_alias(program, path, a, b, stock, stack, eager_stock, eager_stack):
    """"A Function that returns, unmarked, the marked view of an inner Function now returns a
    non-view there: in-place on it no longer raises the error for views returned by a custom
    Function." The reentrant checkpoint is such a Function (CheckpointFunction): it returns the
    alias as an output of its own, not a view, which can be modified in place. And "the
    reentrant torch.utils.checkpoint fails with 'element 1 of tensors does not require grad
    and does not have a grad_fn'" no longer: backward through the checkpoint works, and
    through the alias alone raises (another message: the checkpoint's own)."""
    from programs import marked_positions

    if program.runner != "eager" or program.wrapper != "checkpoint_reentrant" or program.body.kind != "function":
        return False
    marked = marked_positions(program.body)
    if not any(kind in ("xv", "xs", "yv", "ys") for slot, (kind, _) in enumerate(program.body.outs)
               if slot in program.body.nondiff):
        return False  # the Function marks no view
    returned = [i for i in sorted(marked)
                if stock.get("out[%d].is_view" % i) is True and stack.get("out[%d].is_view" % i) is False
                and stack.get("out[%d].base" % i) is None]
    what, i, attr = parse(path)
    if what == "out" and i in marked and attr == "type":  # a __torch_function__ subclass's alias
        return b == "Tensor" and program.inputs.startswith("tf_subclass")
    if what == "out" and i in returned:
        return attr in ("is_view", "base")
    if what in ("inplace", "inplace_no_grad") and attr is None:
        return i in returned and raised(a) and b == "ok"
    if what in ("grad", "grad2", "inplace", "inplace_no_grad"):
        if raised(a) and "does not require grad and does not have a grad_fn" in a:
            return True  # the checkpoint's failure, gone
        target = i if what == "grad" else attr
        return target in marked and raised(a) and raised(b)
    return False


# ---------------------------------------------------------------------------------------------
# [dynamo] Detach marked differentiable views when inlining a Function's forward
# ---------------------------------------------------------------------------------------------

INLINED = "0003-dynamo-Detach-marked-differentiable-views-when-inlining-a-Function-s-forward.patch"


@rule(INLINED, "the inlined forward's graph gains the detach of a marked view")
def inlined_detach_makes_a_graph(program, path, a, b, stock, stack, eager_stock, eager_stack):
    """"After inlining forward, return each such output as output.detach()": a frame whose graph
    had no op (forward returned views of its inputs) now has one."""
    if program.runner == "eager" or program.body.kind != "function" or not program.body.nondiff:
        return False
    if program.grad not in ("no_grad", "no_grad_inner"):
        return False
    return path == "dynamo.unique_graphs" and a == 0 and b == 1


# ---------------------------------------------------------------------------------------------
# [dynamo] Check saved tensors' versions in autograd_function_apply
# ---------------------------------------------------------------------------------------------

SAVED = "0005-dynamo-Check-saved-tensors-versions-in-autograd_function_apply.patch"


def _backward_after_inplace(path) -> bool:
    """`inplace[i].grad(out[j])`: a backward after an in-place change of an output."""
    what, i, j = parse(path)
    return what in ("inplace", "inplace_no_grad") and j is not None


@rule(SAVED, "backend=eager checks a saved tensor's version in backward")
def saved_tensor_version_checked(program, path, a, b, stock, stack, eager_stock, eager_stack):
    """"An autograd.Function that saves a tensor with ctx.save_for_backward and sees it modified
    in place before backward makes eager raise ... Compiled with backend="eager", backward
    silently runs on the modified values": now it raises, also for an output through which
    eager computes no gradient at all (a marked input returned as-is still requires grad under
    Dynamo)."""
    if not program.runner.startswith("compile_eager") or program.body.kind != "function":
        return False
    if program.body.save == "none":
        return False
    return (_backward_after_inplace(path) and not raised(a) and raised(b)
            and "modified by an inplace operation" in b)


@rule(SAVED, "a module's full backward hooks do not fire for the backwards now refused")
def hooks_of_refused_backwards(program, path, a, b, stock, stack, eager_stock, eager_stack):
    """A backward that the saved-tensor check now refuses (as eager refuses it) runs no module
    backward hook: the hook log is stock's without one firing per such backward, in order."""
    if path != "hooks" or program.wrapper != "module_hook" or not program.runner.startswith("compile_eager"):
        return False
    if not isinstance(a, list) or not isinstance(b, list) or eager_stack is None:
        return False
    refused = [k for k, v in stack.items()
               if _backward_after_inplace(k) and raised(v) and isinstance(stock.get(k), list)
               and raised(eager_stack.get(k))]
    if not refused or len(a) - len(b) != len(refused):
        return False
    rest = iter(a)
    return all(any(x == y for y in rest) for x in b)  # b is a with those firings left out


# ---------------------------------------------------------------------------------------------
# [aotautograd] Regenerate multi-output views of an input as eager returns them
# ---------------------------------------------------------------------------------------------

MULTI_OUTPUT = "0007-aotautograd-Regenerate-multi-output-views-of-an-input-as-eager-returns-them.patch"


@rule(MULTI_OUTPUT, "a multi-output view of an input has the op's own backward node")
def multi_output_view_node(program, path, a, b, stock, stack, eager_stock, eager_stack):
    """"[The results are] views of the input that share one node (UnbindBackward0,
    SplitBackward0, ...) ... their gradient reaches the input through the op's own backward
    instead of the compiled one": where eager's node is another one (a reentrant checkpoint's
    Function around the compiled code), the compiled output's node is the op's, not
    CompiledFunctionBackward."""
    from programs import input_multi_output_positions

    if program.runner == "eager" or program.body.kind != "plain":
        return False
    what, i, attr = parse(path)
    return (what == "out" and attr == "grad_fn" and i in input_multi_output_positions(program.body)
            and a == "CompiledFunctionBackward" and b in ("UnbindBackward0", "SplitBackward0"))
