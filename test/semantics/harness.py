"""Compare autograd metadata of outputs between eager and compiled runs.

run_case(case, mode) -> list[str] of differences ("" list means agreement).

Modes:
  eager_abs           eager only: outputs a custom Function marked
                      non-differentiable must have requires_grad=False and
                      grad_fn=None (only meaningful for cases with `marked`).
  aot_function[_dyn]  functorch.compile.aot_function(f, nop[, dynamic=True])
  compile_eager[_dyn] torch.compile(f, backend="eager", dynamic=False|True)
  aot_eager[_dyn]     torch.compile(f, backend="aot_eager", ...)
  inductor[_dyn]      torch.compile(f, backend="inductor", ...)
  dynamo_graph        dynamo only: the graph that torch.compile(f, fullgraph=True)
                      captures must call autograd_function_apply as the case's
                      `graph` says (only meaningful for cases with `graph`).

For every mode other than eager_abs and dynamo_graph the case is observed eagerly
and compiled, each time on fresh inputs, and the two observations are diffed
(diff_records): the inputs after the call (value, requires_grad, grad_fn, is_leaf);
per output its value, requires_grad, grad_fn, is_leaf, storage aliasing and view-ness,
the gradients through it, an in-place on it, and the gradients through every output
after that in-place. An error counts by the check that raised it (ERROR_CLASSES), so
two sides raising agree only when the same check raised.
"""

import contextlib
import re
import warnings

import torch

COMPILED_MODES = [
    "aot_function",
    "aot_function_dyn",
    "compile_eager",
    "compile_eager_dyn",
    "aot_eager",
    "aot_eager_dyn",
    "inductor",
    "inductor_dyn",
]
# fullgraph=True, for the cases of custom Functions under dynamo (issue 7's, which must
# compile without a graph break): torch.compile(..., fullgraph=True), static shapes.
FULLGRAPH_MODES = ["compile_eager_fullgraph", "aot_eager_fullgraph", "inductor_fullgraph"]
MODES = ["eager_abs"] + COMPILED_MODES + FULLGRAPH_MODES + ["dynamo_graph"]


def modes_for(case):
    """Modes that make sense for a case (eager_abs needs marked outputs,
    dynamo_graph an expected graph)."""
    return [
        m
        for m in MODES
        if (m != "eager_abs" or case.marked)
        and (m != "dynamo_graph" or case.graph is not None)
        and (m not in FULLGRAPH_MODES or case.owner == "issue-7")
        and m not in case.skip_modes
    ]


# Which check raised, from the message torch 2.13 raises; dynamo and the backends wrap it
# and keep its text (TorchRuntimeError from a fake-tensor call, BackendCompilerFailed), so
# the class, not the exception type, is compared: both sides raising agree only on the same
# class. A class is the first entry whose needles all occur in the message. An unlisted
# message is its own class: its type and first line, normalised (_unknown_error).
_DIRECT, _INDIRECT = "is being modified inplace", "its base has been modified inplace"
ERROR_CLASSES = (
    # VariableTypeUtils.h check_inplace: in-place on a view of a leaf, on a leaf
    (("a view of a leaf Variable that requires grad is being used in an in-place",), "view-of-leaf-inplace"),
    (("a leaf Variable that requires grad is being used in an in-place",), "leaf-inplace"),
    # variable.cpp handle_view_on_rebase: in-place on the view itself (_DIRECT), or a grad_fn
    # access after its base or another view of it was modified in-place (_INDIRECT); its
    # last sentence names the view's CreationMeta. (The message's start says only whether
    # the view has a grad_fn: "A view was created in no_grad mode" for any CreationMeta
    # without one, which grad_fn_is_none already compares.)
    ((_DIRECT, "returns multiple views"), "multi-output-view-inplace"),
    ((_INDIRECT, "returns multiple views"), "multi-output-view-base-modified"),
    ((_DIRECT, "created inside a custom Function"), "custom-function-view-inplace"),
    ((_INDIRECT, "created inside a custom Function"), "custom-function-view-base-modified"),
    ((_DIRECT, "inside the no_grad block"), "no_grad-view-inplace"),
    ((_INDIRECT, "inside the no_grad block"), "no_grad-view-base-modified"),
    ((_DIRECT, "inside the inference_mode block"), "inference_mode-view-inplace"),
    ((_INDIRECT, "inside the inference_mode block"), "inference_mode-view-base-modified"),
    # SavedVariable::unpack: a saved tensor's version counter moved
    (("needed for gradient computation has been modified by an inplace operation",), "version-counter"),
    (("Inplace update to inference tensor outside InferenceMode",), "inference-tensor-inplace"),
    # autograd.grad on an output that does not require grad
    (("does not require grad and does not have a grad_fn",), "no-grad-fn"),
)


