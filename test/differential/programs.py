"""The differential corpus's programs, generated from axes.

A program is a body (the code a user writes: a custom autograd.Function and the call of it, or
plain tensor code), a caller (the grad mode around it, the inputs it gets, what wraps it) and a
runner (eager, torch.compile, aot_function, export). The body is Python source of its own
(`Body.source`), so a program found to differ prints as a standalone script (`differential.sh
--show ID`); the caller and the runner are applied by observe.py.

Everything is derived from one seed: the same seed gives the same programs, in the same order,
with the same ids, on every machine. An id names the body's index, the caller and the runner:
`b0042.no_grad.param_slice.none.aot_eager_fg`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

SEED = 20261206

# ---------------------------------------------------------------------------------------------
# The body's axes
# ---------------------------------------------------------------------------------------------

# What a body returns, a kind per output slot (some kinds return two tensors). y is an
# intermediate that requires grad, made from x; z one unrelated to y.
OUT_KINDS = {
    "x": "the input as-is",
    "xv": "a view of the input",
    "xs": "multi-output views of the input (unbind/split/chunk)",
    "xm": "the input, modified in place (mark_dirty when marked)",
    "y": "an intermediate",
    "yv": "a view of an intermediate",
    "ys": "multi-output views of an intermediate",
    "yd": "a detached alias of an intermediate",
    "ydv": "a view of a detached intermediate, or a detached view",
    "ypd": "an intermediate or a view of it, and its detached alias (the same size, stride, offset)",
    "z": "an unrelated intermediate",
    "n": "a non-tensor (an int)",
}
X_VIEWS = ("x.view(-1)", "x[1:]", "x.t()", "x.view_as(x)", "x[1:].view(-1)")
Y_VIEWS = ("y.view(-1)", "y[1:]", "y.t()", "y[0]", "y.t()[1:]")
MULTI = ("unbind(0)", "split(1)", "chunk(2)")
DETACHED = ("y.detach()", "y.detach()[0]", "y.view(-1).detach()", "y.detach().view(-1)", "y.data",
            "y.data.view(-1)")

STYLES = ("ctx", "setup")  # forward(ctx, ...), or forward(...) + setup_context(ctx, inputs, output)
# forward's signature and how the body calls it: x; x and a default k, called with x alone, or
# with k by keyword; a second tensor w; an int n returned as an output too; x alone, forward
# reading a global tensor W that requires grad (a closed-over parameter).
SIGNATURES = ("x", "x_default", "x_keyword", "x_w", "x_n", "x_closure")
SAVES = ("none", "input", "output", "inter")  # what goes to ctx.save_for_backward
SIDE_EFFECTS = ("none", "print", "append", "disabled", "numpy")  # in setup_context (or forward)
# How forward computes its intermediate y: plainly; through an inner Function (one that returns
# a new tensor, one that modifies its input in place and marks it dirty, a setup_context-style one
# that appends to LOG); inside a torch.enable_grad() block; after a graph break.
INNER = ("none", "nested", "nested_dirty", "nested_setup", "enable_grad", "graph_break")
# What the Function reads of ctx's own bookkeeping, as eager's FunctionCtx keeps it: forward (or
# setup_context) reads ctx.non_differentiable after marking and backward uses what it read;
# backward reads ctx.non_differentiable (None there in eager); forward reads ctx.needs_input_grad.
# Drawn for the bodies after the first BODIES only, so the earlier bodies stay as they were.
CTX_READS = ("none", "marked_in_forward", "marked_in_backward", "needs_input_grad_in_forward")
BODIES = 600  # bodies drawn from the first axes
CTX_READ_BODIES = 80  # bodies drawn after them, each with a CTX_READS value
# Bodies drawn after those, each with one "ypd" slot: AOTAutograd regenerates the detached alias
# from the output whose metadata it has (the (out, out.detach()) case).
PAIR_BODIES = 40
# Bodies drawn after those, each a Function whose input is an intermediate of the compiled frame
# (`x = x0.exp()`, whose backward saves x) and whose caller returns that intermediate after the
# Function's outputs: an in-place change of an output that aliases x must fail backward through x
# as in eager (a review found a patch that lost it under inductor, and the corpus had no body that
# returns the frame's own intermediate). The Function is applied in the caller's grad mode, or
# under an inner torch.no_grad() (where Dynamo inlines forward), drawn from their own stream.
FRAME_CALLS = ("grad", "no_grad")
FRAME_BODIES = 40
# Where each family sits in the corpus's order (a frame body's index is FRAME_RANGE.start or more).
CTX_READ_RANGE = range(BODIES, BODIES + CTX_READ_BODIES)
PAIR_RANGE = range(CTX_READ_RANGE.stop, CTX_READ_RANGE.stop + PAIR_BODIES)
FRAME_RANGE = range(PAIR_RANGE.stop, PAIR_RANGE.stop + FRAME_BODIES)


@dataclass(frozen=True)
class Body:
    index: int
    kind: str  # "function": a custom autograd.Function; "plain": tensor code, no Function
    outs: tuple  # (kind, variant) per output slot
    style: str = "ctx"
    sig: str = "x"
    nondiff: tuple = ()  # output slots passed to ctx.mark_non_differentiable
    dirty: bool = False  # ctx.mark_dirty(x), for an "xm" slot
    save: str = "none"
    materialize: bool = True  # ctx.set_materialize_grads
    needs_input_grad: bool = False  # backward returns None where ctx.needs_input_grad is False
    side: str = "none"
    single: bool = False  # one tensor output, returned bare (not in a tuple)
    inner: str = "none"  # how forward computes y (INNER)
    nograd: tuple = ()  # plain: output slots computed under torch.no_grad()
    ctx_reads: str = "none"  # CTX_READS
    frame: str = ""  # FRAME_CALLS: the Function's input is the frame's intermediate, returned last too
    source: str = field(default="", compare=False)

    @property
    def name(self) -> str:
        return "b%04d" % self.index


_SLOT_EXPRS = {  # what an output slot returns, by kind (the variant picks one)
    "x": ("x",), "xv": X_VIEWS, "xs": tuple("*x.%s" % m for m in MULTI), "xm": ("x",),
    "y": ("y",), "yv": Y_VIEWS, "ys": tuple("*y.%s" % m for m in MULTI), "yd": DETACHED,
    "ydv": ("y.view(-1).detach()", "y.detach().view(-1)", "y.data.view(-1)"), "z": ("z",), "n": ("3",),
    "ypd": tuple("*(%s, %s.detach())" % (v, v) for v in ("y",) + Y_VIEWS),
}


def _slot_expr(kind, variant):
    """The expression one output slot returns (starred for a multi-output view)."""
    choices = _SLOT_EXPRS[kind]
    return choices[variant % len(choices)]


def _needs(outs, *kinds):
    return any(k in kinds for k, _ in outs)


def _prologue(body: Body, scale: str) -> list[str]:
    """The statements before the outputs: the in-place on x, the intermediates y and z."""
    stmts = []
    if _needs(body.outs, "xm"):
        stmts.append("x.mul_(2)")
    if _needs(body.outs, "y", "yv", "ys", "yd", "ydv", "ypd") or body.save == "inter":
        product = "x * %s" % {"x_w": "w", "x_closure": "W"}.get(body.sig, scale)
        if body.inner == "graph_break":
            stmts.append("torch._dynamo.graph_break()")
        if body.inner == "enable_grad":
            stmts += ["with torch.enable_grad():", "    y = (%s).exp()" % product]
        elif body.inner.startswith("nested"):
            inner = {"nested": "Inner", "nested_dirty": "InnerDirty", "nested_setup": "InnerSetup"}[body.inner]
            stmts.append("y = %s.apply(%s).exp()" % (inner, product))
        else:
            stmts.append("y = (%s).exp()" % product)
    if _needs(body.outs, "z"):
        stmts.append("z = x.sin()")
    return stmts


def _bind_slots(body: Body, extra: tuple = ()) -> tuple[list[str], list[str], list[list[int]]]:
    """Each output slot bound to a name: (statements, returned items, positions of each slot
    among forward's outputs). A multi-output slot is `m<slot>`, returned starred."""
    stmts, items, positions, p = [], [], [], 0
    for slot, (kind, variant) in enumerate(body.outs):
        expr = _slot_expr(kind, variant)
        if expr.startswith("*"):
            stmts.append("m%d = %s" % (slot, expr[1:]))
            items.append("*m%d" % slot)
            positions.append([p, p + 1])  # every multi-output view (and "ypd") here is two tensors
            p += 2
        else:
            if expr.isidentifier() or expr.isdigit():
                items.append(expr)
            else:
                stmts.append("o%d = %s" % (slot, expr))
                items.append("o%d" % slot)
            positions.append([p])
            p += 1
    for name in extra:
        items.append(name)
        positions.append([p])
        p += 1
    return stmts, items, positions


def marked_positions(body: Body) -> set:
    """The positions, among the body's flattened outputs, of those passed to
    ctx.mark_non_differentiable."""
    if body.kind != "function":
        return set()
    _, _, positions = _bind_slots(body)
    return {p for slot in body.nondiff for p in positions[slot]}


def input_multi_output_positions(body: Body) -> set:
    """The positions, among the body's flattened outputs, of the multi-output views of the input
    (`xs` slots)."""
    _, _, positions = _bind_slots(body)
    return {p for slot, (kind, _) in enumerate(body.outs) if kind == "xs" for p in positions[slot]}


def _returned(items: list[str], single: bool) -> str:
    if single:
        return items[0]
    return "(%s%s)" % (", ".join(items), "," if len(items) == 1 else "")


_SIG = {  # forward's parameters, the call, forward's tensor-or-not inputs, setup_context's unpacking
    "x": ("x", "F.apply(x)", "(x,) = inputs"),
    "x_default": ("x, k=2.0", "F.apply(x)", "x, k = inputs"),
    "x_keyword": ("x, k=2.0", "F.apply(x, k=3.0)", "x, k = inputs"),
    "x_w": ("x, w", "F.apply(x, w)", "x, w = inputs"),
    "x_n": ("x, n", "F.apply(x, 2)", "x, n = inputs"),
    "x_closure": ("x", "F.apply(x)", "(x,) = inputs"),
}
_SIDE = {
    "none": [],
    "print": ['print("ctx", tuple(x.shape))'],
    "append": ["LOG.append(x.shape[0])"],
    "disabled": ["ctx.rows = disabled_rows(x)"],
    "numpy": ["ctx.numpy_scale = float(np.float32(2.0))"],
}


def _render_function(body: Body) -> str:
    params, call, unpack = _SIG[body.sig]
    n_inputs = 1 if body.sig in ("x", "x_closure") else 2
    setup = body.style == "setup"
    stmts = _prologue(body, "k" if body.sig in ("x_default", "x_keyword") else "2.0")
    bind, items, positions = _bind_slots(body, ("n",) if body.sig == "x_n" else ())
    n_outputs = positions[-1][-1] + 1
    single = body.single and n_outputs == 1

    # The ctx calls: in forward on the names bound there, or in setup_context on `output`.
    def ref(slot):
        if setup:
            return ", ".join("output" if single else "output[%d]" % p for p in positions[slot])
        return items[slot]

    # One call: a second ctx.mark_non_differentiable replaces what the first marked.
    ctx_calls = ["ctx.mark_non_differentiable(%s)" % ", ".join(ref(slot) for slot in body.nondiff)] \
        if body.nondiff else []
    if body.dirty:
        ctx_calls.append("ctx.mark_dirty(x)")
    save = body.save
    if save == "inter" and setup:  # setup_context cannot see an intermediate
        save = "none"
    if save == "input":
        ctx_calls.append("ctx.save_for_backward(x)")
    elif save == "output":
        first = ("output" if single else "output[0]") if setup else items[0].lstrip("*")
        ctx_calls.append("ctx.save_for_backward(%s)" % (first + ("[0]" if items[0].startswith("*") and not setup else "")))
    elif save == "inter":
        ctx_calls.append("ctx.save_for_backward(y)")
    if not body.materialize:
        ctx_calls.append("ctx.set_materialize_grads(False)")
    ctx_calls.append("ctx.shape = x.shape")
    if body.ctx_reads == "marked_in_forward" and body.nondiff:
        ctx_calls.append("ctx.marked = len(ctx.non_differentiable)")
    elif body.ctx_reads == "needs_input_grad_in_forward":
        ctx_calls.append("ctx.first_needs_grad = ctx.needs_input_grad[0]")
    ctx_calls = _SIDE[body.side] + ctx_calls

    lines = ["class F(torch.autograd.Function):"]
    if setup:
        lines += ["    generate_vmap_rule = True", ""]
    lines += ["    @staticmethod", "    def forward(%s%s):" % ("" if setup else "ctx, ", params)]
    lines += ["        " + s for s in stmts + bind + ([] if setup else ctx_calls)]
    lines += ["        return " + _returned(items, single), ""]
    if setup:
        lines += ["    @staticmethod", "    def setup_context(ctx, inputs, output):", "        " + unpack]
        lines += ["        " + s for s in ctx_calls] + [""]
    grads = ["g%d" % i for i in range(n_outputs)]
    lines += ["    @staticmethod", "    def backward(ctx, %s):" % ", ".join(grads),
              "        total = None",
              "        for g in (%s%s):" % (", ".join(grads), "," if n_outputs == 1 else ""),
              "            if g is not None and g.is_floating_point():",
              "                total = g.sum() if total is None else total + g.sum()",
              "        if total is None:",
              "            return %s" % ", ".join(["None"] * n_inputs)]
    if save != "none":
        # s.sum(): a saved view need not have x's shape; s keeps double backward going.
        lines += ["        (s,) = ctx.saved_tensors", "        gx = total * s.sum() * torch.ones(ctx.shape)"]
    else:
        lines += ["        gx = total * torch.ones(ctx.shape)"]
    if body.ctx_reads == "marked_in_forward" and body.nondiff:
        lines += ["        gx = gx * (1 + ctx.marked)"]
    elif body.ctx_reads == "marked_in_backward":
        lines += ["        if ctx.non_differentiable is not None:", "            gx = gx * 2"]
    elif body.ctx_reads == "needs_input_grad_in_forward":
        lines += ["        if not ctx.first_needs_grad:", "            gx = gx * 0"]
    if body.needs_input_grad:
        lines += ["        if not ctx.needs_input_grad[0]:", "            gx = None"]
    rest = ", total * torch.ones(ctx.shape)" if body.sig == "x_w" else ("" if n_inputs == 1 else ", None")
    lines += ["        return gx%s" % rest, ""]
    if body.frame:
        call_lines = ["def body(%s):" % ("x0, w" if body.sig == "x_w" else "x0"),
                      "    x = x0.exp()"]
        call_lines += (["    with torch.no_grad():", "        out = %s" % call] if body.frame == "no_grad"
                       else ["    out = %s" % call])
        call_lines.append("    return (*out, x) if isinstance(out, tuple) else (out, x)")
    else:
        call_lines = ["def body(%s):" % ("x, w" if body.sig == "x_w" else "x"), "    return %s" % call]
    return "\n".join(_HEADER + ["", "", *lines, "", *call_lines, ""])


def _render_plain(body: Body) -> str:
    lines = ["def body(x):"] + ["    " + s for s in _prologue(body, "2.0")]
    items = []
    for slot, (kind, variant) in enumerate(body.outs):
        expr = _slot_expr(kind, variant)
        name = ("m%d" if expr.startswith("*") else "o%d") % slot
        if slot in body.nograd and kind not in ("x", "xm"):
            lines += ["    with torch.no_grad():", "        %s = %s" % (name, expr.lstrip("*"))]
        elif expr.isidentifier():
            items.append(expr)
            continue
        else:
            lines.append("    %s = %s" % (name, expr.lstrip("*")))
        items.append(("*" if expr.startswith("*") else "") + name)
    single = body.single and len(items) == 1 and not items[0].startswith("*")
    lines.append("    return " + _returned(items, single))
    return "\n".join(_HEADER + ["", "", *lines, ""])


_HEADER = [
    "import numpy as np",
    "import torch",
    "",
    "LOG = []",
    "W = torch.randn(2, 3, generator=torch.Generator().manual_seed(1)).requires_grad_()",
    "",
    "",
    "@torch.compiler.disable",
    "def disabled_rows(t):",
    "    return t.shape[0]",
    "",
    "",
    "class Inner(torch.autograd.Function):",
    "    @staticmethod",
    "    def forward(ctx, t):",
    "        return t * 1.5",
    "",
    "    @staticmethod",
    "    def backward(ctx, g):",
    "        return g * 1.5",
    "",
    "",
    "class InnerDirty(torch.autograd.Function):",
    "    @staticmethod",
    "    def forward(ctx, t):",
    "        t.mul_(1.5)",
    "        ctx.mark_dirty(t)",
    "        return t",
    "",
    "    @staticmethod",
    "    def backward(ctx, g):",
    "        return g * 1.5",
    "",
    "",
    "class InnerSetup(torch.autograd.Function):",
    "    @staticmethod",
    "    def forward(t):",
    "        return t * 1.5",
    "",
    "    @staticmethod",
    "    def setup_context(ctx, inputs, output):",
    "        LOG.append(\"inner\")",
    "",
    "    @staticmethod",
    "    def backward(ctx, g):",
    "        return g * 1.5",
]


def render(body: Body) -> str:
    return _render_function(body) if body.kind == "function" else _render_plain(body)


# ---------------------------------------------------------------------------------------------
# Drawing bodies
# ---------------------------------------------------------------------------------------------


def _draw_outs(rng, function):
    kinds = ["x", "xv", "xs", "xm", "y", "yv", "ys", "yd", "ydv", "z"] + (["n"] if function else [])
    weights = [3, 5, 2, 2, 4, 5, 3, 3, 2, 2] + ([1] if function else [])
    n = rng.choice((1, 1, 2, 2, 2, 3))
    outs = []
    for _ in range(n):
        kind = rng.choices(kinds, weights)[0]
        if kind == "xm" and (outs or _needs(outs, "x", "xv", "xs")):
            kind = "xv"  # an in-place input comes first, and once
        outs.append((kind, rng.randrange(12)))
    if outs[0][0] == "n":
        outs[0] = ("y", 0)
    return tuple(outs)


def draw_body(index: int) -> Body:
    rng = random.Random("%d-body-%d" % (SEED, index))
    ctx_reads = index in CTX_READ_RANGE
    frame = index >= FRAME_RANGE.start
    pairs = index in PAIR_RANGE  # plain code too
    function = rng.random() < (0.5 if pairs else 0.75) or ctx_reads or frame  # those axes are a Function's
    outs = _draw_outs(rng, function)
    if frame:  # two slots at most: with x after them, every output is observed (MAX_OUTPUTS)
        outs = outs[:2]
    if pairs:  # its own stream, as for the ctx reads below
        pair = random.Random("%d-pair-%d" % (SEED, index))
        slot = pair.choice([i for i, (k, _) in enumerate(outs) if k != "n"])
        outs = outs[:slot] + (("ypd", pair.randrange(len(_SLOT_EXPRS["ypd"]))),) + outs[slot + 1:]
    if not function:
        nograd = tuple(i for i in range(len(outs)) if rng.random() < 0.3)
        body = Body(index, "plain", outs, single=rng.random() < 0.5, nograd=nograd)
        return Body(**{**body.__dict__, "source": render(body)})
    style = rng.choice(STYLES)
    tensor_slots = [i for i, (k, _) in enumerate(outs) if k != "n"]
    nondiff = tuple(i for i in tensor_slots if rng.random() < 0.5)
    body = Body(
        index, "function", outs, style=style,
        sig=rng.choices(SIGNATURES, (4, 2, 2, 1, 1, 2))[0],
        nondiff=nondiff,
        dirty=_needs(outs, "xm") and rng.random() < 0.8,
        save=rng.choices(SAVES, (3, 2, 2, 1))[0],
        materialize=rng.random() < 0.8,
        needs_input_grad=rng.random() < 0.3,
        side=rng.choices(SIDE_EFFECTS, (6, 1, 1, 1, 1))[0],
        single=rng.random() < 0.5,
        inner=rng.choices(INNER, (8, 1, 1, 1, 1, 1))[0],
    )
    if ctx_reads:  # its own stream: the draws above are those of any other body
        reads = random.Random("%d-ctx-reads-%d" % (SEED, index)).choice(CTX_READS[1:])
        body = Body(**{**body.__dict__, "ctx_reads": "marked_in_backward" if reads == "marked_in_forward"
                       and not nondiff else reads})
    if frame:
        call = random.Random("%d-frame-%d" % (SEED, index)).choice(FRAME_CALLS)
        body = Body(**{**body.__dict__, "frame": call})
    return Body(**{**body.__dict__, "source": render(body)})


# ---------------------------------------------------------------------------------------------
# Callers and runners
# ---------------------------------------------------------------------------------------------

GRAD_MODES = ("grad", "no_grad", "no_grad_inner", "inference_mode")
# The inputs the body gets: a leaf that requires grad, one that does not, a non-leaf, an
# nn.Parameter, a slice of one, a __torch_function__ subclass (a leaf; or a non-leaf alias of a
# leaf, as_subclass()), a __torch_dispatch__ wrapper subclass (TwoTensor).
INPUTS = ("leaf", "leaf_norg", "nonleaf", "param", "param_slice", "tf_subclass", "tf_subclass_alias", "twotensor")
# What wraps the call: nothing; a graph break before or after the body's call (compiled runners);
# torch.utils.checkpoint; a module with a full backward hook; torch.func transforms over the
# runner's function; code after the call that registers a hook on each output that requires grad
# (compiled code decides from Dynamo's traced outputs and runs on the real ones: only its own
# caller, REQUIRES_GRAD_HOOK, draws it).
WRAPPERS = ("none", "graph_break", "checkpoint", "checkpoint_reentrant", "module_hook",
            "func_grad", "func_vjp", "func_jacrev", "func_jvp", "func_vmap", "requires_grad_hook")
# How it runs. _fg: fullgraph=True; _dyn: dynamic=True.
RUNNERS = ("eager", "compile_eager", "compile_eager_fg", "compile_eager_dyn", "aot_eager", "aot_eager_fg",
           "aot_eager_dyn", "inductor", "inductor_fg", "inductor_dyn", "aot_function", "export_strict",
           "export", "aot_export_joint")
COMPILED = RUNNERS[1:]


@dataclass(frozen=True)
class Program:
    body: Body
    grad: str
    inputs: str
    wrapper: str
    runner: str

    @property
    def caller(self) -> str:
        return "%s.%s.%s" % (self.grad, self.inputs, self.wrapper)

    @property
    def id(self) -> str:
        return "%s.%s.%s" % (self.body.name, self.caller, self.runner)


def _caller_ok(body, grad, inputs, wrapper):
    if wrapper.startswith("func_") and (inputs not in ("leaf", "leaf_norg") or grad == "inference_mode"):
        return False  # transforms over subclasses or inference tensors: outside this family
    if wrapper == "module_hook" and inputs not in ("leaf", "nonleaf", "param"):
        return False
    if inputs == "twotensor" and wrapper != "none":
        return False
    return True


def _runner_ok(runner, wrapper, grad):
    if runner.startswith("export") or runner == "aot_export_joint":
        return wrapper == "none" and grad in ("grad", "no_grad_inner")
    if wrapper == "graph_break" and (runner == "aot_function" or runner.endswith("_fg")):
        return False  # no graph to break, or one that must not break
    return True


# Runner weights: inductor compiles C++ for each new graph (seconds each on two cores).
RUNNER_WEIGHTS = {"eager": 0, "compile_eager": 6, "compile_eager_fg": 5, "compile_eager_dyn": 2, "aot_eager": 6,
                  "aot_eager_fg": 5, "aot_eager_dyn": 2, "inductor": 1.2, "inductor_fg": 0.6, "inductor_dyn": 0.4,
                  "aot_function": 3, "export_strict": 1, "export": 1, "aot_export_joint": 1}
WRAPPER_WEIGHTS = {"none": 14, "graph_break": 3, "checkpoint": 1.5, "checkpoint_reentrant": 1.5, "module_hook": 2,
                   "func_grad": 1, "func_vjp": 1.5, "func_jacrev": 1, "func_jvp": 1, "func_vmap": 1}
GRAD_WEIGHTS = {"grad": 5, "no_grad": 3, "no_grad_inner": 2, "inference_mode": 1}
INPUT_WEIGHTS = {"leaf": 8, "leaf_norg": 2, "nonleaf": 2, "param": 2, "param_slice": 2, "tf_subclass": 1,
                 "tf_subclass_alias": 1, "twotensor": 1}


def _pick(rng, weights):
    return rng.choices(list(weights), list(weights.values()))[0]


# A frame body's callers and runners: grad mode on around it (its Function may take its own
# no_grad()), and mostly AOTAutograd's runners, where its outputs are regenerated.
FRAME_GRAD_WEIGHTS = {"grad": 6, "no_grad": 1, "no_grad_inner": 1, "inference_mode": 1}
FRAME_RUNNER_WEIGHTS = {**RUNNER_WEIGHTS, "compile_eager": 2, "compile_eager_fg": 1, "aot_eager": 6,
                        "inductor": 6, "inductor_fg": 2, "inductor_dyn": 2}


def programs_of(body: Body, callers: int, runners: int) -> list[Program]:
    """The programs of one body: CALLERS callers, each with eager and RUNNERS compiled runners."""
    rng = random.Random("%d-programs-%d" % (SEED, body.index))
    grad_weights = FRAME_GRAD_WEIGHTS if body.frame else GRAD_WEIGHTS
    runner_weights = FRAME_RUNNER_WEIGHTS if body.frame else RUNNER_WEIGHTS
    out, seen = [], set()
    for _ in range(callers * 4):
        if len(seen) == callers:
            break
        grad, inputs, wrapper = _pick(rng, grad_weights), _pick(rng, INPUT_WEIGHTS), _pick(rng, WRAPPER_WEIGHTS)
        if (grad, inputs, wrapper) in seen or not _caller_ok(body, grad, inputs, wrapper):
            continue
        seen.add((grad, inputs, wrapper))
        chosen = ["eager"]
        for _ in range(runners * 4):
            if len(chosen) == runners + 1:
                break
            runner = _pick(rng, runner_weights)
            if runner not in chosen and _runner_ok(runner, wrapper, grad):
                chosen.append(runner)
        out += [Program(body, grad, inputs, wrapper, r) for r in chosen]
    return out


# The runners of the requires_grad_hook caller: torch.compile's (the branch is compiled code).
HOOK_RUNNER_WEIGHTS = {r: w for r, w in RUNNER_WEIGHTS.items() if r.startswith(("compile_eager", "aot_eager", "inductor"))}


def requires_grad_hook_programs(body: Body) -> list[Program]:
    """One more caller of every body, drawn apart so that the programs above stay as they were:
    grad mode on, a leaf input, a hook registered after the call on each output that requires grad
    (`if out.requires_grad: out.register_hook(...)`); eager and one compiled runner. A compiled
    output whose requires_grad at run time is not the traced one's makes it raise."""
    rng = random.Random("%d-requires-grad-hook-%d" % (SEED, body.index))
    return [Program(body, "grad", "leaf", "requires_grad_hook", r) for r in ("eager", _pick(rng, HOOK_RUNNER_WEIGHTS))]


def corpus(bodies: int = FRAME_RANGE.stop, callers: int = 3, runners: int = 2) -> list[Program]:
    """The whole corpus, in a fixed order."""
    bodies_drawn = [draw_body(i) for i in range(bodies)]
    return [p for b in bodies_drawn for p in (*programs_of(b, callers, runners), *requires_grad_hook_programs(b))]


def quick(programs: list[Program], every: int = 10) -> list[Program]:
    """The quick subset: every EVERY-th body's programs, whole."""
    return [p for p in programs if p.body.index % every == 0]
