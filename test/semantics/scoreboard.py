"""Print the semantics scoreboard: case, mode, diffs.

  python test/semantics/scoreboard.py [--cases PATTERN] [--modes M ...] [--shard K/N]
                                      [--json OUT] [--write-known FILE]
  python test/semantics/scoreboard.py --ab [--json OUT] [--write-known DIR]
                                      (or ./scripts/scoreboard.sh)
  python test/semantics/scoreboard.py --records OUT --pairs CASE:MODE ...

Plain, it runs on whatever torch the interpreter imports. --ab runs the catalogue on
stock torch and with the stack overlaid, side by side (scripts/stack.sh run --stock /
run), and prints the pairs that differ on either side.

PATTERN is an fnmatch pattern on case names (e.g. 'nograd_*').
--write-known FILE writes every differing (case, mode) in the known_failures_stock.txt
format, with the issue derived by owner_for() and the differences measured; with --ab,
--write-known DIR writes both DIR/known_failures_stock.txt and DIR/known_failures_stack.txt.
--records writes the compiled side's records of the pairs (how test_scoreboard.py tells a pair
where only eager moved, compiled-as-stock, from a regression).
"""

import argparse
import fnmatch
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def ab_parser(prog):
    """scripts/scoreboard.sh's options (before torch is imported: --help needs no torch)."""
    p = argparse.ArgumentParser(
        prog=prog, description="The semantics scoreboard: the whole catalogue of cases (test/semantics/cases.py) "
        "in every mode, on stock torch and with the stack overlaid, side by side; prints each pair (case, mode) "
        "that differs from eager on either side, then how many the stack fixes and breaks.")
    p.add_argument("--json", metavar="OUT", help="also write both sides' results to OUT")
    p.add_argument("--write-known", metavar="DIR",
                   help="write DIR/known_failures_stock.txt and DIR/known_failures_stack.txt from this run "
                        "(e.g. test/semantics, the lists test_scoreboard.py checks)")
    return p


if __name__ == "__main__" and os.environ.get("NDV_ENTRY") and {"-h", "--help"} & set(sys.argv[1:]):
    ab_parser(os.environ["NDV_ENTRY"]).parse_args()

import torch  # noqa: E402
from cases import CASES  # noqa: E402
from harness import MODES, compiled_record, diff_records, modes_for, run_case  # noqa: E402
from ndvstack.run import private_inductor_env  # noqa: E402

BY_NAME = {c.name: c for c in CASES}
HERE = os.path.dirname(os.path.abspath(__file__))
STACK_SH = os.path.join(HERE, "..", "..", "scripts", "stack.sh")
SIDES = ("stock", "stack")


# Between the pair and each of its differences in a known-failures file; no difference
# contains it (harness.diff_records keeps separators out of error texts).
SEP = " | "


# The tag of a pair that agreed on stock and differs with the stack only because eager moved:
# its compiled code behaves exactly as on stock (test_scoreboard.py compares both sides' records).
AS_STOCK = "compiled-as-stock"


class Known(NamedTuple):
    issue: str
    diffs: tuple  # the differences the harness measures for the pair, in its order
    as_stock: bool = False  # tagged AS_STOCK


def load_known(path):
    """{(case, mode): Known} from a known-failures file: one pair a line,
    `<case> <mode> <issue-N> [compiled-as-stock] | <difference> | <difference> ...`; `#` starts
    a comment line."""
    known = {}
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            head, *diffs = line.split(SEP)
            fields = head.split()
            if len(fields) not in (3, 4) or fields[3:] not in ([], [AS_STOCK]) or not diffs:
                raise ValueError(f"{path}:{number}: expected `<case> <mode> <issue-N> [{AS_STOCK}]"
                                 f"{SEP}<difference>...`")
            known[(fields[0], fields[1])] = Known(fields[2], tuple(diffs), len(fields) == 4)
    return known


def format_known(case, mode, issue, diffs, as_stock=False):
    return SEP.join([f"{case} {mode} {issue}" + (f" {AS_STOCK}" if as_stock else ""), *diffs])


def side_command(side, *command):
    """COMMAND run on SIDE: "stock" (the unmodified torch) or "stack" (the overlay)."""
    return [STACK_SH, "run", *(["--stock"] if side == "stock" else []), "--", *command]


