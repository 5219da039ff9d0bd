"""Benchmark: per-call time of torch.autograd.Function.apply, stock torch vs the stack.

Times Function.apply (forward only, grad mode on, input requiring grad) for Functions
with 1, 4 and 16 outputs, where some outputs are views and some are marked with
ctx.mark_non_differentiable(), and prints the stock and patched medians and their
ratio (patched / stock). Not a test: run it, read the figures.

One run measures both sides: this script starts itself as a worker (--worker) in two
subprocesses per round, on stock torch through `stack.sh run --stock -- python` and on
the stack through `stack.sh run -- python`, for several rounds, alternating which side
goes first, so that drift of the machine (clock, caches, other load) hits both sides
alike. Each worker warms up, then times batches of calls with time.perf_counter and
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
DEFAULT_OUTPUTS = (1, 4, 16)

EPILOG = """\
Output kinds: with 1 output, the output is a marked view of the input (x.view(-1)).
With N > 1 outputs, output 0 is the differentiable base y = x * 2 and the others cycle
through: a marked view of y, an unmarked view of y, a marked non-view (y * 3).

Each worker also checks the semantics it ran with (is a marked view returned with
requires_grad=False?) and the parent prints it: a "patched" side that reports the bug
is not measuring the fix (e.g. patches/ is empty and no shim was laid over torch).

