"""Run corpus programs on the torch this interpreter imports, and record every observable.

  python test/differential/observe.py --set full --shard 0/4 --out records.jsonl
  python test/differential/observe.py --id b0042.no_grad.param_slice.none.aot_eager_fg

One JSON line per program: {"id": ..., "obs": {observable: value}}. An observable is a flat
path such as `out[1].requires_grad` or `after_inplace[0].grad(out[1])`; a value is JSON (a
tensor's values rounded, an error as `raise <Type>: <first line>`). Each program gets fresh,
seeded inputs on every call, Dynamo reset and its counters cleared before it, and is observed
by several fresh calls: the call itself (outputs, inputs after it, side effects, Dynamo's
frame, graph-break and graph counts), what an identical second call recompiles, the gradients
of all its differentiable outputs (first and second order) and of each alone, an in-place
change of each output (with grad mode on and under no_grad) followed by the gradients through
every output.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import re
import signal
import sys
import tempfile
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import programs as P  # noqa: E402

MAX_OUTPUTS = 5  # in-place observations for the first outputs only
TIMEOUT_S = 180  # one program; a hang is recorded as such and the run goes on


# ---------------------------------------------------------------------------------------------
# Values
# ---------------------------------------------------------------------------------------------

_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
_PATH = re.compile(r"(/[^\s:'\"]+/)([^/\s:'\"]+\.py)")
_LINE = re.compile(r"\bline \d+|\.py:\d+")


def error(e: BaseException) -> str:
    """An error as its type and first line, without what differs between two installs: addresses,
    paths (the stack's overlay is another folder) and line numbers (patched files)."""
    line = (str(e).strip().splitlines() or [""])[0]
    line = _LINE.sub("line ?", _PATH.sub(r"\2", _ADDRESS.sub("0x?", line)))
    return "raise %s: %s" % (type(e).__name__, " ".join(line.split())[:400])


def _safe(get):
    try:
        return get()
    except Exception as e:  # noqa: BLE001
        return error(e)


def values(t: torch.Tensor):
    t = t.detach()
    if type(t) is not torch.Tensor:  # a subclass: its plain data, where it has one
        t = getattr(t, "a", None) if hasattr(t, "a") else t.as_subclass(torch.Tensor)
        if t is None:
            return "?"
    if t.is_complex():
        t = torch.view_as_real(t)
    if t.is_floating_point():
        return [round(v, 4) for v in t.double().flatten().tolist()]
    return t.flatten().tolist()


def _grad_fn(t):
    fn = t.grad_fn
    return None if fn is None else type(fn).__name__


def tensor_obs(prefix: str, t: torch.Tensor, named: dict) -> dict:
    """Everything about one tensor: values, type, autograd metadata, view-ness and what its base
    and storage are among the program's tensors (NAMED: {id(tensor): name})."""
    base = _safe(lambda: t._base)
    if isinstance(base, torch.Tensor):
        base = named.get(id(base), "other")
    return {
        prefix + "type": type(t).__name__,
        prefix + "dtype": str(t.dtype).replace("torch.", ""),
        prefix + "shape": list(t.shape),
        prefix + "values": _safe(lambda: values(t)),
        prefix + "requires_grad": t.requires_grad,
        prefix + "grad_fn": _safe(lambda: _grad_fn(t)),
        prefix + "is_leaf": _safe(lambda: t.is_leaf),
        prefix + "is_view": t._is_view(),
        prefix + "base": base,
        prefix + "version": _safe(lambda: t._version),
        prefix + "is_inference": t.is_inference(),
    }


def _storage(t):
    try:
        return t.untyped_storage().data_ptr()
    except Exception:  # noqa: BLE001  (a wrapper subclass has no storage of its own)
        return None


def flatten(out) -> list:
    """A call's result as a flat list of leaves (tensors and others), pytree order."""
    leaves, _ = torch.utils._pytree.tree_flatten(out)
    return leaves


# ---------------------------------------------------------------------------------------------
# Programs: inputs, the caller, the runner
# ---------------------------------------------------------------------------------------------


class TFSubclass(torch.Tensor):
    """A __torch_function__ subclass that adds nothing (the default __torch_function__)."""


def load_body(body: P.Body, folder: str):
    """The body's module, imported from a file of its own (Dynamo and tracebacks read source)."""
    name = "ndv_corpus_%s" % body.name
    if name in sys.modules:
        return sys.modules[name]
    path = os.path.join(folder, name + ".py")
    with open(path, "w") as f:
        f.write(body.source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


class Inputs:
    """One call's fresh inputs: ARGS, what the runner's function gets; LEAVES, the tensors
    gradients are taken with respect to; NAMED, every input tensor by name."""

    def __init__(self, program: P.Program):
        torch.manual_seed(0)
        base = torch.randn(2, 3)
        kind = program.inputs
        self.leaves = []
        if kind == "leaf":
            x = base.clone().requires_grad_()
            self.leaves.append(x)
        elif kind == "leaf_norg":
            x = base.clone()
        elif kind == "nonleaf":
            x0 = base.clone().requires_grad_()
            self.leaves.append(x0)
            x = x0 * 1
        elif kind == "param":
            x = torch.nn.Parameter(base.clone())
            self.leaves.append(x)
        elif kind == "param_slice":
            x = torch.nn.Parameter(torch.randn(4, 3))  # the body gets x[1:3]
            self.leaves.append(x)
        elif kind == "tf_subclass":
            x = base.clone().as_subclass(TFSubclass).requires_grad_()
            self.leaves.append(x)
        elif kind == "tf_subclass_alias":
            leaf = base.clone().requires_grad_()
            self.leaves.append(leaf)
            x = leaf.as_subclass(TFSubclass)
        elif kind == "twotensor":
            from torch.testing._internal.two_tensor import TwoTensor

            x = TwoTensor(base.clone(), base.clone() * 2).requires_grad_()
            self.leaves.append(x)
        else:
            raise ValueError(kind)
        self.args = [x]
        if program.body.sig == "x_w":
            w = torch.randn(2, 3).requires_grad_()
            self.leaves.append(w)
            self.args.append(w)
        if program.wrapper == "func_vmap":
            self.args = [a.detach().unsqueeze(0).expand(3, 2, 3).clone().requires_grad_(a.requires_grad)
                         for a in self.args]
        if program.body.sig == "x_closure":  # the global W the body's forward reads
            self.leaves.append(sys.modules["ndv_corpus_%s" % program.body.name].W)
        self.named = {id(t): "in[%d]" % i for i, t in enumerate(self.args)}
        for i, t in enumerate(self.leaves):
            self.named.setdefault(id(t), "leaf[%d]" % i)


class Hooks:
    """What a module's full backward hook saw."""

    def __init__(self):
        self.calls = []

    def __call__(self, module, grad_input, grad_output):
        self.calls.append([None if g is None else list(g.shape) for g in (*grad_input, *grad_output)])


def _identity(grad):
    return grad


def user_function(program: P.Program, body, hooks: Hooks):
    """The function the runner compiles: the body as the caller calls it."""
    inner = body.body
    if program.inputs == "param_slice":
        sliced = inner

        def inner(p, *rest):
            return sliced(p[1:3], *rest)

    if program.grad == "no_grad_inner":
        ungraded = inner

        def inner(*args):
            with torch.no_grad():
                return ungraded(*args)

    wrapper = program.wrapper
    if wrapper == "graph_break":
        unbroken = inner

        def inner(*args):
            torch._dynamo.graph_break()
            return unbroken(*args)

    elif wrapper in ("checkpoint", "checkpoint_reentrant"):
        checkpointed = inner

        def inner(*args):
            return torch.utils.checkpoint.checkpoint(checkpointed, *args,
                                                     use_reentrant=wrapper == "checkpoint_reentrant")

    elif wrapper == "requires_grad_hook":
        unhooked = inner

        def inner(*args):
            out = unhooked(*args)
            for o in out if isinstance(out, tuple) else (out,):
                if isinstance(o, torch.Tensor) and o.requires_grad:
                    o.register_hook(_identity)
            return out

    elif wrapper == "module_hook":
        class Module(torch.nn.Module):
            def forward(self, *args):
                return hooked(*args)

        hooked = inner
        module = Module()
        module.register_full_backward_hook(hooks)
        return module
    return inner


def run_with(program: P.Program, fn, inputs: Inputs):
    """FN as the runner runs it (compiled, traced, exported), for inputs like INPUTS; and the ops
    of the graph an export made (None otherwise)."""
    runner = program.runner
    if runner == "eager":
        return fn, None
    if runner.startswith(("compile_eager", "aot_eager", "inductor")):
        name = runner.removesuffix("_fg").removesuffix("_dyn")
        backend = {"compile_eager": "eager", "aot_eager": "aot_eager", "inductor": "inductor"}[name]
        return torch.compile(fn, backend=backend, fullgraph=runner.endswith("_fg"),
                             dynamic=runner.endswith("_dyn")), None
    if runner == "aot_function":
        from functorch.compile import aot_function, nop

        return aot_function(fn, nop), None
    if runner in ("export", "export_strict"):
        module = fn if isinstance(fn, torch.nn.Module) else _Wrap(fn)
        ep = torch.export.export(module, tuple(inputs.args), strict=runner == "export_strict")
        return ep.module(), _ops(ep.graph_module)
    if runner == "aot_export_joint":
        from torch._functorch.aot_autograd import aot_export_joint_simple

        gm = aot_export_joint_simple(fn, list(inputs.args), trace_joint=True)
        return None, _ops(gm)
    raise ValueError(runner)


class _Wrap(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _ops(gm) -> list:
    counts = {}
    for node in gm.graph.nodes:
        if node.op == "call_function":
            counts[str(node.target)] = counts.get(str(node.target), 0) + 1
    return sorted("%s x%d" % kv for kv in counts.items())


def _grad_mode(program):
    if program.grad == "no_grad":
        return torch.no_grad()
    if program.grad == "inference_mode":
        return torch.inference_mode()
    return contextlib.nullcontext()


def _scalar(out):
    total = None
    for t in flatten(out):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            total = t.sum() if total is None else total + t.sum()
    return total


def _flat(out):
    return torch.cat([t.reshape(-1) for t in flatten(out) if isinstance(t, torch.Tensor) and t.is_floating_point()])


def transformed(program: P.Program, fn):
    """The call through a torch.func transform over FN, or FN itself."""
    wrapper = program.wrapper
    if wrapper == "func_grad":
        return lambda *args: torch.func.grad(lambda *a: _scalar(fn(*a)))(*args)
    if wrapper == "func_vjp":
        def vjp(*args):
            out, pullback = torch.func.vjp(fn, *args)
            return out, pullback(torch.utils._pytree.tree_map(
                lambda t: torch.ones_like(t) if isinstance(t, torch.Tensor) else t, out))
        return vjp
    if wrapper == "func_jacrev":
        return lambda *args: torch.func.jacrev(lambda *a: _flat(fn(*a)))(*args)
    if wrapper == "func_jvp":
        return lambda *args: torch.func.jvp(fn, tuple(args), tuple(torch.ones_like(a) for a in args))
    if wrapper == "func_vmap":
        return lambda *args: torch.func.vmap(fn)(*args)
    return fn


# ---------------------------------------------------------------------------------------------
# Observing one program
# ---------------------------------------------------------------------------------------------


class Program:
    """A corpus program made runnable: each call() is one fresh call."""

    def __init__(self, program: P.Program, folder: str):
        self.program = program
        self.module = load_body(program.body, folder)
        self.hooks = Hooks()
        self.fn = None
        self.ops = None

    def call(self):
        """(inputs, the call's result); raises what the call raises."""
        inputs = Inputs(self.program)
        if self.fn is None:
            self.fn, self.ops = run_with(self.program, user_function(self.program, self.module, self.hooks),
                                         inputs)
        if self.fn is None:  # aot_export_joint: the graph is all there is
            return inputs, None
        with _grad_mode(self.program):
            return inputs, transformed(self.program, self.fn)(*inputs.args)


def _differentiable(t):
    return isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()


def _grads(outputs, leaves, create_graph=False):
    """The gradients of the sum of OUTPUTS with respect to LEAVES, by .backward() (the reentrant
    checkpoint refuses autograd.grad): (their values or the error, the gradients)."""
    for leaf in leaves:
        leaf.grad = None
    try:
        sum(o.sum() for o in outputs).backward(create_graph=create_graph)
    except Exception as e:  # noqa: BLE001
        return error(e), None
    gs = [leaf.grad for leaf in leaves]
    for leaf in leaves:
        leaf.grad = None
    return [None if g is None else values(g) for g in gs], gs


def observe(program: P.Program, folder: str) -> dict:
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    runnable = Program(program, folder)
    obs = {}
    module = runnable.module
    module.LOG.clear()
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            inputs, out = runnable.call()
        obs["run"] = "ok"
    except Exception as e:  # noqa: BLE001
        obs["run"] = error(e)
        inputs, out = None, None
    obs["printed"] = printed.getvalue().count("\n")
    obs["log"] = list(module.LOG)
    if runnable.ops is not None:
        obs["graph.ops"] = runnable.ops
    _observe_dynamo(obs)
    if obs["run"] == "ok" and runnable.fn is not None:
        _observe_call(obs, inputs, out)
        try:  # what an identical second call compiles again
            frames = torch._dynamo.utils.counters["frames"]["total"]
            runnable.call()
            obs["dynamo.recompiles"] = torch._dynamo.utils.counters["frames"]["total"] - frames
        except Exception as e:  # noqa: BLE001
            obs["dynamo.recompiles"] = error(e)
        if not program.wrapper.startswith("func_"):
            try:
                _observe_fresh_calls(obs, runnable, P.marked_positions(program.body))
            except Exception as e:  # noqa: BLE001  (the first call passed, a repeat raised)
                obs["repeat"] = error(e)
    obs["hooks"] = runnable.hooks.calls
    torch._dynamo.reset()
    return obs


def _observe_dynamo(obs):
    """Dynamo's graph breaks and graphs for the first call (how many calls the observations make
    next depends on what they find). Not the frames it looked at: those include Python that
    runs lazily once per process (torchgen parsing a schema the first time an op meets a
    subclass), whichever program happens to be first."""
    counters = torch._dynamo.utils.counters
    obs["dynamo.graph_breaks"] = sum(counters["graph_break"].values())
    obs["dynamo.unique_graphs"] = counters["stats"]["unique_graphs"]


def _observe_call(obs, inputs, out):
    leaves = flatten(out)
    obs["outputs"] = len(leaves)
    named = dict(inputs.named)
    for i, t in enumerate(leaves):
        if isinstance(t, torch.Tensor):
            named.setdefault(id(t), "out[%d]" % i)
    input_storages = [(_storage(t), "in[%d]" % i) for i, t in enumerate(inputs.args)]
    for i, t in enumerate(leaves):
        p = "out[%d]." % i
        if not isinstance(t, torch.Tensor):
            obs[p + "value"] = repr(t)
            continue
        obs.update(tensor_obs(p, t, named))
        ptr = _storage(t)
        obs[p + "shares"] = sorted({n for s, n in input_storages if ptr is not None and s == ptr}
                                   | {"out[%d]" % j for j, u in enumerate(leaves)
                                      if j != i and isinstance(u, torch.Tensor) and ptr is not None
                                      and _storage(u) == ptr})
    for i, t in enumerate([*inputs.args, *inputs.leaves]):
        p = "in[%d]." % i if i < len(inputs.args) else "leaf[%d]." % (i - len(inputs.args))
        obs[p + "values"] = _safe(lambda: values(t))
        obs[p + "requires_grad"] = t.requires_grad
        obs[p + "grad_fn"] = _safe(lambda: _grad_fn(t))
        obs[p + "is_leaf"] = _safe(lambda: t.is_leaf)
        obs[p + "version"] = _safe(lambda: t._version)


def _observe_fresh_calls(obs, runnable, marked):
    """Gradients and in-place changes, each on a fresh call. Every key is recorded for every
    tensor output, as "n/a" where it does not apply, so that a change in one observable does not
    make others appear or vanish. The total gradient leaves out the outputs the body marks
    non-differentiable (MARKED positions): whether those count is observed output by output."""
    def fresh():
        inputs, out = runnable.call()
        return inputs, flatten(out)

    inputs, outs = fresh()
    tensors = [i for i, o in enumerate(outs) if isinstance(o, torch.Tensor)][:MAX_OUTPUTS]
    total = [o for i, o in enumerate(outs) if _differentiable(o) and i not in marked]
    obs["grad"], obs["grad2"] = "n/a", "n/a"
    if total and inputs.leaves:
        obs["grad"], gs = _grads(total, inputs.leaves, create_graph=True)
        second = [g for g in gs or () if g is not None and g.requires_grad]
        if second:
            obs["grad2"] = _grads(second, inputs.leaves)[0]
    for i in tensors:
        inputs, outs = fresh()
        obs["grad(out[%d])" % i] = (_grads([outs[i]], inputs.leaves)[0]
                                    if _differentiable(outs[i]) and inputs.leaves else "n/a")
    for mode in ("inplace", "inplace_no_grad"):
        for i in tensors:
            key = "%s[%d]" % (mode, i)
            inputs, outs = fresh()
            obs[key] = _inplace(outs[i], mode)
            for j in tensors:
                after = "%s.grad(out[%d])" % (key, j)
                obs[after] = "n/a"
                if obs[key] != "ok":
                    continue
                inputs, outs = fresh()  # each gradient after an in-place change on a call of its own
                _inplace(outs[i], mode)
                if _differentiable(outs[j]) and inputs.leaves:
                    obs[after] = _grads([outs[j]], inputs.leaves)[0]


def _inplace(t, mode):
    try:
        with torch.no_grad() if mode == "inplace_no_grad" else contextlib.nullcontext():
            t.add_(1)
        return "ok"
    except Exception as e:  # noqa: BLE001
        return error(e)


# ---------------------------------------------------------------------------------------------
# The worker
# ---------------------------------------------------------------------------------------------


class Timeout(Exception):
    pass


def _alarm(signum, frame):
    raise Timeout("program took over %d s" % TIMEOUT_S)


def select(name: str) -> list[P.Program]:
    programs = P.corpus()
    return P.quick(programs) if name == "quick" else programs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--set", choices=("quick", "full"), default="full", help="the programs (default: full)")
    p.add_argument("--shard", default="0/1", metavar="K/N", help="only the programs whose index is K modulo N")
    p.add_argument("--start", type=int, default=0, help="skip the shard's first START programs (a restart)")
    p.add_argument("--id", action="append", default=[], help="only this program (repeatable)")
    p.add_argument("--out", help="append one JSON line per program to OUT (default: print them)")
    a = p.parse_args(argv)
    warnings.simplefilter("ignore")
    torch._logging.set_logs(dynamo=50, aot=50, inductor=50)  # no graph-break warnings on stderr
    if a.id:
        by_id = {q.id: q for q in P.corpus()}
        missing = [i for i in a.id if i not in by_id]
        if missing:
            p.error("no program %s in the corpus" % missing[0])
        chosen = [by_id[i] for i in a.id]
    else:
        k, n = map(int, a.shard.split("/"))
        chosen = [q for i, q in enumerate(select(a.set)) if i % n == k][a.start:]
    signal.signal(signal.SIGALRM, _alarm)
    out = open(a.out, "a") if a.out else sys.stdout
    with tempfile.TemporaryDirectory(prefix="ndv-corpus-") as folder:
        sys.path.insert(0, folder)
        for program in chosen:
            start = time.monotonic()
            signal.alarm(TIMEOUT_S)
            try:
                obs = observe(program, folder)
            except Timeout as e:
                obs = {"run": error(e)}
            finally:
                signal.alarm(0)
            out.write(json.dumps({"id": program.id, "s": round(time.monotonic() - start, 2), "obs": obs}) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