def _run_on_side(side, args, inductor_cache=None):
    """This script with ARGS on SIDE in a subprocess; raises if it fails."""
    command = side_command(side, "python", os.path.abspath(__file__), *args)
    env = dict(os.environ)
    if inductor_cache:  # compile caches per side: stock artefacts never serve the stack
        env.update(private_inductor_env(os.path.join(inductor_cache, side)))
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"scoreboard on {side} failed ({result.returncode}):\n{result.stderr[-3000:]}")


def run_side(side, json_out, shard=None, inductor_cache=None):
    """Runs the catalogue (or one shard of it) on SIDE ("stock" or "stack", i.e. with the
    overlay) in a subprocess; returns {(case, mode): diffs}."""
    _run_on_side(side, ["--json", json_out, *(["--shard", shard] if shard else [])], inductor_cache)
    with open(json_out) as f:
        return {(r["case"], r["mode"]): r["diffs"] for r in json.load(f)}


def compiled_records(side, pairs, out, inductor_cache):
    """The compiled side's records (harness.observe) of PAIRS [(case, mode)] on SIDE, run in a
    subprocess with a compile cache of its own under INDUCTOR_CACHE; {(case, mode): record}."""
    _run_on_side(side, ["--records", out, "--pairs", *(f"{c}:{m}" for c, m in pairs)], inductor_cache)
    return torch.load(out, weights_only=False)


def compiled_as_stock(pairs, tmp):
    """{pair: how its compiled record differs between stock and the stack} for PAIRS, both sides
    run at once; [] for a pair whose compiled code behaves exactly as on stock."""
    with ThreadPoolExecutor(2) as pool:
        futures = {side: pool.submit(compiled_records, side, pairs, os.path.join(tmp, f"{side}.records"), tmp)
                   for side in SIDES}
        stock, stack = (futures[side].result() for side in SIDES)
    return {pair: [d.replace(": eager=", ": stock=").replace(" compiled=", " stack=")
                   for d in diff_records(stock[pair], stack[pair])] for pair in pairs}


def ab(json_out=None, write_known=None):
    """Both sides at once; prints every pair that differs on either."""
    with tempfile.TemporaryDirectory(prefix="ndv-scoreboard-") as tmp:
        with ThreadPoolExecutor(2) as pool:
            futures = {side: pool.submit(run_side, side, os.path.join(tmp, f"{side}.json"),
                                         inductor_cache=tmp) for side in SIDES}
            results = {side: future.result() for side, future in futures.items()}
    stock, stack = results["stock"], results["stack"]
    owners = {pair: k.issue for pair, k in load_known(os.path.join(HERE, "known_failures_stock.txt")).items()}
    owners.update({pair: k.issue for pair, k in load_known(os.path.join(HERE, "known_failures_stack.txt")).items()})
    print("%-34s %-18s %-8s %-8s %s" % ("case", "mode", "stock", "stack", "owner"))
    for pair in sorted(set(stock) | set(stack)):
        if stock.get(pair) or stack.get(pair):
            print("%-34s %-18s %-8s %-8s %s" % (*pair, "DIFFERS" if stock.get(pair) else "ok",
                                              "DIFFERS" if stack.get(pair) else "ok", owners.get(pair, "?")))
    fixed = sum(1 for p in stock if stock[p] and not stack.get(p))
    newly = [p for p in stack if stack[p] and not stock.get(p)]
    with tempfile.TemporaryDirectory(prefix="ndv-scoreboard-") as tmp:
        moved = compiled_as_stock(newly, tmp) if newly else {}
    as_stock = {p for p, d in moved.items() if not d}
    for p in sorted(set(newly) - as_stock):
        print("BROKEN %s %s: its compiled code changed: %s" % (*p, "; ".join(moved[p])))
    print("%d pairs: %d differ on stock, %d with the stack; the stack fixes %d and breaks %d"
          % (len(stock), sum(map(bool, stock.values())), sum(map(bool, stack.values())), fixed,
             len(newly) - len(as_stock)))
    print("  agreeing on stock, differing with the stack where only eager moved (compiled code as on "
          "stock, %s): %d" % (AS_STOCK, len(as_stock)))
    for side in SIDES:
        counts = class_counts(results[side])
        print("  differing pairs on %s by class: %s" % (side, ", ".join("%s %d" % (c, counts[c]) for c in PAIR_CLASSES)))
    if json_out:
        with open(json_out, "w") as f:
            json.dump({side: [{"case": c, "mode": m, "diffs": d} for (c, m), d in r.items()]
                       for side, r in results.items()}, f, indent=1)
    if write_known:
        for side in SIDES:
            write_known_file(os.path.join(write_known, f"known_failures_{side}.txt"), results[side],
                             HEADERS[side], torch.__version__, as_stock if side == "stack" else ())


