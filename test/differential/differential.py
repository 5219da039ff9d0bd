"""The differential corpus: every program on stock torch and with the stack, every observable
compared, each difference classified (compare.py); a difference no patch's rule covers fails.

  ./scripts/differential.sh [--quick] [--prefix K | --series-at REV] [--jobs N] [--json OUT]
  ./scripts/differential.sh --bodies A:B [--prefix K]  # the programs of bodies A..B-1 (a new axis)
  ./scripts/differential.sh --id ID [--id ID ...]      # these programs only, every difference shown
  ./scripts/differential.sh --show ID                  # a program's source, caller and runner

Each side runs in fresh processes of its own (N per side, sharded), with the overlay of the
stack under test (or none), a private inductor cache and TMPDIR. Stock's records depend only on
the corpus's code and the installed torch, so they are kept in the cache (~/.cache/ndvstack/
differential) and reused, unless --no-cache.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import compare  # noqa: E402
import programs as P  # noqa: E402
import rules  # noqa: E402
from ndvstack import each_prefix, run  # noqa: E402
from ndvstack.errors import BadInput  # noqa: E402
from ndvstack.layers import DEFAULT_OVERLAY_SRC  # noqa: E402
from ndvstack.overlay import default_cache  # noqa: E402
from ndvstack.stack import DEFAULT_PATCHES, REPO_ROOT, Stack  # noqa: E402

CORPUS_FILES = ("programs.py", "observe.py")  # what a side's processes run, copied for the run
SIDES = ("stock", "stack")


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# The stack under test
# ---------------------------------------------------------------------------------------------


def stack_under_test(prefix: int | None, series_at: str | None, tmp: Path) -> tuple[Stack, Path]:
    """(the stack, its overlay source): patches/, its first PREFIX patches, or patches/ and
    overlay/ as they were at the git revision SERIES_AT."""
    stack, overlay_src = Stack(DEFAULT_PATCHES), DEFAULT_OVERLAY_SRC
    if series_at:
        folder = tmp / "series-at"
        folder.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO_ROOT), "archive", series_at, "patches", "overlay"],
                                 capture_output=True)
        if archive.returncode != 0:
            raise BadInput(f"--series-at {series_at}: not a revision of this repository with patches/ "
                           f"({archive.stderr.decode().strip().splitlines()[-1:]})")
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive.stdout, check=True)
        stack, overlay_src = Stack(folder / "patches"), folder / "overlay"
    if prefix is not None:
        names = stack.series()
        if not 0 <= prefix <= len(names):
            raise BadInput(f"--prefix {prefix}: the stack has {len(names)} patches")
        stack, overlay_src = each_prefix.prefix(stack, prefix, overlay_src, default_cache())
    return stack, overlay_src


# ---------------------------------------------------------------------------------------------
# Running a side
# ---------------------------------------------------------------------------------------------


def stock_key(programs: list) -> str:
    """What stock's records depend on: the programs as generated (so a change to programs.py that
    generates the same programs keeps them), the observer's code, the torch installed."""
    import importlib.metadata

    digest = hashlib.sha256((HERE / "observe.py").read_bytes())
    for program in programs:
        digest.update(repr(program).encode())
        digest.update(P.render(program.body).encode())
    digest.update(importlib.metadata.version("torch").encode())
    return digest.hexdigest()[:24]


class Side:
    def __init__(self, name: str, env: dict, folder: Path, code: Path, jobs: int, args: list[str], total: int):
        self.name, self.env, self.folder, self.jobs, self.args, self.total = name, env, folder, jobs, args, total
        self.code = code
        self.folder.mkdir(parents=True, exist_ok=True)
        self.env = {**env, **run.private_inductor_env(folder / "inductor")}
        self.procs: dict[int, subprocess.Popen] = {}
        self.restarts: dict[int, int] = {}

    def out(self, shard: int) -> Path:
        return self.folder / f"shard-{shard}.jsonl"

    def done(self) -> int:
        return sum(_lines(self.out(k)) for k in range(self.jobs))

    def start(self, shard: int, skip: int = 0) -> None:
        command = [sys.executable, str(self.code / "observe.py"), *self.args, "--shard", f"{shard}/{self.jobs}",
                   "--start", str(skip), "--out", str(self.out(shard))]
        with open(self.folder / f"shard-{shard}.log", "a") as err:
            self.procs[shard] = subprocess.Popen(command, env=self.env, stdout=subprocess.DEVNULL, stderr=err)

    def poll(self) -> bool:
        """Restarts a shard whose process died on a program (recorded as a crash); True when all
        shards are done."""
        for shard, proc in list(self.procs.items()):
            code = proc.poll()
            if code is None:
                continue
            del self.procs[shard]
            if code != 0:
                written = _lines(self.out(shard))
                ids = [q.id for i, q in enumerate(self._chosen()) if i % self.jobs == shard]
                if written < len(ids):
                    with open(self.out(shard), "a") as f:
                        f.write(json.dumps({"id": ids[written], "obs": {"run": f"crash: exit {code}"}}) + "\n")
                    if written + 1 < len(ids):
                        self.start(shard, written + 1)
        return not self.procs

    def _chosen(self):
        if not hasattr(self, "_ids"):
            self._ids = chosen_programs(self.args)
        return self._ids

    def records(self) -> dict:
        found = {}
        for k in range(self.jobs):
            if self.out(k).exists():
                for line in self.out(k).read_text().splitlines():
                    record = json.loads(line)
                    found[record["id"]] = record["obs"]
        return found


