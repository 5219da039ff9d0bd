"""The semantics scoreboard, A/B in one run: the whole catalogue on stock torch and with
the stack overlaid (each side in its own subprocess, through scripts/stack.sh run
[--stock]), checked against two data files:

  known_failures_stock.txt  pairs that differ on stock: each must differ there (the A/B is real)
  known_failures_stack.txt  pairs that still differ with the stack: the open issue that owns
                            each, as an expected failure; every other pair must agree with
                            the stack (a fixed pair, or one that never differed: no regression).
                            It lists pairs of the stock list, and pairs tagged compiled-as-stock:
                            they agreed on stock and differ with the stack only because eager
                            moved (a patch's eager fix that compiled code does not follow), their
                            compiled code behaving exactly as on stock, which
                            test_compiled_as_stock_pairs_compile_as_on_stock checks on both sides.
                            Any other pair that agreed on stock and differs with the stack is a
                            regression, which no list can excuse.

Both directions are exact: a listed pair that agrees fails too, so the lists stay true. And
each listed pair names the differences it shows (harness.diff_records' observations): the
measured ones must be exactly these, so a listed pair whose values, gradients or errors
go wrong in another way fails as well.
The catalogue is split into shards so that pytest-xdist spreads the compiles over cores.
"""

import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from cases import CASES  # noqa: E402
from harness import MODES, modes_for  # noqa: E402
from scoreboard import AS_STOCK, SIDES, compiled_as_stock, format_known, load_known, run_side  # noqa: E402

SHARDS = 6
KNOWN = {side: load_known(os.path.join(HERE, f"known_failures_{side}.txt")) for side in SIDES}
PAIRS = {(c.name, m) for c in CASES for m in modes_for(c)}


def test_the_known_lists_name_real_pairs_and_open_issues():
    assert len({c.name for c in CASES}) == len(CASES), "duplicate case names"
    for side, known in KNOWN.items():
        unknown = sorted(set(known) - PAIRS)
        assert not unknown, f"known_failures_{side}.txt names unknown pairs: {unknown}"
        assert {k.issue for k in known.values()} <= {"issue-4", "issue-5", "issue-6", "issue-7"}
        assert {mode for _, mode in known} <= set(MODES)


def test_the_stack_list_is_within_the_stock_list():
    """A pair can be listed as still differing with the stack only if it differs on stock too,
    or is tagged compiled-as-stock (and only then): a pair that agreed on stock and differs with
    the stack is a regression, never a known failure, unless its compiled code is as on stock."""
    regressions = sorted(f"{c} {m}" for (c, m), k in KNOWN["stack"].items()
                         if (c, m) not in KNOWN["stock"] and not k.as_stock)
    assert not regressions, ("known_failures_stack.txt lists pairs that agree on stock "
                             "(regressions of the stack):\n  " + "\n  ".join(regressions))
    mistagged = sorted(f"{c} {m}" for (c, m), k in KNOWN["stack"].items() if k.as_stock and (c, m) in KNOWN["stock"])
    assert not mistagged, f"tagged {AS_STOCK} but they differ on stock too:\n  " + "\n  ".join(mistagged)


AS_STOCK_PAIRS = sorted(pair for pair, k in KNOWN["stack"].items() if k.as_stock)


@pytest.mark.skipif(not AS_STOCK_PAIRS, reason=f"no pair is tagged {AS_STOCK}")
def test_compiled_as_stock_pairs_compile_as_on_stock(tmp_path):
    """Each pair tagged compiled-as-stock: its compiled code observed on stock and with the
    stack (every observation of harness.observe) is the same, so that only eager moved."""
    changed = {pair: d for pair, d in compiled_as_stock(AS_STOCK_PAIRS, str(tmp_path)).items() if d}
    assert not changed, "compiled code changed (regressions, not eager moving):" + "".join(
        f"\n  {c} {m}: " + "; ".join(d) for (c, m), d in sorted(changed.items()))


def _otherwise(pair, measured, listed):
    return " ".join(pair) + ":" + "".join(
        [f"\n    listed, not measured: {x}" for x in sorted(set(listed) - set(measured))]
        + [f"\n    measured, not listed: {x}" for x in sorted(set(measured) - set(listed))])


@pytest.fixture(scope="session")
def inductor_cache(tmp_path_factory):
    """One compile cache per run, shared by the xdist workers (per side: see run_side)."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "inductor-cache"
    shared.mkdir(exist_ok=True)
    return str(shared)


@pytest.mark.parametrize("shard", range(SHARDS))
@pytest.mark.parametrize("side", SIDES)
def test_scoreboard(side, shard, tmp_path, inductor_cache):
    results = run_side(side, str(tmp_path / "results.json"), shard=f"{shard}/{SHARDS}",
                       inductor_cache=inductor_cache)
    expected = {pair: known for pair, known in KNOWN[side].items() if pair in results}
    wrongly_agree = sorted(f"{c} {m} (listed for {expected[(c, m)].issue})" for c, m in expected
                           if not results[(c, m)])
    wrongly_differ = sorted(format_known(c, m, "(unlisted)", d) for (c, m), d in results.items()
                            if d and (c, m) not in expected)
    differ_otherwise = sorted(_otherwise(pair, results[pair], expected[pair].diffs) for pair in expected
                              if results[pair] and set(results[pair]) != set(expected[pair].diffs))
    problems = {f"listed in known_failures_{side}.txt but agree": wrongly_agree,
                "not listed but differ": wrongly_differ,
                "listed, but differ otherwise": differ_otherwise}
    assert not any(problems.values()), f"on {side}, shard {shard}:" + "".join(
        f"\n{title}:\n  " + "\n  ".join(found) for title, found in problems.items() if found)
