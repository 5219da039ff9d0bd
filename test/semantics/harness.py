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
and compiled, each time on fresh inputs, and the two observations are diffed.
"""

import contextlib
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


def _err(e):
    return "raise " + type(e).__name__


def _grad_ctx(grad_mode):
    if grad_mode is None:
        return contextlib.nullcontext()
    if grad_mode == "no_grad":
        return torch.no_grad()
    if grad_mode == "inference_mode":
        return torch.inference_mode()
    raise ValueError(grad_mode)


def _call(fn, case):
    """Fresh inputs, one call. Returns (inputs, inputs needing grad, outputs).

    The inputs needing grad are taken before the call (a mark_dirty Function
    can make an input require grad)."""
    inputs = case.make_inputs()
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
    """Per-output checks, each on a fresh call: grads, in-place, version counter."""
    n = len(recs)
    for i in range(n):
        r = recs[i]
        # Gradients through out[i] alone.
        _, rg_inputs, outs = _call(fn, case)
        r["grads"] = _grad(outs[i], rg_inputs) if _differentiable(outs[i]) and rg_inputs else "n/a"
        # In-place on out[i].
        _, _, outs = _call(fn, case)
        r["inplace"] = _inplace(outs[i])
        # Version-counter check: in-place on out[i], then backward through
        # each other differentiable out[j].
        r["grad_after_inplace"] = {}
        if r["inplace"] != "ok" or not rg_inputs:
            continue
        for j in range(n):
            if j == i:
                continue
            _, rg_inputs, outs = _call(fn, case)
            if not _differentiable(outs[j]):
                continue
            outs[i].add_(1)
            g = _grad(outs[j], rg_inputs)
            r["grad_after_inplace"][j] = g if isinstance(g, str) else "ok"


def observe(fn, case):
    """Observe everything we compare. Returns a dict."""
    rec = {"run": "ok", "error": None, "outs": []}
    try:
        inputs, _, outs = _call(fn, case)
    except Exception as e:  # noqa: BLE001
        rec["run"] = _err(e)
        msg = str(e).strip()
        rec["error"] = msg.splitlines()[0][:200] if msg else ""
        return rec
    in_ptrs = [_ptr(t) for t in inputs]
    out_ptrs = [_ptr(o) for o in outs]
    for i, o in enumerate(outs):
        rec["outs"].append(
            {
                "shape": tuple(o.shape),
                "dtype": o.dtype,
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
        rec["error"] = str(e).strip()[:200]
    return rec


def _fmt_grads(g):
    if isinstance(g, str):
        return g
    return "(" + ", ".join("None" if t is None else "tensor" for t in g) + ")"


def diff_records(e, c):
    """List of human-readable differences, eager record e vs compiled c."""
    d = []
    if (e["run"] == "ok") != (c["run"] == "ok"):
        return ["run: eager=%s compiled=%s (%s)" % (e["run"], c["run"], c["error"] or e["error"])]
    if e["run"] != "ok":
        return []  # both raised: agreement (classes differ by wrapping)
    if len(e["outs"]) != len(c["outs"]):
        return ["num_outputs: eager=%d compiled=%d" % (len(e["outs"]), len(c["outs"]))]
    for i, (a, b) in enumerate(zip(e["outs"], c["outs"])):
        p = "out[%d]." % i
        if a["shape"] != b["shape"] or a["dtype"] != b["dtype"]:
            d.append(p + "meta: eager=%s%s compiled=%s%s" % (a["dtype"], a["shape"], b["dtype"], b["shape"]))
        elif not torch.allclose(a["value"], b["value"], equal_nan=True):
            d.append(p + "value: mismatch")
        # View-ness counts only where it is observable: the output shares
        # storage with an input or another output (then it decides version
        # counter sharing and view+inplace errors). A view of a dead
        # intermediate may legitimately come back as a plain tensor.
        shares = a["aliases_inputs"] or a["aliases_outputs"] or b["aliases_inputs"] or b["aliases_outputs"]
        if shares and a["is_view"] != b["is_view"]:
            d.append(p + "is_view: eager=%s compiled=%s" % (a["is_view"], b["is_view"]))
        for k in (
            "requires_grad",
            "grad_fn_is_none",
            "is_leaf",
            "aliases_inputs",
            "aliases_outputs",
            "inplace",
        ):
            if a[k] != b[k]:
                d.append(p + "%s: eager=%s compiled=%s" % (k, a[k], b[k]))
        ga, gb = a["grads"], b["grads"]
        if _fmt_grads(ga) != _fmt_grads(gb):
            d.append(p + "grads: eager=%s compiled=%s" % (_fmt_grads(ga), _fmt_grads(gb)))
        elif not isinstance(ga, str):
            for j, (x, y) in enumerate(zip(ga, gb)):
                if x is not None and not torch.allclose(x, y, equal_nan=True):
                    d.append(p + "grads[%d]: value mismatch" % j)
        # Only where both in-places succeeded and both out[j] need grad,
        # otherwise the difference is already reported above.
        ea, ca = a["grad_after_inplace"], b["grad_after_inplace"]
        for j in sorted(set(ea) & set(ca)):
            x, y = ea[j], ca[j]
            if x != y:
                d.append(
                    "out[%d].add_(1) then grad(out[%d]): eager=%s compiled=%s"
                    % (i, j, x, y)
                )
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


def run_case(case, mode):
    """Differences for one (case, mode); [] means eager and compiled agree."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if mode == "eager_abs":
            return eager_abs_check(case)
        if mode == "dynamo_graph":
            torch._dynamo.reset()
            try:
                return graph_check(case)
            finally:
                torch._dynamo.reset()
        torch._dynamo.reset()
        try:
            eager = observe(case.fn, case)
            compiled = observe(compile_for(case.fn, mode), case)
        finally:
            torch._dynamo.reset()
        d = diff_records(eager, compiled)
        if case.check is not None and mode in case.check_modes:
            d += _run_check(case, mode)
        return d


def _run_check(case, mode):
    """A case's own extra assertion (cases.Case.check); only the cases that set one.

    Each returned string is prefixed "check: "; an exception is a difference too."""
    try:
        found = case.check(case, mode)
    except Exception as e:  # noqa: BLE001
        msg = str(e).strip()
        found = ["%s (%s)" % (_err(e), msg.splitlines()[0][:160] if msg else "")]
    finally:
        torch._dynamo.reset()
    return ["check: " + s for s in found]