def _lines(path: Path) -> int:
    return path.read_text().count("\n") if path.exists() else 0


def chosen_programs(args: list[str]) -> list:
    """The programs observe.py runs for ARGS (its --set or --id), in its order."""
    ids = [args[i + 1] for i, a in enumerate(args) if a == "--id"]
    if ids:
        by_id = {q.id: q for q in P.corpus()}
        return [by_id[i] for i in ids]
    programs = P.corpus()
    return P.quick(programs) if "quick" in args else programs


def run_sides(sides: list[Side]) -> None:
    start = time.monotonic()
    for side in sides:
        for shard in range(side.jobs):
            side.start(shard)
    last = 0.0
    try:
        while True:
            finished = [side.poll() for side in sides]
            if all(finished):
                break
            if time.monotonic() - last >= 10:
                last = time.monotonic()
                log("differential: " + ", ".join(f"{s.name} {s.done()}/{s.total}" for s in sides)
                    + f" programs, {last - start:.0f} s")
            time.sleep(0.5)
    except BaseException:
        for side in sides:
            for proc in side.procs.values():
                proc.kill()
        raise
    log(f"differential: both sides done in {time.monotonic() - start:.0f} s")


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------


def classify_all(programs: list, stock: dict, stack: dict) -> list[compare.Difference]:
    eager_of = {(q.body.index, q.caller): q.id for q in programs if q.runner == "eager"}
    found = []
    for q in programs:
        if q.id not in stock or q.id not in stack:
            found.append(compare.Difference(q.id, "record", "missing" if q.id not in stock else "ok",
                                            "missing" if q.id not in stack else "ok", "unintended"))
            continue
        eager = eager_of.get((q.body.index, q.caller))
        eager_stock = stock.get(eager) if eager and q.runner != "eager" else None
        eager_stack = stack.get(eager) if eager and q.runner != "eager" else None
        found += compare.classify(q, stock[q.id], stack[q.id], eager_stock, eager_stack)
    return found


def report(programs: list, found: list[compare.Difference], out, limit: int) -> int:
    by_program: dict[str, list] = {}
    for d in found:
        by_program.setdefault(d.program, []).append(d)
    classes = Counter()
    for diffs in by_program.values():
        worst = max(diffs, key=lambda d: compare.CLASSES.index(d.cls)).cls
        classes[worst] += 1
    per_rule = Counter(d.rule for d in found if d.cls == "intended")
    print(f"{len(programs)} programs ({len({q.body.index for q in programs})} bodies); "
          f"{len(by_program)} differ between stock and the stack", file=out)
    print("  by the worst of their differences: " + ", ".join(f"{c} {classes[c]}" for c in compare.CLASSES),
          file=out)
    print("  differences: " + ", ".join(f"{c} {sum(d.cls == c for d in found)}" for c in compare.CLASSES), file=out)
    for name, count in sorted(per_rule.items()):
        print(f"  intended by {name}: {count}", file=out)
    unintended = [d for d in found if d.cls == "unintended"]
    if unintended:
        programs_hit = sorted({d.program for d in unintended})
        print(f"UNINTENDED: {len(unintended)} differences in {len(programs_hit)} programs"
              f" (first {min(limit, len(unintended))}; `--id ID` shows one program, `--show ID` its source):",
              file=out)
        for d in unintended[:limit]:
            print("  " + d.line(), file=out)
    else:
        print("no unintended difference", file=out)
    return 1 if unintended else 0


def show(program_id: str, out) -> None:
    by_id = {q.id: q for q in P.corpus()}
    if program_id not in by_id:
        raise BadInput(f"--show {program_id}: no such program in the corpus")
    q = by_id[program_id]
    print(q.body.source, file=out)
    print(f"# caller: grad mode {q.grad}, inputs {q.inputs}, wrapper {q.wrapper}; runner {q.runner}", file=out)
    print(f"# observed by: python test/differential/observe.py --id {q.id}", file=out)


