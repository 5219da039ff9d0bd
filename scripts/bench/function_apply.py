"""Benchmark: what torch.autograd.Function.apply costs with the stack, against stock torch.

Two figures, from one interleaved run:

1. A Function that marks nothing (no output passed to ctx.mark_non_differentiable) must
   cost what it costs on stock: the ratio patched / stock of its per-call time (target
   <= 1.03). Cases `unmarked 1` (one output, x * 2) and `unmarked 4` (a base, two
   unmarked views of it and a non-view).
2. Marking a view may cost at most 1.5 times one Tensor.detach() of it (the floor: the fix
   returns a new alias of each marked view). Per marked view: (patched - stock per-call
   time) / k for a Function returning a base and k marked views of it (`marked views k`),
   divided by the cost of one detach() measured in the same workers, in two ways:
   - in context (the unit of the target): what a caller's `out[1].detach()` of such a
     Function's fresh view output adds to the call, the workaround on stock torch: the
     time of `apply(x)[1].detach()` minus that of `apply(x)` for the same Function with
     nothing marked (`unmarked views 1`; both sides run the same code there);
   - isolated: `v.detach()` of one long-lived view in a tight loop, a lower bound: the
     alias it makes is freed at once and its memory reused by the next call.

A control, `marked non-view 1` (a marked output that is not a view: stock already
detaches it in place, the stack does not change it), shows the noise floor of 1.

One run measures both sides: this script starts itself as a worker (--worker) in two
subprocesses per round, on stock torch through `stack.sh run --stock -- python` and on
the stack through `stack.sh run -- python`, for several rounds, alternating which side
goes first, so that drift of the machine (clock, caches, other load) hits both sides
alike. Each worker warms up, then times batches of calls of each case in turn with
time.perf_counter (grad mode on, the input requiring grad, one thread, gc off) and
prints its samples as one line of JSON. Nothing outside the standard library and torch.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

STACK_SH = Path(__file__).resolve().parents[1] / "stack.sh"
DEFAULT_MARKED = (1, 4)
UNMARKED = ("unmarked 1", "unmarked 4")
CONTROL = "marked non-view 1"
DETACH = "Tensor.detach() of a view"
UNMARKED_VIEW = "unmarked views 1"
CALLER_DETACH = "unmarked views 1, caller detaches"

EPILOG = """\
Each worker also checks the semantics it ran with (is a marked view returned with
requires_grad=False?) and the parent prints it: a "patched" side that reports the bug
is not measuring the fix (e.g. patches/ is empty and no shim was laid over torch).

