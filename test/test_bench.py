"""The benchmarks' own logic: compiled_views --same-code's capture and comparison."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts" / "bench"))

import compiled_views  # noqa: E402

ORCHESTRATION = ["runtime_wrapper_orchestration", "def _runtime_wrapper(args):\n    return f(args)"]
ALIAS = ["output_alias_wrapper", "def _alias_fn(orig_inputs, fw_outs):\n    return fw_outs"]


def test_same_code_names_the_wrappers_that_differ():
    stock = {"g same": [ALIAS, ORCHESTRATION], "g changed": [ALIAS, ORCHESTRATION], "g dropped": [ALIAS, ORCHESTRATION]}
    patched = {"g same": [ALIAS, ORCHESTRATION], "g changed": [ALIAS, [ORCHESTRATION[0], ORCHESTRATION[1] + "  # x"]],
               "g dropped": [ORCHESTRATION]}
    rows, errors = compiled_views.compare_code(stock, patched)
    assert errors == []
    assert rows == [("g same", [], 2), ("g changed", ["runtime_wrapper_orchestration"], 2),
                    ("g dropped", ["output_alias_wrapper"], 2)]


def test_same_code_refuses_a_graph_with_no_code_captured():
    # What a torch whose wrappers the capture does not see gives: nothing on both sides, which
    # would otherwise read as "the same".
    rows, errors = compiled_views.compare_code({"g": []}, {"g": []})
    assert rows == [] and errors == ["g: no generated code captured (0 functions on stock, 0 with the stack)"]
    rows, errors = compiled_views.compare_code({"g": [ORCHESTRATION]}, {})
    assert errors == ["g: the stack's side compiled no such graph"]


def test_the_capture_sees_this_torchs_generated_runtime_code():
    functions = {fn.__name__: fn for fn in compiled_views.functions()}
    code = compiled_views.dump_code(("aot_eager",), [functions["anchor_no_view"], functions["anchor_view_of_input"]])
    assert sorted(code) == ["aot_eager anchor_no_view fwd", "aot_eager anchor_no_view inference",
                            "aot_eager anchor_view_of_input fwd", "aot_eager anchor_view_of_input inference"]
    assert all(code.values()), code
    # The code follows the graph: a second output, a view of the input regenerated per call (a
    # wrapper of its own), and the same graph with grad is another code.
    rows, errors = compiled_views.compare_code(
        {"g": code["aot_eager anchor_no_view inference"]}, {"g": code["aot_eager anchor_view_of_input inference"]})
    assert errors == [] and rows == [("g", ["output_alias_wrapper", "runtime_wrapper_orchestration"], 1)]
    rows, _ = compiled_views.compare_code(
        {"g": code["aot_eager anchor_no_view inference"]}, {"g": code["aot_eager anchor_no_view fwd"]})
    assert rows[0][1] != []
