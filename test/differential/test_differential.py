"""The differential corpus's own logic, on made-up records: the programs it generates, how a
difference is classified, and what each rule covers (and does not). The corpus itself runs
in .ci/run (`differential.sh --quick`), against real torch on both sides."""

import ast
import os
import sys
from dataclasses import replace

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import compare  # noqa: E402
import programs as P  # noqa: E402
import rules  # noqa: E402

AUTOGRAD = rules.AUTOGRAD


@pytest.fixture(autouse=True)
def all_rules_active():
    rules.ACTIVE = None
    yield
    rules.ACTIVE = None


def test_the_corpus_is_the_same_on_every_call_and_its_bodies_parse():
    first, second = P.corpus(), P.corpus()
    assert [p.id for p in first] == [p.id for p in second]
    assert len({p.id for p in first}) == len(first), "duplicate program ids"
    assert len(first) >= 5000
    for body in {p.body.index: p.body for p in first}.values():
        ast.parse(body.source)
    quick = P.quick(first)
    assert {p.body.index % 10 for p in quick} == {0} and len(quick) >= 500


def test_every_axis_value_occurs():
    programs = P.corpus()
    for axis, values in (("grad", P.GRAD_MODES), ("inputs", P.INPUTS), ("wrapper", P.WRAPPERS),
                         ("runner", P.RUNNERS)):
        seen = {getattr(p, axis) for p in programs}
        assert set(values) <= seen, f"{axis}: never drawn: {sorted(set(values) - seen)}"
    bodies = [p.body for p in programs]
    for axis, values in (("style", P.STYLES), ("sig", P.SIGNATURES), ("save", P.SAVES), ("side", P.SIDE_EFFECTS),
                         ("inner", P.INNER)):
        seen = {getattr(b, axis) for b in bodies if b.kind == "function"}
        assert set(values) <= seen, f"{axis}: never drawn: {sorted(set(values) - seen)}"
    kinds = {k for b in bodies for k, _ in b.outs}
    assert set(P.OUT_KINDS) <= kinds
    assert {b.ctx_reads for b in bodies if b.index in P.CTX_READ_RANGE} == set(P.CTX_READS[1:])
    assert {b.ctx_reads for b in bodies if b.index not in P.CTX_READ_RANGE} == {"none"}
    pairs = {v for b in bodies for k, v in b.outs if k == "ypd"}
    assert pairs == set(range(len(P._SLOT_EXPRS["ypd"])))
    assert all(b.index in P.PAIR_RANGE for b in bodies if ("ypd", 0) in b.outs)
    assert {b.index for b in bodies if b.frame} == set(P.FRAME_RANGE)
    assert {b.frame for b in bodies if b.frame} == set(P.FRAME_CALLS)


def test_a_frame_body_returns_the_frames_own_intermediate_after_the_outputs():
    # eager runs it: the Function gets x0.exp(), and the intermediate comes back last, the one
    # whose saved result an in-place change of an output aliasing it invalidates.
    body = next(b for b in map(P.draw_body, P.FRAME_RANGE) if b.sig == "x" and len(b.outs) == 2)
    ns = {}
    exec(body.source, ns)
    torch = ns["torch"]
    x0 = torch.randn(2, 3, requires_grad=True)
    out = ns["body"](x0)
    _, _, positions = P._bind_slots(body)
    assert len(out) == positions[-1][-1] + 2  # the Function's outputs, flattened, then x
    assert torch.equal(out[-1], x0.detach().exp()) and out[-1].grad_fn.name() == "ExpBackward0"


def test_ctx_reads_are_what_eager_keeps_on_ctx():
    marked = replace(_function([("x", 0), ("y", 0)], nondiff=(0,)), ctx_reads="marked_in_forward", save="inter")
    marked = replace(marked, source=P.render(marked))
    assert "ctx.marked = len(ctx.non_differentiable)" in marked.source
    assert "gx = gx * (1 + ctx.marked)" in marked.source
    in_backward = replace(marked, ctx_reads="marked_in_backward")
    assert "if ctx.non_differentiable is not None:" in P.render(in_backward)
    ns = {}
    exec(marked.source, ns)  # eager runs it: the attributes exist where the program reads them
    x = ns["torch"].randn(2, 3, requires_grad=True)
    out, y = ns["body"](x)
    y.sum().backward()
    assert x.grad is not None


def _function(outs, nondiff, style="ctx", sig="x"):
    body = P.Body(0, "function", tuple(outs), style=style, sig=sig, nondiff=tuple(nondiff))
    return replace(body, source=P.render(body))