Exit status: 0 success, 1 a worker failed, 2 bad usage.
"""


def marked_case(k: int) -> str:
    return f"marked views {k}"


# ---------------------------------------------------------------------------------
# worker: runs inside one torch (stock or patched) and prints JSON


def _functions(marked_counts: list[int]) -> dict:
    """case name -> a Function's apply."""
    import torch

    class Unmarked1(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    class Unmarked4(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x * 2
            return y, y.view(-1), y[0], y * 3

        @staticmethod
        def backward(ctx, gy, gv, g0, g3):
            return gy * 2

    class MarkedNonView(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x * 2
            z = y * 3
            ctx.mark_non_differentiable(z)
            return y, z

        @staticmethod
        def backward(ctx, gy, gz):
            return gy * 2

    def marked_views(k: int, mark: bool = True):
        class MarkedViews(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                y = x * 2
                views = [y[i % y.shape[0]] for i in range(k)]
                if mark:
                    ctx.mark_non_differentiable(*views)
                return (y, *views)

            @staticmethod
            def backward(ctx, gy, *grads):
                return gy * 2

        return MarkedViews

    functions = {"unmarked 1": Unmarked1.apply, "unmarked 4": Unmarked4.apply,
                 CONTROL: MarkedNonView.apply, UNMARKED_VIEW: marked_views(1, mark=False).apply}
    for k in marked_counts:
        functions[marked_case(k)] = marked_views(k).apply
    return functions


def _fixed_semantics() -> bool:
    """Whether this torch returns a marked view with requires_grad=False."""
    import torch

    apply = _functions([1])[marked_case(1)]
    return not apply(torch.randn(4, 4, requires_grad=True))[1].requires_grad


def _time(fn, args: argparse.Namespace) -> list[float]:
    import time

    for _ in range(args.warmup):
        fn()
    samples = []
    for _ in range(args.samples):
        start = time.perf_counter()
        for _ in range(args.calls):
            fn()
        samples.append((time.perf_counter() - start) / args.calls * 1e6)
    return samples


def worker(args: argparse.Namespace) -> None:
    import gc

    import torch

    torch.set_num_threads(1)
    x = torch.randn(16, 8, requires_grad=True)
    view = (x * 2)[0]  # a view of a tensor that requires grad, as a marked view is
    functions = _functions(args.marked)
    cases = {name: (lambda apply=apply: apply(x)) for name, apply in functions.items()}
    cases[DETACH] = view.detach
    unmarked_view = functions[UNMARKED_VIEW]
    cases[CALLER_DETACH] = lambda: unmarked_view(x)[1].detach()
    results = {}
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for name, fn in cases.items():
            results[name] = _time(fn, args)
    finally:
        if gc_was_enabled:
            gc.enable()
    print(json.dumps({
        "torch": torch.__version__,
        "torch_file": torch.__file__,
        "python": sys.executable,
        "overlay": os.environ.get("NDV_OVERLAY"),
        "fixed": _fixed_semantics(),
        "us_per_call": results,
    }))


# ---------------------------------------------------------------------------------
# parent: alternates stock and patched workers, prints the two figures


def _worker_args(args: argparse.Namespace) -> list[str]:
    return [
        str(Path(__file__).resolve()), "--worker",
        "--marked", ",".join(map(str, args.marked)),
        "--warmup", str(args.warmup), "--samples", str(args.samples), "--calls", str(args.calls),
    ]


def _commands(args: argparse.Namespace) -> dict[str, list[str]]:
    return {"stock": [str(STACK_SH), "run", "--stock", "--", "python", *_worker_args(args)],
            "patched": [str(STACK_SH), "run", "--", "python", *_worker_args(args)]}


def _run_worker(side: str, command: list[str]) -> dict:
    proc = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"error: the {side} worker failed (exit {proc.returncode}): {' '.join(command)}")
    return json.loads(lines[-1])


def _range(values: list[float], fmt: str = ".3f") -> str:
    return f"{min(values):{fmt}}-{max(values):{fmt}}"


def parent(args: argparse.Namespace) -> None:
    commands = _commands(args)
    rounds: list[dict[str, dict[str, float]]] = []  # per round: side -> case -> median µs
    samples: dict[str, dict[str, list[float]]] = {side: {} for side in commands}
    info = {}
    for r in range(args.rounds):
        order = ["stock", "patched"] if r % 2 == 0 else ["patched", "stock"]
        medians = {}
        for side in order:
            result = _run_worker(side, commands[side])
            info[side] = result
            medians[side] = {name: statistics.median(v) for name, v in result["us_per_call"].items()}
            for name, values in result["us_per_call"].items():
                samples[side].setdefault(name, []).extend(values)
        rounds.append(medians)
        print(f"round {r + 1}/{args.rounds} done ({' then '.join(order)})", file=sys.stderr)

    for side in commands:
        i = info[side]
        semantics = "fixed (marked view: requires_grad=False)" if i["fixed"] else \
            "bug (marked view: requires_grad=True)"
        print(f"{side:8s} torch {i['torch']} (NDV_OVERLAY={i['overlay']}): {semantics}\n"
              f"         imported from {i['torch_file']}")
    if info["stock"]["torch"] != info["patched"]["torch"]:
        print(f"warning: the two sides run different torch versions: {info['stock']['torch']} vs "
              f"{info['patched']['torch']}")
    if info["stock"]["fixed"]:
        print("warning: the stock side already has the fix: is LD_PRELOAD or PYTHONPATH set in this shell?")
    if not info["patched"]["fixed"]:
        print("warning: the patched side does not have the fix, so both sides run the same code")
    print(f"{args.rounds} rounds x {args.samples} samples x {args.calls} calls per case and side "
          f"(warmup {args.warmup}), interleaved; medians over all samples, ranges over the "
          f"rounds' medians")

    def median(side: str, name: str) -> float:
        return statistics.median(samples[side][name])

    print()
    print("1. Function.apply, patched / stock (target <= 1.03 for a Function that marks nothing)")
    header = f"{'case':>20}  {'stock µs':>9}  {'patched µs':>10}  {'ratio':>6}  {'range (rounds)':>14}"
    print(header)
    print("-" * len(header))
    for name in (*UNMARKED, CONTROL):
        stock, patched = median("stock", name), median("patched", name)
        per_round = [m["patched"][name] / m["stock"][name] for m in rounds]
        print(f"{name:>20}  {stock:>9.2f}  {patched:>10.2f}  {patched / stock:>6.3f}  {_range(per_round):>14}")

    def both(name: str, side_medians=None) -> float:
        if side_medians is None:
            return statistics.median(samples["stock"][name] + samples["patched"][name])
        return statistics.median([side_medians["stock"][name], side_medians["patched"][name]])

    def in_context(side_medians=None) -> float:
        return both(CALLER_DETACH, side_medians) - both(UNMARKED_VIEW, side_medians)

    detach, isolated = in_context(), both(DETACH)
    print()
    print("2. Cost of marking a view, per marked view, in units of one detach() (target <= 1.5 in context)")
    print(f"   one detach() in context: {CALLER_DETACH!r} minus {UNMARKED_VIEW!r}: "
          f"{both(CALLER_DETACH):.2f} - {both(UNMARKED_VIEW):.2f} = {detach:.3f} µs")
    print(f"   one detach() isolated: {DETACH} in a tight loop: {isolated:.3f} µs")
    header = f"{'case':>20}  {'stock µs':>9}  {'patched µs':>10}  {'extra µs/view':>13}  " \
             f"{'x detach':>8}  {'range (rounds)':>14}  {'x isolated':>10}"
    print(header)
    print("-" * len(header))
    for k in args.marked:
        name = marked_case(k)
        stock, patched = median("stock", name), median("patched", name)
        extra = (patched - stock) / k
        per_round = [(m["patched"][name] - m["stock"][name]) / k / in_context(m) for m in rounds]
        print(f"{name:>20}  {stock:>9.2f}  {patched:>10.2f}  {extra:>13.3f}  {extra / detach:>8.2f}  "
              f"{_range(per_round, '.2f'):>14}  {extra / isolated:>10.2f}")


def _counts(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("counts must be integers >= 1")
    return values


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(
        prog=f"bench.sh {Path(__file__).stem}", description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=_positive, default=6,
                        help="stock/patched worker pairs, alternating order (default: 6)")
    parser.add_argument("--samples", type=_positive, default=25,
                        help="timed batches per case per worker (default: 25)")
    parser.add_argument("--calls", type=_positive, default=200,
                        help="calls per timed batch (default: 200)")
    parser.add_argument("--warmup", type=int, default=500,
                        help="untimed calls before timing each case (default: 500)")
    parser.add_argument("--marked", type=_counts, default=list(DEFAULT_MARKED),
                        help="comma-separated numbers of marked views for figure 2 (default: 1,4)")
    parser.add_argument("--worker", action="store_true",
                        help="internal: time in this process and print JSON (what the parent runs)")
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