def _unknown_error(e):
    """An unlisted message as its own class: type and first line, without addresses and
    the separators the known-failure files use."""
    line = (str(e).strip().splitlines() or [""])[0]
    line = re.sub(r"0x[0-9a-fA-F]+", "0x?", line)
    line = re.sub(r"[|;#]", " ", line)
    line = " ".join(line.split())[:120]
    return "%s(%s)" % (type(e).__name__, line)


def error_class(e):
    # One line, and one wording for "its base or another view of its base" (_INDIRECT).
    msg = " ".join(str(e).split())
    msg = msg.replace("its base or another view of its base has been", "its base has been")
    for needles, name in ERROR_CLASSES:
        if all(n in msg for n in needles):
            return name
    return _unknown_error(e)


def _err(e):
    return "raise " + error_class(e)


def _grad_ctx(grad_mode):
    if grad_mode is None:
        return contextlib.nullcontext()
    if grad_mode == "no_grad":
        return torch.no_grad()
    if grad_mode == "inference_mode":
        return torch.inference_mode()
    raise ValueError(grad_mode)


def _call(fn, case, inputs=None):
    """One call, on fresh inputs unless given. Returns (inputs, inputs needing grad, outputs).

    The inputs needing grad are taken before the call (a mark_dirty Function
    can make an input require grad)."""
    inputs = case.make_inputs() if inputs is None else inputs
    rg_inputs = [t for t in inputs if t.requires_grad]
    with _grad_ctx(case.grad_mode):
        outs = fn(*inputs)
    if isinstance(outs, torch.Tensor):
        outs = (outs,)
    return inputs, rg_inputs, tuple(outs)


def _safe(get):
    """Value of get(), or "raise Cls" (eager grad_fn access can raise)."""
    try:
        return get()
    except Exception as e:  # noqa: BLE001
        return _err(e)


def _ptr(t):
    return t.untyped_storage().data_ptr()


def _differentiable(o):
    return o.requires_grad and o.dtype.is_floating_point


def _grad(out, rg_inputs):
    """grad(out.sum(), rg_inputs): tuple of None/tensor, or "raise Cls".

    Every backward runs on its own fresh call, without retain_graph
    (compiled backwards with donated buffers refuse retain_graph=True)."""
    try:
        gs = torch.autograd.grad(out.sum(), rg_inputs, allow_unused=True)
    except Exception as e:  # noqa: BLE001
        return _err(e)
    return tuple(None if g is None else g.detach().clone() for g in gs)


def _inplace(o):
    try:
        o.add_(1)
        return "ok"
    except Exception as e:  # noqa: BLE001
        return _err(e)


def _observe_fresh_runs(fn, case, recs):
    """Per-output checks, each on a fresh call: grads, in-place, then the grads through
    every output (version counter, views rebased by the in-place)."""
    n = len(recs)
    for i in range(n):
        r = recs[i]
        # Gradients through out[i] alone.
        _, rg_inputs, outs = _call(fn, case)
        r["grads"] = _grad(outs[i], rg_inputs) if _differentiable(outs[i]) and rg_inputs else "n/a"
        # In-place on out[i].
        _, _, outs = _call(fn, case)
        r["inplace"] = _inplace(outs[i])
        # In-place on out[i], then the gradients through each differentiable out[j]
        # (out[i] itself too): the version-counter check, or the gradients of the history
        # the in-place rebased.
        r["grad_after_inplace"] = {}
        if r["inplace"] != "ok" or not rg_inputs:
            continue
        for j in range(n):
            _, rg_inputs, outs = _call(fn, case)
            if not _differentiable(outs[j]):
                continue
            outs[i].add_(1)
            r["grad_after_inplace"][j] = _grad(outs[j], rg_inputs)


def _input_state(t):
    """An input after the call: a Function's mark_dirty or a mutation can change all of it."""
    return {
        "value": t.detach().clone(),
        "requires_grad": t.requires_grad,
        "grad_fn_is_none": _safe(lambda: t.grad_fn is None),
        "is_leaf": _safe(lambda: t.is_leaf),
    }