def test_one_mark_call_names_every_marked_output_and_positions_follow_starred_slots():
    body = _function([("ys", 0), ("yv", 0), ("x", 0)], nondiff=(0, 1))
    assert body.source.count("ctx.mark_non_differentiable(") == 1
    assert "ctx.mark_non_differentiable(*m0, o1)" in body.source
    # ys is two tensors (positions 0, 1), yv position 2, x position 3
    assert P.marked_positions(body) == {0, 1, 2}
    setup = _function([("ys", 0), ("yv", 0)], nondiff=(1,), style="setup")
    assert "ctx.mark_non_differentiable(output[2])" in setup.source


def _program(body, runner="eager", wrapper="none", grad="grad", inputs="leaf"):
    return P.Program(body, grad, inputs, wrapper, runner)


VIEW = {"out[0].is_view": True, "out[0].requires_grad": True, "out[0].base": "in[0]", "out[0].grad_fn": None,
        "out[0].is_leaf": True, "inplace[0]": "raise RuntimeError: A view was created in no_grad mode", "run": "ok"}
ALIAS = {"out[0].is_view": False, "out[0].requires_grad": False, "out[0].base": None, "out[0].grad_fn": None,
         "out[0].is_leaf": True, "inplace[0]": "ok", "run": "ok"}


def test_an_eager_change_is_intended_only_where_the_autograd_patch_says_so():
    marked = _program(_function([("xv", 0)], nondiff=(0,)))
    found = compare.classify(marked, VIEW, ALIAS, None, None)
    assert {d.cls for d in found} == {"intended"}
    assert all(d.rule.startswith("0001") for d in found)
    # the same change on an output the Function did not mark is a regression
    unmarked = _program(_function([("xv", 0)], nondiff=()))
    assert {d.cls for d in compare.classify(unmarked, VIEW, ALIAS, None, None)} == {"unintended"}
    # and so is any other value than the alias's
    odd = dict(ALIAS, **{"out[0].is_leaf": False})
    assert "unintended" in {d.cls for d in compare.classify(marked, VIEW, odd, None, None)}


def test_a_rule_counts_only_when_its_patch_is_in_the_stack_under_test():
    marked = _program(_function([("xv", 0)], nondiff=(0,)))
    rules.ACTIVE = {"0002-something-else.patch"}
    assert {d.cls for d in compare.classify(marked, VIEW, ALIAS, None, None)} == {"unintended"}
    rules.ACTIVE = {AUTOGRAD}
    assert {d.cls for d in compare.classify(marked, VIEW, ALIAS, None, None)} == {"intended"}


def test_a_compiled_change_to_eagers_value_is_a_fix_and_any_other_is_not():
    body = _function([("xv", 0)], nondiff=())
    compiled = _program(body, runner="aot_eager")
    stock = {"run": "ok", "out[0].requires_grad": True, "dynamo.graph_breaks": 0}
    eager = {"run": "ok", "out[0].requires_grad": False}
    fixed = compare.classify(compiled, stock, dict(stock, **{"out[0].requires_grad": False}), eager, eager)
    assert [d.cls for d in fixed] == ["fix"]
    # a new graph break has no eager counterpart: unintended unless a rule says so
    broken = compare.classify(compiled, stock, dict(stock, **{"dynamo.graph_breaks": 1}), eager, eager)
    assert [d.cls for d in broken] == ["unintended"]


def test_errors_compare_with_eager_by_the_check_that_raised_not_by_the_name():
    eager = "raise RuntimeError: one of the variables needed for gradient computation has been modified by " \
            "an inplace operation: [torch.FloatTensor [2, 3]], which is output 0 of FBackward, is at version 1"
    compiled = eager.replace("FBackward", "ApplyTemplateBackward").replace("[2, 3]", "[6]")
    assert compare.same_check(eager, compiled)
    assert not compare.same_check(eager, "raise RuntimeError: Trying to backward through the graph a second time")


def test_a_program_that_raised_on_stock_cannot_regress():
    compiled = _program(_function([("y", 0)], nondiff=()), runner="compile_eager_fg")
    found = compare.classify(compiled, {"run": "raise Unsupported: x"}, {"run": "ok", "out[0].values": [1.0]},
                             {"run": "ok"}, {"run": "ok"})
    assert [d.cls for d in found] == ["fix"]  # run: ok is eager's; the rest was never observed on stock
    found = compare.classify(compiled, {"run": "raise Unsupported: x"}, {"run": "raise Other: y"},
                             {"run": "ok"}, {"run": "ok"})
    assert [d.cls for d in found] == ["stock-fails"]


def test_a_new_failure_of_a_program_that_ran_on_stock_is_unintended():
    compiled = _program(_function([("y", 0)], nondiff=()), runner="compile_eager")
    found = compare.classify(compiled, {"run": "ok", "out[0].values": [1.0]},
                             {"run": "raise TypeError: unsupported operand"}, {"run": "ok"}, {"run": "ok"})
    assert [(d.path, d.cls) for d in found] == [("run", "unintended")]