# ---------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    prog = os.environ.pop("NDV_ENTRY", None) or "differential.py"
    p = argparse.ArgumentParser(
        prog=prog,
        description="The differential corpus: programs generated from axes (test/differential/programs.py) run on "
                    "stock torch and with the stack, in fresh processes; every observable compared; a difference "
                    "that is neither compiled code now agreeing with eager nor covered by a patch's rule "
                    "(test/differential/rules.py) is reported as unintended and fails the run.",
        epilog="Exit status: 0 no unintended difference, 1 some, 2 bad usage, 130 interrupted.")
    p.add_argument("--quick", action="store_true", help="the quick subset (every 10th body), for CI")
    p.add_argument("--prefix", type=int, metavar="K", help="test the first K patches of the stack, not all")
    p.add_argument("--series-at", metavar="REV", help="test the stack as patches/ and overlay/ were at git REV")
    p.add_argument("--jobs", type=int, default=1, metavar="N", help="processes per side (default: 1; two sides)")
    p.add_argument("--bodies", metavar="A:B",
                   help="only the programs of bodies A to B-1 (e.g. an axis just added), whole")
    p.add_argument("--id", action="append", default=[], metavar="ID",
                   help="only this program and its eager twin (repeatable); prints all their differences")
    p.add_argument("--show", metavar="ID", help="print a program's source, caller and runner, and exit")
    p.add_argument("--json", type=Path, metavar="OUT", help="write every difference, classified, to OUT")
    p.add_argument("--no-cache", action="store_true", help="run stock too, even where its records are cached")
    p.add_argument("--stock-vs-stock", action="store_true",
                   help="compare stock with stock (a self-check: any difference is nondeterminism)")
    p.add_argument("--limit", type=int, default=60, help="unintended differences printed (default: 60)")
    a = p.parse_args(argv)
    if a.show:
        show(a.show, sys.stdout)
        return 0
    if a.jobs < 1:
        raise BadInput("--jobs: at least 1")
    all_programs = P.corpus()
    if a.id:
        by_id = {q.id: q for q in all_programs}
        unknown = [i for i in a.id if i not in by_id]
        if unknown:
            raise BadInput(f"--id {unknown[0]}: no such program in the corpus")
        wanted = {by_id[i] for i in a.id}
        twins = {q for q in all_programs for w in wanted
                 if q.runner == "eager" and q.body.index == w.body.index and q.caller == w.caller}
        programs = [q for q in all_programs if q in wanted or q in twins]
        args = [x for q in programs for x in ("--id", q.id)]
    elif a.bodies:
        first, _, last = a.bodies.partition(":")
        if not (first.isdigit() and last.isdigit() and int(first) < int(last)):
            raise BadInput(f"--bodies {a.bodies}: not A:B with A < B (body indexes)")
        programs = [q for q in all_programs if int(first) <= q.body.index < int(last)]
        if a.quick:
            programs = P.quick(programs)
        if not programs:
            raise BadInput(f"--bodies {a.bodies}: no body of the corpus in that range")
        args = [x for q in programs for x in ("--id", q.id)]
    else:
        programs = P.quick(all_programs) if a.quick else all_programs
        args = ["--set", "quick" if a.quick else "full"]

    with tempfile.TemporaryDirectory(prefix="ndv-differential-") as tmp:
        tmp = Path(tmp)
        # The sides run a copy of the corpus's code: an edit during a run does not reach a
        # process that starts (or restarts) later in it.
        code = tmp / "code"
        code.mkdir()
        for name in CORPUS_FILES:
            shutil.copy2(HERE / name, code / name)
        stack, overlay_src = stack_under_test(a.prefix, a.series_at, tmp)
        rules.ACTIVE = set(stack.series())
        stock_env = run.environment(stack, stock=True)
        stack_env = stock_env if a.stock_vs_stock else run.environment(stack, stock=False, overlay_src=overlay_src)
        under_test = "stock (again)" if a.stock_vs_stock else f"{len(stack.series())} patches"
        log(f"differential: {len(programs)} programs, stock vs {under_test}, {a.jobs} process(es) per side")
        cache = default_cache() / "differential" / stock_key(programs) if not a.id else None
        cached = cache / "stock.jsonl" if cache else None
        sides = []
        if cached is None or a.no_cache or a.stock_vs_stock or not cached.exists():
            sides.append(Side("stock", stock_env, tmp / "stock", code, a.jobs, args, len(programs)))
        else:
            log(f"differential: stock's records from the cache ({cached})")
        sides.append(Side("stack", stack_env, tmp / "stack", code, a.jobs, args, len(programs)))
        run_sides(sides)
        by_side = {s.name: s.records() for s in sides}
        if "stock" in by_side:
            if cached is not None and not a.stock_vs_stock and len(by_side["stock"]) == len(programs):
                cached.parent.mkdir(parents=True, exist_ok=True)
                partial = cached.with_suffix(".partial")
                partial.write_text("".join(json.dumps({"id": k, "obs": v}) + "\n" for k, v in by_side["stock"].items()))
                partial.rename(cached)
        else:
            by_side["stock"] = {r["id"]: r["obs"] for r in map(json.loads, cached.read_text().splitlines())}
    found = classify_all(programs, by_side["stock"], by_side["stack"])
    if a.json:
        a.json.write_text(json.dumps([d.__dict__ for d in found], indent=1, default=str))
    if a.id:
        for d in found:
            print(d.line())
    return report(programs, found, sys.stdout, a.limit if not a.id else 0)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BadInput as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
