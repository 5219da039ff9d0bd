"""Benchmark: apply + export of a five-patch synthetic stack on the fake pytorch tree.

Prints min/median/max wall time of each step over --repeat runs (target: apply +
export under 3 s on a 2-core machine). Not a test: run it, read the figures.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "test"))

from fake_pytorch import environment_for_git, fake_pytorch_tree, five_patch_stack, stack_from_commits  # noqa: E402
from ndvstack import apply, export  # noqa: E402
from ndvstack.stack import Stack  # noqa: E402


def one_run(tmp: Path) -> tuple[float, float]:
    fake = fake_pytorch_tree(tmp / "pytorch")
    five_patch_stack(fake)
    stack_from_commits(fake, tmp / "patches", head="work")
    checkout = tmp / "checkout"
    subprocess.run(["git", "clone", "--quiet", str(fake.path), str(checkout)], check=True)
    stack = Stack(tmp / "patches")
    start = time.perf_counter()
    apply.main(stack, checkout, progress=lambda _: None)
    applied = time.perf_counter()
    export.main(stack, checkout, progress=lambda _: None)
    return applied - start, time.perf_counter() - applied


def main() -> None:
    parser = argparse.ArgumentParser(prog=f"bench.sh {Path(__file__).stem}", description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=10, help="runs of each step (default: %(default)s)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ndv-bench-") as home:
        os.environ.update(environment_for_git(Path(home)))
        runs = []
        for _ in range(args.repeat):
            with tempfile.TemporaryDirectory(prefix="ndv-bench-run-") as tmp:
                runs.append(one_run(Path(tmp)))
    for label, values in (("apply", [a for a, _ in runs]), ("export", [e for _, e in runs]),
                          ("apply+export", [a + e for a, e in runs])):
        print(f"{label:13s} min {min(values):.3f}s  median {statistics.median(values):.3f}s  "
              f"max {max(values):.3f}s  (n={len(values)})")


if __name__ == "__main__":
    main()
