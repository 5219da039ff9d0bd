"""Benchmark: per-call time of small compiled functions with view outputs, stock vs the
stack, in one run (issues 5 and 6: patched/stock median ratio <= 1.03 per call), with a
control function that has no view outputs.

Each side runs in its own worker process (`stack.sh run --stock` / `stack.sh run`), the
two alternating for --rounds rounds so that drift hits both alike. A worker compiles each
function with aot_eager and inductor, warms up, then times forward calls and
forward+backward calls. The parent prints stock and patched medians and their ratio.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

STACK_SH = Path(__file__).resolve().parents[1] / "stack.sh"
BACKENDS = ("aot_eager", "inductor")


def functions():
    import torch

    def no_grad_view_of_intermediate(x):
        y = x * 3
        with torch.no_grad():
            v = y.view(-1)
        return y.sum(), v

    def no_grad_view_of_input(x):
        with torch.no_grad():
            v = x.view(-1)
        return x * 2, v

    def views_and_detach(x):
        y = x * 2
        return y[:2], y[2:], y.detach()

    def plain_view(x):
        y = x.sin()
        return y, y.view(-1)

    def no_views(x):  # control: nothing the stack changes
        return x.sin() * 2, x.cos()

    def computed_from_no_grad_view(x):
        y = x * 3
        with torch.no_grad():
            v = y.view(-1)
        return y, v * 2

    class MarkedView(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x * 2
            v = y.view(-1)
            ctx.mark_non_differentiable(v)
            return y, v

        @staticmethod
        def backward(ctx, gy, gv):
            return gy * 2

    def function_marked_view(x):
        return MarkedView.apply(x)

    def exp_and_detached_view(x):
        y = x.exp()
        return y, y.view(-1).detach()

    def unbind_of_intermediate(x):
        return (x * 2).unbind(0)

    def unbind_input(x):
        return x.unbind(0)

    return [no_views, no_grad_view_of_intermediate, no_grad_view_of_input, computed_from_no_grad_view,
            views_and_detach, plain_view, function_marked_view, exp_and_detached_view, unbind_of_intermediate,
            unbind_input]


def worker(args) -> None:
    import torch

    torch.manual_seed(0)
    results = {}
    for backend in BACKENDS:
        for fn in functions():
            torch._dynamo.reset()
            compiled = torch.compile(fn, backend=backend)
            x = torch.randn(4, 3, requires_grad=True)

            def forward():
                compiled(x)

            def forward_backward():
                outs = compiled(x)
                # Through every output with history (stock inductor loses some: issue 6).
                losses = [o.sum() for o in outs if o.requires_grad and o.grad_fn is not None]
                if losses:
                    sum(losses).backward()

            for label, step in (("fwd", forward), ("fwd+bwd", forward_backward)):
                for _ in range(args.warmup):
                    step()
                samples = []
                for _ in range(args.samples):
                    start = time.perf_counter()
                    for _ in range(args.calls):
                        step()
                    samples.append((time.perf_counter() - start) / args.calls * 1e6)
                results[f"{backend} {fn.__name__} {label}"] = samples
    print(json.dumps(results))


def parent(args) -> None:
    command = [str(STACK_SH), "run", "--", "python", str(Path(__file__).resolve()), "--worker",
               "--warmup", str(args.warmup), "--samples", str(args.samples), "--calls", str(args.calls)]
    sides = {"stock": command[:2] + ["--stock"] + command[2:], "patched": command}
    samples: dict = {side: {} for side in sides}
    for round_number in range(args.rounds):
        order = list(sides) if round_number % 2 == 0 else list(reversed(sides))
        for side in order:
            result = subprocess.run(sides[side], capture_output=True, text=True)
            lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
            if result.returncode != 0 or not lines:
                sys.stderr.write(result.stderr[-3000:])
                raise SystemExit(f"error: the {side} worker failed (exit {result.returncode})")
            for key, values in json.loads(lines[-1]).items():
                samples[side].setdefault(key, []).extend(values)
        print(f"round {round_number + 1}/{args.rounds} done", file=sys.stderr)
    print(f"{'case':58s} {'stock µs':>9s} {'patched µs':>11s} {'ratio':>6s}")
    for key in samples["stock"]:
        stock, patched = statistics.median(samples["stock"][key]), statistics.median(samples["patched"][key])
        print(f"{key:58s} {stock:9.1f} {patched:11.1f} {patched / stock:6.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    worker(args) if args.worker else parent(args)


if __name__ == "__main__":
    main()