Exit status: 0 success, 1 a worker failed, 2 bad usage.
"""


# ---------------------------------------------------------------------------------
# worker: runs inside one torch (stock or patched) and prints JSON


def _kinds(n_outputs: int) -> list[str]:
    if n_outputs == 1:
        return ["marked view of input"]
    cycle = ["marked view", "view", "marked non-view"]
    return ["base"] + [cycle[i % len(cycle)] for i in range(n_outputs - 1)]


def _make_function(n_outputs: int):
    import torch

    kinds = _kinds(n_outputs)

    class Bench(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            if n_outputs == 1:
                v = x.view(-1)
                ctx.mark_non_differentiable(v)
                return v
            y = x * 2
            outs, marked = [y], []
            for i, kind in enumerate(kinds[1:]):
                if kind == "marked view":
                    out = y[i % y.shape[0]]
                    marked.append(out)
                elif kind == "view":
                    out = y.view(-1)
                else:
                    out = y * 3
                    marked.append(out)
                outs.append(out)
            ctx.mark_non_differentiable(*marked)
            return tuple(outs)

        @staticmethod
        def backward(ctx, *grads):
            return grads[0] if n_outputs > 1 else None

    return Bench


def _fixed_semantics() -> bool:
    """Whether this torch returns a marked view with requires_grad=False."""
    import torch

    x = torch.randn(4, 4, requires_grad=True)
    out = _make_function(4).apply(x)
    return not out[1].requires_grad


def worker(args: argparse.Namespace) -> None:
    import gc
    import time

    import torch

    torch.set_num_threads(1)
    x = torch.randn(16, 8, requires_grad=True)
    results = {}
    for n in args.outputs:
        apply = _make_function(n).apply
        for _ in range(args.warmup):
            apply(x)
        samples = []
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            for _ in range(args.samples):
                start = time.perf_counter()
                for _ in range(args.calls):
                    apply(x)
                samples.append((time.perf_counter() - start) / args.calls * 1e6)
        finally:
            if gc_was_enabled:
                gc.enable()
        results[str(n)] = samples
    print(json.dumps({
        "torch": torch.__version__,
        "torch_file": torch.__file__,
        "python": sys.executable,
        "overlay": os.environ.get("NDV_OVERLAY"),
        "fixed": _fixed_semantics(),
        "us_per_call": results,
    }))


# ---------------------------------------------------------------------------------
# parent: alternates stock and patched workers, prints the table


def _worker_args(args: argparse.Namespace) -> list[str]:
    return [
        str(Path(__file__).resolve()), "--worker",
        "--outputs", ",".join(map(str, args.outputs)),
        "--warmup", str(args.warmup), "--samples", str(args.samples), "--calls", str(args.calls),
    ]


def _commands(args: argparse.Namespace) -> dict[str, tuple[list[str], dict[str, str]]]:
    env = dict(os.environ)
    stock = ([str(STACK_SH), "run", "--stock", "--", "python", *_worker_args(args)], env)
    patched = ([str(STACK_SH), "run", "--", "python", *_worker_args(args)], env)
    return {"stock": stock, "patched": patched}


def _run_worker(side: str, command: list[str], env: dict[str, str]) -> dict:
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"error: the {side} worker failed (exit {proc.returncode}): {' '.join(command)}")
    return json.loads(lines[-1])


def parent(args: argparse.Namespace) -> None:
    commands = _commands(args)
    samples = {side: {n: [] for n in args.outputs} for side in commands}
    round_medians = {side: {n: [] for n in args.outputs} for side in commands}
    info = {}
    for r in range(args.rounds):
        order = ["stock", "patched"] if r % 2 == 0 else ["patched", "stock"]
        for side in order:
            command, env = commands[side]
            result = _run_worker(side, command, env)
            info[side] = result
            for n in args.outputs:
                values = result["us_per_call"][str(n)]
                samples[side][n].extend(values)
                round_medians[side][n].append(statistics.median(values))
        print(f"round {r + 1}/{args.rounds} done ({' then '.join(order)})", file=sys.stderr)

    for side in commands:
        i = info[side]
        how = f"NDV_OVERLAY={i['overlay']}"
        semantics = "fixed (marked view: requires_grad=False)" if i["fixed"] else \
            "bug (marked view: requires_grad=True)"
        print(f"{side:8s} torch {i['torch']} ({how}): {semantics}\n         imported from {i['torch_file']}")
    if info["stock"]["torch"] != info["patched"]["torch"]:
        print(f"warning: the two sides run different torch versions: {info['stock']['torch']} vs "
              f"{info['patched']['torch']}")
    if info["stock"]["fixed"]:
        print("warning: the stock side already has the fix: is LD_PRELOAD or PYTHONPATH set in this shell?")
    if not info["patched"]["fixed"]:
        print("warning: the patched side does not have the fix, so both sides run the same code")
    print(f"{args.rounds} rounds x {args.samples} samples x {args.calls} calls per side "
          f"(warmup {args.warmup}); medians over all samples")
    print()
    header = f"{'outputs':>7}  {'stock median µs':>15}  {'patched median µs':>17}  {'ratio':>6}  " \
             f"{'ratio range (rounds)':>20}"
    print(header)
    print("-" * len(header))
    for n in args.outputs:
        stock = statistics.median(samples["stock"][n])
        patched = statistics.median(samples["patched"][n])
        per_round = [p / s for p, s in zip(round_medians["patched"][n], round_medians["stock"][n])]
        spread = f"{min(per_round):.3f}-{max(per_round):.3f}"
        print(f"{n:>7}  {stock:>15.2f}  {patched:>17.2f}  {patched / stock:>6.3f}  {spread:>20}")
    print()
    for n in args.outputs:
        kinds = _kinds(n)
        counts = {k: kinds.count(k) for k in dict.fromkeys(kinds)}
        print(f"{n:>3} outputs: " + ", ".join(f"{c} {k}" for k, c in counts.items()))


def _outputs(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError("output counts must be integers >= 1")
    return values


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "),
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=_positive, default=6,
                        help="stock/patched worker pairs, alternating order (default: 6)")
    parser.add_argument("--samples", type=_positive, default=25,
                        help="timed batches per output count per worker (default: 25)")
    parser.add_argument("--calls", type=_positive, default=200,
                        help="Function.apply calls per timed batch (default: 200)")
    parser.add_argument("--warmup", type=int, default=500,
                        help="untimed calls before timing each output count (default: 500)")
    parser.add_argument("--outputs", type=_outputs, default=list(DEFAULT_OUTPUTS),
                        help="comma-separated output counts (default: 1,4,16)")
    parser.add_argument("--worker", action="store_true",
                        help="internal: time in this process and print JSON (what the parent runs)")
    args = parser.parse_args()
    if args.worker:
        worker(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