# How a differing pair differs, the worst of its differences first: a gradient observation that
# differs while neither side raises; an error eager raises that compiled code does not; one
# compiled code raises that eager does not; anything else (requires_grad, grad_fn, views, ...).
PAIR_CLASSES = ("wrong gradient", "missed error", "spurious error", "metadata only")


def _sides(diff):
    """(eager's, compiled's) value of one difference `<observation>: eager=<a> compiled=<b>`."""
    _, _, rest = diff.partition(": eager=")
    eager, _, compiled = rest.partition(" compiled=")
    return eager, compiled


def pair_class(diffs):
    def is_gradient(d):
        return ("grads" in d or "then grad(" in d) and "raise" not in d

    if any(is_gradient(d) for d in diffs):
        return "wrong gradient"
    sides = [_sides(d) for d in diffs if " compiled=" in d]
    if any(e.startswith("raise") and not c.startswith("raise") for e, c in sides):
        return "missed error"
    if any(c.startswith("raise") and not e.startswith("raise") for e, c in sides):
        return "spurious error"
    return "metadata only"


def class_counts(results):
    """{class: number of differing pairs} of RESULTS ({(case, mode): diffs})."""
    counts = dict.fromkeys(PAIR_CLASSES, 0)
    for diffs in results.values():
        if diffs:
            counts[pair_class(diffs)] += 1
    return counts


def write_known_file(path, results, header, torch_version, as_stock=()):
    """Every differing pair of RESULTS ({(case, mode): diffs}), in catalogue order; those of
    AS_STOCK tagged so."""
    with open(path, "w") as f:
        f.write(header)
        if torch_version:
            f.write("# Measured with torch %s.\n" % torch_version)
        for (c, m), d in sorted(results.items(), key=lambda item: _ORDER[item[0]]):
            if d:
                f.write(format_known(c, m, owner_for(c, m, results), d, (c, m) in as_stock) + "\n")


def owner_for(case, mode, results):
    """Attribute a failure to the lowest layer that shows it.

    eager_abs -> issue-4; compile_eager and dynamo_graph (dynamo only) -> issue-7;
    aot_function -> issue-5; aot_eager -> issue-7 if compile_eager fails
    too, else issue-5; inductor -> whatever aot_eager got if it fails too,
    else issue-6.
    """
    mode = mode.removesuffix("_fullgraph")  # attributed as its static mode
    dyn = "_dyn" if mode.endswith("_dyn") else ""
    base = mode[: -len(dyn)] if dyn else mode
    c = BY_NAME[case]
    if c.issue_by_mode and base in c.issue_by_mode:
        return c.issue_by_mode[base]
    if base == "eager_abs":
        return "issue-4"
    if base in ("compile_eager", "dynamo_graph"):
        return "issue-7"
    if base == "aot_function":
        return "issue-5"
    if base == "aot_eager":
        if results.get((case, "compile_eager" + dyn)):
            return "issue-7"
        return "issue-5"
    if base == "inductor":
        if results.get((case, "aot_eager" + dyn)):
            return owner_for(case, "aot_eager" + dyn, results)
        return "issue-6"
    raise ValueError(mode)


def ab_main(prog, argv=None):
    """scripts/scoreboard.sh: the A/B run, its options only."""
    a = ab_parser(prog).parse_args(argv)
    return ab(a.json, a.write_known)