def observe(fn, case):
    """Observe everything we compare. Returns a dict."""
    rec = {"run": "ok", "ins": [], "outs": []}
    inputs = case.make_inputs()
    try:
        _, _, outs = _call(fn, case, inputs)
    except Exception as e:  # noqa: BLE001
        rec["run"] = _err(e)
        rec["ins"] = [_input_state(t) for t in inputs]
        return rec
    rec["ins"] = [_input_state(t) for t in inputs]
    in_ptrs = [_ptr(t) for t in inputs]
    out_ptrs = [_ptr(o) for o in outs]
    for i, o in enumerate(outs):
        rec["outs"].append(
            {
                "value": o.detach().clone(),
                "requires_grad": o.requires_grad,
                "grad_fn_is_none": _safe(lambda: o.grad_fn is None),
                "is_leaf": _safe(lambda: o.is_leaf),
                "is_view": o._is_view(),
                "aliases_inputs": tuple(
                    j for j, p in enumerate(in_ptrs) if p == out_ptrs[i]
                ),
                "aliases_outputs": tuple(
                    j for j, p in enumerate(out_ptrs) if j != i and p == out_ptrs[i]
                ),
            }
        )
    del inputs, outs
    try:
        _observe_fresh_runs(fn, case, rec["outs"])
    except Exception as e:  # noqa: BLE001  (first call passed, a repeat failed)
        rec["run"] = _err(e) + " on a repeat call"
    return rec


def _fmt_grads(g):
    if isinstance(g, str):
        return g
    return "(" + ", ".join("None" if t is None else "tensor" for t in g) + ")"


def _diff_grads(key, ga, gb):
    """Gradients (tuples of None/tensor, or "raise <class>", or "n/a") compared: which are None
    or what raised, then the values."""
    if _fmt_grads(ga) != _fmt_grads(gb):
        return ["%s: eager=%s compiled=%s" % (key, _fmt_grads(ga), _fmt_grads(gb))]
    if isinstance(ga, str):
        return []
    return ["%s[%d]: value mismatch" % (key, j) for j, (x, y) in enumerate(zip(ga, gb))
            if x is not None and not torch.allclose(x, y, equal_nan=True)]


# Observations compared by equality, printed as `<prefix><key>: eager=<a> compiled=<b>`.
INPUT_KEYS = ("requires_grad", "grad_fn_is_none", "is_leaf")
OUTPUT_KEYS = ("requires_grad", "grad_fn_is_none", "is_leaf", "aliases_inputs", "aliases_outputs", "inplace")


def _diff_keys(prefix, keys, a, b):
    return ["%s%s: eager=%s compiled=%s" % (prefix, k, a[k], b[k]) for k in keys if a[k] != b[k]]


def _diff_value(prefix, a, b):
    x, y = a["value"], b["value"]
    if x.shape != y.shape or x.dtype != y.dtype:
        return ["%smeta: eager=%s%s compiled=%s%s" % (prefix, x.dtype, tuple(x.shape), y.dtype, tuple(y.shape))]
    if not torch.allclose(x, y, equal_nan=True):
        return [prefix + "value: mismatch"]
    return []


def diff_records(e, c):
    """Differences, eager record e vs compiled c: one string per differing observation,
    `<observation>: <how>`, such as `out[1].is_leaf: eager=True compiled=False`."""
    if e["run"] != c["run"]:
        return ["run: eager=%s compiled=%s" % (e["run"], c["run"])]
    # The inputs after the call (also when both raised the same error).
    d = []
    for k, (a, b) in enumerate(zip(e["ins"], c["ins"])):
        d += _diff_value("in[%d]." % k, a, b) + _diff_keys("in[%d]." % k, INPUT_KEYS, a, b)
    if e["run"] != "ok":
        return d
    if len(e["outs"]) != len(c["outs"]):
        return d + ["num_outputs: eager=%d compiled=%d" % (len(e["outs"]), len(c["outs"]))]
    for i, (a, b) in enumerate(zip(e["outs"], c["outs"])):
        p = "out[%d]." % i
        d += _diff_value(p, a, b)
        # View-ness counts only where it is observable: the output shares
        # storage with an input or another output (then it decides version
        # counter sharing and view+inplace errors). A view of a dead
        # intermediate may legitimately come back as a plain tensor.
        shares = a["aliases_inputs"] or a["aliases_outputs"] or b["aliases_inputs"] or b["aliases_outputs"]
        if shares and a["is_view"] != b["is_view"]:
            d.append(p + "is_view: eager=%s compiled=%s" % (a["is_view"], b["is_view"]))
        d += _diff_keys(p, OUTPUT_KEYS, a, b)
        d += _diff_grads(p + "grads", a["grads"], b["grads"])
        # Only where both in-places succeeded and both out[j] need grad,
        # otherwise the difference is already reported above.
        ea, ca = a["grad_after_inplace"], b["grad_after_inplace"]
        for j in sorted(set(ea) & set(ca)):
            d += _diff_grads("out[%d].add_(1) then grad(out[%d])" % (i, j), ea[j], ca[j])
    return d


