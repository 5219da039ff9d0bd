"""Benchmark: the overlay and the patched wheel, stock and overlay side by side.

  cold overlay   apply the Python hunks + compile the shims + lay the tree (empty cache)
  warm overlay   `stack.sh overlay` end to end on a cache hit (what every `run` pays)
  wheel          build.sh's wheel build (release wheel cached, shims cached)
  import torch   `python -c "import torch"`, stock and overlay alternating; median delta

Uses the test-double stack (test/fake_stack.py: one Python hunk, one shim) unless
--real-stack, which uses patches/ and overlay/. Targets: cold <= 30 s,
warm <= 2 s, wheel <= 60 s, import delta <= 50 ms.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "test"))

from fake_pytorch import environment_for_git  # noqa: E402
from fake_stack import double_stack  # noqa: E402
from ndvstack import overlay, wheel  # noqa: E402
from ndvstack.layers import DEFAULT_OVERLAY_SRC  # noqa: E402
from ndvstack.stack import DEFAULT_PATCHES, Stack  # noqa: E402


def timed(fn):
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


def main() -> None:
    parser = argparse.ArgumentParser(prog=f"bench.sh {Path(__file__).stem}", description=__doc__.splitlines()[0])
    parser.add_argument("--real-stack", action="store_true", help="patches/ and overlay/ instead of the test double")
    parser.add_argument("--imports", type=int, default=15, help="import torch runs per side")
    args = parser.parse_args()
    quiet = lambda _: None  # noqa: E731
    with tempfile.TemporaryDirectory(prefix="ndv-bench-") as tmp:
        tmp = Path(tmp)
        os.environ.update(environment_for_git(tmp))
        if args.real_stack:
            stack, src = Stack(DEFAULT_PATCHES), DEFAULT_OVERLAY_SRC
        else:
            stack, src, _ = double_stack(tmp)
        cache = tmp / "cache"
        cold, folder = timed(lambda: overlay.ensure(stack, src, cache=cache, progress=quiet))
        command = [str(ROOT / "scripts/stack.sh"), "--patches", str(stack.dir), "--overlay-src", str(src), "overlay"]
        env = {**os.environ, "NDV_CACHE": str(cache)}
        warm = [timed(lambda: subprocess.run(command, env=env, capture_output=True, check=True))[0]
                for _ in range(5)]
        wheel.release_wheel(stack.base, None, quiet)  # fetched once (the wheelhouse), outside the timing
        built, _ = timed(lambda: wheel.main(stack, tmp / "dist", overlay_src=src, cache=cache, progress=quiet))
        sides = {"stock": {k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
                 "overlay": {**os.environ, "PYTHONPATH": str(folder)}}
        imports = {side: [] for side in sides}
        for _ in range(args.imports):  # alternate, so drift hits both sides alike
            for side, side_env in sides.items():
                imports[side].append(timed(lambda: subprocess.run(
                    [sys.executable, "-c", "import torch"], env=side_env, check=True))[0])
        count = len(stack.series())
    stock, patched = statistics.median(imports["stock"]), statistics.median(imports["overlay"])
    print(f"stack: {'patches/' if args.real_stack else 'test double'} ({count} patches)")
    print(f"cold overlay   {cold:7.2f} s   (target <= 30 s)")
    print(f"warm overlay   {statistics.median(warm):7.2f} s   median of {len(warm)} (target <= 2 s)")
    print(f"wheel build    {built:7.2f} s   (target <= 60 s)")
    print(f"import torch   stock {stock * 1000:.0f} ms, overlay {patched * 1000:.0f} ms, "
          f"delta {(patched - stock) * 1000:+.0f} ms, ratio {patched / stock:.3f}  "
          f"(medians of {args.imports}; target delta <= 50 ms)")


if __name__ == "__main__":
    main()