def test_after_an_in_place_change_that_raised_on_stock_nothing_regresses():
    compiled = _program(_function([("y", 0), ("yv", 0)], nondiff=()), runner="aot_eager")
    stock = {"run": "ok", "inplace[1]": "raise RuntimeError: view", "inplace[1].grad(out[0])": "n/a"}
    stack = {"run": "ok", "inplace[1]": "ok", "inplace[1].grad(out[0])": "raise RuntimeError: Output 0 of X"}
    eager = {"run": "ok", "inplace[1]": "ok", "inplace[1].grad(out[0])": [[1.0]]}
    found = {d.path: d.cls for d in compare.classify(compiled, stock, stack, eager, eager)}
    assert found == {"inplace[1]": "fix", "inplace[1].grad(out[0])": "stock-fails"}


def test_an_exported_graph_that_gains_a_detach_is_a_regression():
    # export traces with fake tensors, where the [autograd] patch leaves the marked view as on stock
    body = _function([("xv", 0)], nondiff=(0,))
    exported = _program(body, runner="export")
    before = {"run": "ok", "graph.ops": ["aten.view.default x1"]}
    after = {"run": "ok", "graph.ops": ["aten.detach.default x1", "aten.view.default x1"]}
    assert [d.cls for d in compare.classify(exported, before, after, None, None)] == ["unintended"]
    assert compare.classify(exported, before, dict(before), None, None) == []


def test_path_parsing():
    assert rules.parse("out[3].is_view") == ("out", 3, "is_view")
    assert rules.parse("grad(out[2])") == ("grad", 2, None)
    assert rules.parse("inplace_no_grad[1].grad(out[0])") == ("inplace_no_grad", 1, 0)
    assert rules.parse("inplace[4]") == ("inplace", 4, None)
    assert rules.parse("dynamo.frames") == ("dynamo.frames", None, None)


def test_a_compiled_program_that_raised_on_stock_is_not_a_regression_unless_eager_raises_the_same():
    compiled = _program(_function([("y", 0)], nondiff=()), runner="compile_eager")
    stock = {"run": "raise AssertionError: Expected fwd_out to be a BaseListVariable", "dynamo.frames": [1, 0]}
    stack = {"run": "ok", "dynamo.frames": [1, 1]}
    eager = {"run": "raise RuntimeError: functorch needs setup_context"}
    assert {d.cls for d in compare.classify(compiled, stock, stack, eager, eager)} == {"stock-fails"}
    # eager raises the very error stock raised, and the stack no longer does: a missed error
    eager = {"run": stock["run"]}
    assert "unintended" in {d.cls for d in compare.classify(compiled, stock, stack, eager, eager)}


def test_where_a_later_call_raised_on_stock_the_missing_observations_are_no_regression():
    compiled = _program(_function([("y", 0)], nondiff=()), runner="compile_eager_fg")
    stock = {"run": "ok", "inplace[0]": "ok", "repeat": "raise FailOnRecompileLimitHit: x"}
    stack = {"run": "ok", "repeat": "raise FailOnRecompileLimitHit: x"}
    assert {d.cls for d in compare.classify(compiled, stock, stack, None, None)} == {"stock-fails"}
    # a later call that raises with the stack only is a regression
    stock = {"run": "ok", "inplace[0]": "ok"}
    assert "unintended" in {d.cls for d in compare.classify(compiled, stock, stack, None, None)}


def test_a_compiled_observation_that_failed_on_stock_and_still_fails_is_no_regression():
    compiled = _program(_function([("y", 0)], nondiff=()), runner="aot_eager")
    stock = {"run": "ok", "inplace[0].grad(out[1])": "raise RuntimeError: one of the variables needed"}
    stack = {"run": "ok", "inplace[0].grad(out[1])": "raise RuntimeError: A view was created in no_grad mode"}
    eager = {"run": "ok", "inplace[0].grad(out[1])": [None]}
    assert [d.cls for d in compare.classify(compiled, stock, stack, eager, eager)] == ["stock-fails"]
    # but when stock raised what eager raises, another error is a regression
    eager = {"run": "ok", "inplace[0].grad(out[1])": stock["inplace[0].grad(out[1])"]}
    assert [d.cls for d in compare.classify(compiled, stock, stack, eager, eager)] == ["unintended"]


@pytest.mark.parametrize("bodies", ["5:2", "a:b", "3", "100000:100001"])
def test_a_bad_bodies_range_is_refused_in_one_line(bodies, capsys):
    import differential
    with pytest.raises(differential.BadInput, match=rf"^--bodies {bodies}: "):
        differential.main(["--bodies", bodies])