def eager_abs_check(case):
    """Outputs marked non-differentiable must not require grad (eager)."""
    try:
        _, _, outs = _call(case.fn, case)
    except Exception as e:  # noqa: BLE001
        return ["eager run: " + _err(e)]
    d = []
    for i in case.marked:
        o = outs[i]
        if o.requires_grad:
            d.append("out[%d] marked non-differentiable but requires_grad=True" % i)
        gf = _safe(lambda: o.grad_fn)
        if gf is not None:
            name = gf if isinstance(gf, str) else type(gf).__name__
            d.append("out[%d] marked non-differentiable but grad_fn: %s" % (i, name))
    return d


def _hop_calls(gm):
    """[(kwargs, fwd body's call targets)] of each autograd_function_apply in gm."""
    from torch._functorch.autograd_function import autograd_function_apply

    calls = []
    for node in gm.graph.find_nodes(op="call_function", target=autograd_function_apply):
        fwd = getattr(gm, node.args[0].target)
        targets = {
            n.target if isinstance(n.target, str) else getattr(n.target, "__name__", str(n.target))
            for n in fwd.graph.nodes
            if n.op in ("call_function", "call_method")
        }
        calls.append((dict(node.kwargs), targets))
    return calls


def graph_check(case):
    """The autograd_function_apply calls that dynamo captures for case.fn.

    case.graph is a list with one dict per call, in graph order: each key other
    than "fwd_ops" is a kwarg of the call that must have that value (such as
    non_differentiable_idx, the outputs that forward marked), "fwd_ops" names
    calls that the traced forward body must make (such as view_as)."""
    graphs = []

    def record(gm, example_inputs):
        graphs.append(gm)
        return gm.forward  # what backend="eager" does

    try:
        _call(torch.compile(case.fn, backend=record, fullgraph=True), case)
    except Exception as e:  # noqa: BLE001
        return ["compile: " + _err(e)]
    calls = [c for gm in graphs for c in _hop_calls(gm)]
    if len(calls) != len(case.graph):
        return ["graph: %d autograd_function_apply calls, expected %d" % (len(calls), len(case.graph))]
    d = []
    for i, ((kwargs, targets), want) in enumerate(zip(calls, case.graph)):
        for k, v in want.items():
            if k == "fwd_ops":
                missing = sorted(set(v) - targets)
                if missing:
                    d.append("graph[%d]: fwd body lacks %s" % (i, ", ".join(missing)))
            elif kwargs.get(k) != v:
                d.append("graph[%d].%s: expected %s got %s" % (i, k, v, kwargs.get(k)))
    return d


def compile_for(f, mode):
    fullgraph = mode.endswith("_fullgraph")
    mode = mode.removesuffix("_fullgraph")
    dyn = mode.endswith("_dyn")
    base = mode[:-4] if dyn else mode
    if base == "aot_function":
        from functorch.compile import aot_function, nop

        return aot_function(f, nop, dynamic=dyn)
    backend = {"compile_eager": "eager", "aot_eager": "aot_eager", "inductor": "inductor"}[base]
    return torch.compile(f, backend=backend, dynamic=dyn, fullgraph=fullgraph)


@contextlib.contextmanager
def _fresh_dynamo():
    """Dynamo's caches reset before and after: no compiled code is shared between runs."""
    torch._dynamo.reset()
    try:
        yield
    finally:
        torch._dynamo.reset()


def compiled_record(case, mode):
    """The compiled side's record of one (case, mode), as run_case observes it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with _fresh_dynamo():
            return observe(compile_for(case.fn, mode), case)


def run_case(case, mode):
    """Differences for one (case, mode); [] means eager and compiled agree."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "eager_abs":
            return eager_abs_check(case)
        if mode == "dynamo_graph":
            with _fresh_dynamo():
                return graph_check(case)
        with _fresh_dynamo():
            eager = observe(case.fn, case)
        d = diff_records(eager, compiled_record(case, mode))
        if case.check is not None and mode in case.check_modes:
            d += _run_check(case, mode)
        return d


def _run_check(case, mode):
    """A case's own extra assertion (cases.Case.check); only the cases that set one.

    Each returned string is prefixed "check: "; an exception is a difference too."""
    try:
        found = case.check(case, mode)
    except Exception as e:  # noqa: BLE001
        found = [_err(e)]
    finally:
        torch._dynamo.reset()
    return ["check: " + s for s in found]