def main(argv=None):
    entry = os.environ.pop("NDV_ENTRY", None)  # scoreboard.sh; popped: not for the sides we run
    if entry:
        return ab_main(entry, argv)
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default="*", metavar="PATTERN",
                   help="only the cases whose name matches (fnmatch, e.g. 'nograd_*'; default: all)")
    p.add_argument("--modes", nargs="*", default=MODES, metavar="MODE", help="only these modes (default: all)")
    p.add_argument("--json", metavar="OUT", help="also write the results to OUT")
    p.add_argument("--write-known", metavar="FILE",
                   help="write every differing pair to FILE, in known_failures_stock.txt's format "
                        "(with --ab: a folder, both lists)")
    p.add_argument("--all", action="store_true", help="also print agreeing pairs")
    p.add_argument("--shard", help="K/N: only the cases whose index is K modulo N")
    p.add_argument("--ab", action="store_true", help="stock and the stack side by side")
    p.add_argument("--pairs", nargs="+", metavar="CASE:MODE", help="with --records: these pairs")
    p.add_argument("--records", metavar="OUT",
                   help="only write the compiled records (harness.observe) of --pairs to OUT (torch.save)")
    a = p.parse_args(argv)
    if a.ab:
        return ab(a.json, a.write_known)
    if a.records:
        pairs = [tuple(pair.split(":")) for pair in a.pairs or ()]
        unknown = [f"{c}:{m}" for c, m in pairs if c not in BY_NAME or m not in modes_for(BY_NAME[c])]
        if not pairs or unknown:
            p.error("--records needs --pairs CASE:MODE ... of the catalogue" + (f": not {unknown}" if unknown else ""))
        torch.save({(c, m): compiled_record(BY_NAME[c], m) for c, m in pairs}, a.records)
        return 0
    shard, shards = map(int, a.shard.split("/")) if a.shard else (0, 1)

    results = {}
    t0 = time.time()
    for index, c in enumerate(CASES):
        if not fnmatch.fnmatch(c.name, a.cases) or index % shards != shard:
            continue
        for m in modes_for(c):
            if m not in a.modes:
                continue
            t = time.time()
            d = run_case(c, m)
            results[(c.name, m)] = d
            if d or a.all:
                print("%-32s %-18s %5.1fs %s" % (c.name, m, time.time() - t, "; ".join(d) or "ok"), flush=True)
    n_bad = sum(1 for d in results.values() if d)
    print("%d pairs, %d differ, %.0fs" % (len(results), n_bad, time.time() - t0))

    if a.json:
        with open(a.json, "w") as f:
            json.dump([{"case": c, "mode": m, "diffs": d} for (c, m), d in results.items()], f, indent=1)
    if a.write_known:
        write_known_file(a.write_known, results, HEADERS["stock"], torch.__version__)


_FORMAT = """\
# Format: one pair per line, `<case> <mode> <issue-N> [compiled-as-stock] | <difference> ...`,
# each difference one observation of harness.diff_records (`<observation>: <how>`, e.g.
# `out[1].is_leaf: eager=True compiled=False`; an error as `raise <class>`, harness._err).
# test_scoreboard.py asserts that exactly these pairs differ, each by exactly these
# differences, and that every other pair agrees.
# The issue is the lowest layer showing the bug (see scoreboard.owner_for):
# 4 eager Function views, 5 AOTAutograd, 6 inductor, 7 dynamo Function.
"""
HEADERS = {
    "stock": """\
# Known (case, mode) pairs that differ on STOCK torch (the base's release wheel), measured by
# `scripts/scoreboard.sh --write-known test/semantics` (both lists at once).
""" + _FORMAT,
    "stack": """\
# Pairs that still differ WITH THE STACK overlaid (scripts/stack.sh run): each is an
# expected failure, owned by the open issue whose fix has not landed; when a fix lands,
# its pairs leave this list. Only pairs of known_failures_stock.txt may be listed, and pairs
# tagged compiled-as-stock (after the issue): they agree on stock and differ with the stack
# only because eager moved, their compiled code behaving exactly as on stock (test_scoreboard.py
# compares both sides' records). Any other pair that agrees on stock and differs with the stack
# is a regression. Measured with the whole stack (patches/series) by
# `scripts/scoreboard.sh --write-known test/semantics`.
""" + _FORMAT,
}
_ORDER = {(c.name, m): i for i, (c, m) in enumerate((c, m) for c in CASES for m in MODES)}

if __name__ == "__main__":
    main()
