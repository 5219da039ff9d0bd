"""test: the upstream tests that cover the stack, run stock vs patched (A/B), per test id.

With --pytorch DIR: the stack is applied to the checkout at the base (or --onto REV) in a
throw-away worktree; the tests that patches/upstream-tests.toml maps the stack's files to,
and every test file the stack adds or changes, run there with pytest (from test/, as
upstream's run_test.py does) on two pythons: stock (this venv's torch, or --stock-python)
and patched (the overlay, or --patched-python: a venv with the wheel build.sh made).

Without a checkout: the test files the stack creates (new files under test/, taken from
the patches) are written to a temporary tree and run the same way, on stock torch and
with the overlay; changes to existing upstream test files are listed as not run.

Both write JUnit XML per side, report per test id what newly passes and newly fails with
the stack, and fail (exit 1) on any new failure (a test that passed on stock and fails,
errors, is skipped or is gone with the stack), and on any failure in the test files the
stack adds.

With --upstream-tests DIR: upstream's own test files from DIR/test (a folder of them, or a
checkout's tree, used as they are), the ones upstream-tests.toml maps the stack's files to
(--select quick: each entry's quick part; all: the whole files but the sweeps; full: with
them), on stock and on the stack at the same time, each side with its own inductor cache.
A test that passed on stock and does not pass with the stack (fails, errors, is skipped or
is gone) is a regression, and any regression fails the run; tests that fail on both sides
are counted, never blamed. A per-file table goes to the terminal and, with the command and
the sha256 of DIR's files, to summary.json beside the JUnit files (from_upstream_dir).
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from ndvstack import apply, lint, run
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.hunks import apply_to_tree
from ndvstack.repo import open_checkout, require_base, require_commit
from ndvstack.stack import COVERAGE_FILE, UNCOVERED_PREFIXES, Stack

SIDES = ("stock", "stack")
FAILED = ("failed", "error")
# A test id reported twice (a teardown error after a pass, say) keeps the worst of its outcomes.
_WORST = ("passed", "skipped", "failed", "error")
SELECTIONS = ("quick", "all", "full")


@dataclass
class Outcome:
    test_id: str
    stock: str
    stack: str
    message: str = ""  # why it did not pass: the stack side's failure or skip message, else stock's

    @property
    def change(self) -> str:
        if self.stock in FAILED and self.stack == "passed":
            return "newly passes"
        if self.stock == "passed" and self.stack in FAILED:
            return "NEWLY FAILS"
        # Passed on stock, skipped or not collected with the stack: the run can no longer
        # vouch for it, so it counts as a new failure.
        if self.stock == "passed" and self.stack in ("skipped", "absent"):
            return f"NEWLY FAILS ({self.stack} with the stack)"
        return ""

    @property
    def kind(self) -> str:
        """regression, newly passes, fails on both, one side only, or "" (the same on both)."""
        if self.change.startswith("NEWLY FAILS"):
            return "regression"
        if self.change:
            return self.change
        if self.stock in FAILED and self.stack in FAILED:
            return "fails on both"
        return "one side only" if self.stock != self.stack else ""


@dataclass
class Side:
    name: str
    python: str
    env: dict[str, str]


def new_test_files(stack: Stack, out: Path) -> tuple[list[str], list[str]]:
    """Writes the test files the stack creates under OUT, with the later patches' changes
    to them; returns (the test_*.py files written, the changes to upstream files)."""
    ours: set[str] = set()
    not_run = []
    for patch in stack.patches():
        changes = []
        for change in (c for c in patch.files if c.path.startswith("test/")):
            if change.old_path is None or change.old_path in ours:
                changes.append(change)
                ours.add(change.path)
            else:
                not_run.append(f"{change.path} ({patch.name}): changes an upstream file; needs --pytorch")
        if changes:
            result = apply_to_tree(out, changes, out.parent / f"{patch.name}.diff")
            if result.returncode != 0:
                raise WorkFailed(f"{patch.name}: its test files do not apply: {result.stderr.strip()}")
    files = sorted(p for p in ours if (out / p).is_file() and _is_test_file(p))
    return files, not_run


def _is_test_file(path: str) -> bool:
    return Path(path).name.startswith("test_") and path.endswith(".py")


def selected_tests(stack: Stack) -> tuple[list[str], list[str]]:
    """(the test ids to run for the stack, the test files it adds): the covering tests of
    every file it touches, and every test file it adds or changes, whole."""
    coverage = stack.coverage()
    if coverage is None:
        raise BadInput(f"{stack.dir / COVERAGE_FILE}: missing (which upstream tests cover the stack's files)")
    patches = stack.patches()
    touched = sorted({path for patch in patches for path in patch.touched})
    added = sorted({c.path for p in patches for c in p.files if c.old_path is None and _is_test_file(c.path)})
    whole = [path for path in touched if path.startswith("test/") and _is_test_file(path)]
    ids = dict.fromkeys(whole)
    for path in touched:
        if not path.startswith(UNCOVERED_PREFIXES):
            for entry in (c for c in coverage if path.startswith(c.path)):
                ids.update(dict.fromkeys(t for t in entry.tests if t.split("::")[0] not in whole))
    return list(ids), added


def junit_cases(junit: Path) -> dict[tuple[str, str], tuple[str, str]]:
    """(classname, name) -> (passed / failed / error / skipped, the start of its message on one
    line), from pytest's JUnit XML."""
    results: dict[tuple[str, str], tuple[str, str]] = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        key = (case.get("classname") or "", case.get("name") or "")
        kinds = {child.tag: child for child in case}
        tag = next((t for t in ("failure", "error", "skipped") if t in kinds), None)
        outcome = {"failure": "failed", "error": "error", "skipped": "skipped", None: "passed"}[tag]
        message = " ".join((kinds[tag].get("message") or kinds[tag].text or "").split())[:500] if tag else ""
        if key not in results or _WORST.index(outcome) > _WORST.index(results[key][0]):
            results[key] = (outcome, message)
    return results


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> passed / failed / error / skipped, from pytest's JUnit XML."""
    return {f"{classname}::{name}": outcome for (classname, name), (outcome, _) in junit_cases(junit).items()}


def run_side(side: Side, cwd: Path, ids: list[str], junit: Path, deselect: list[str] = ()) -> dict[str, str]:
    junit = junit.absolute()  # pytest runs in cwd: a relative path would land there
    command = [side.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(cwd),
               f"--junitxml={junit}", *ids, *(f"--deselect={d}" for d in deselect)]
    result = subprocess.run(command, cwd=cwd, env=side.env, capture_output=True, text=True)
    if not junit.is_file():  # pytest itself failed (usage, collection crash)
        raise WorkFailed(f"pytest on {side.name} wrote no report: {result.stdout[-500:]}{result.stderr[-500:]}")
    return outcomes(junit)


def make_sides(stack: Stack, stock_python: str | None = None, patched_python: str | None = None,
               **overlay_options) -> list[Side]:
    """The two pythons: a given one runs with the caller's environment, less any overlay."""
    def given(name, python):
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NDV_OVERLAY")}
        return Side(name if name == "stock" else "stack", python, env)
    stock = given("stock", stock_python) if stock_python else \
        Side("stock", sys.executable, run.environment(stack, stock=True))
    patched = given("patched", patched_python) if patched_python else \
        Side("stack", sys.executable, run.environment(stack, stock=False, **overlay_options))
    return [stock, patched]


def _module(path: str, root: str) -> str:
    """pytest's JUnit classname prefix for the test file PATH run from ROOT."""
    rel = path[len(root):] if root and path.startswith(root) else path
    return rel[:-3].replace("/", ".")


def report(results: dict[str, dict[str, str]], own_modules: list[str], out) -> list[Outcome]:
    ids = sorted(set(results["stock"]) | set(results["stack"]))
    table = [Outcome(i, results["stock"].get(i, "absent"), results["stack"].get(i, "absent")) for i in ids]
    prefixes = tuple(p for m in own_modules for p in (m + ".", m + "::"))
    own = {row.test_id for row in table if row.test_id.startswith(prefixes)} if prefixes else set()
    for row in table:
        if row.test_id in own or row.change or row.stack in FAILED:
            print(f"{row.stock:8s} {row.stack:8s} {row.test_id} {row.change}".rstrip(), file=out)
    newly_pass = sum(row.change == "newly passes" for row in table)
    failing = [row for row in table if row.kind == "regression" or
               (row.test_id in own and row.stack in FAILED + ("absent",))]
    both = sum(row.stock in FAILED and row.stack in FAILED for row in table)
    print(f"{len(table)} tests: {newly_pass} newly pass with the stack, {len(failing)} fail with it "
          f"({both} fail on both sides)", file=out)
    if failing:
        raise WorkFailed(f"test: {len(failing)} tests fail with the stack (first: {failing[0].test_id})")
    return table


def _run_both(sides, cwd: Path, ids: list[str], junit_dir: Path, progress, deselect: list[str] = ()) -> dict:
    """Runs IDS on each of SIDES() (made only now: the overlay is built only if there is
    something to run)."""
    junit_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for side in sides():
        progress(f"test: {len(ids)} test files or classes on {side.name} ({side.python}) ...")
        results[side.name] = run_side(side, cwd, ids, junit_dir / f"{side.name}.xml", deselect)
    return results


def from_checkout(stack: Stack, pytorch: Path, out, junit_dir: Path | None, onto: str | None, sides,
                  progress) -> list[Outcome]:
    ids, added = selected_tests(stack)
    git = open_checkout(pytorch)
    sha = require_commit(git, onto, "the revision") if onto else require_base(git, stack.base)
    with apply.stacked_worktree(git, stack.patches(), sha, progress) as (worktree, _):
        present = [i for i in ids if (worktree / i.split("::")[0]).is_file()]
        for missing in sorted(set(ids) - set(present)):
            print(f"not run: {missing} (not in the checkout at {sha[:12]})", file=out)
        if not present:
            raise BadInput(f"{git.cwd}: none of the tests that cover the stack exist at {sha[:12]}")
        # From test/, as run_test.py does: the checkout's own torch/ must not shadow the torch under test.
        relative = [i[len("test/"):] for i in present]
        with tempfile.TemporaryDirectory(prefix="ndv-junit-") as tmp:
            results = _run_both(sides, worktree / "test", relative, junit_dir or Path(tmp), progress,
                                deselect=_sweeps(stack))
    return report(results, [_module(path, "test/") for path in added], out)


def from_patches(stack: Stack, out, junit_dir: Path | None, sides, progress) -> list[Outcome]:
    with tempfile.TemporaryDirectory(prefix="ndv-upstream-tests-") as tmp:
        tree = Path(tmp, "pytorch")
        tree.mkdir()
        files, not_run = new_test_files(stack, tree)
        for line in not_run:
            print(f"not run: {line}", file=out)
        if not files:
            raise BadInput("the stack adds no test files under test/; nothing to run without --pytorch")
        results = _run_both(sides, tree, files, junit_dir or Path(tmp), progress)
    return report(results, [_module(path, "") for path in files], out)


# --upstream-tests DIR: upstream's own test files, as the regression gate.

@dataclass(frozen=True)
class SuiteRun:
    """One pytest run on each side: TARGET (a file or file::Class, relative to test/), with -k K."""

    target: str
    k: str | None = None

    @property
    def file(self) -> str:
        return self.target.split("::")[0]

    @property
    def label(self) -> str:
        return self.target + (f" -k {shlex.quote(self.k)}" if self.k else "")

    @property
    def report_name(self) -> str:
        """The JUnit file's name: unique per target (a target runs once per side)."""
        return self.target.removesuffix(".py").replace(".py::", ".").replace("/", ".")


def _sweeps(stack: Stack) -> list[str]:
    """The sweeps to leave out, as pytest --deselect prefixes relative to test/."""
    return [sweep[len("test/"):] for sweep in stack.sweeps()]


def suite_runs(stack: Stack, select: str) -> list[SuiteRun]:
    """What SELECT runs for the stack's touched source paths: the covering entries' quick
    picks, or their tests; one run per target, -k expressions of the same target or-ed."""
    coverage = stack.coverage()
    if coverage is None:
        raise BadInput(f"{stack.dir / COVERAGE_FILE}: missing (which upstream tests cover the stack's files)")
    touched = sorted({path for patch in stack.patches() for path in patch.touched
                      if not path.startswith(UNCOVERED_PREFIXES)})
    picks: dict[str, list[str | None]] = {}
    for entry in (c for c in coverage if any(path.startswith(c.path) for path in touched)):
        chosen = [(q.test, q.k) for q in entry.quick] if select == "quick" else [(t, None) for t in entry.tests]
        for test, k in chosen:
            picks.setdefault(test[len("test/"):], []).append(k)
    runs = []
    for target, ks in picks.items():
        file = target.split("::")[0]
        if target != file and None in picks.get(file, ()):
            continue  # the whole file runs anyway
        ks = list(dict.fromkeys(ks))
        k = None if None in ks else ks[0] if len(ks) == 1 else " or ".join(f"({k})" for k in ks)
        runs.append(SuiteRun(target, k))
    return runs


def suite_outcomes(junit: Path, file: str) -> dict[str, tuple[str, str]]:
    """test id (file::Class::name, as pytest names it from test/) -> (outcome, message). A
    file that failed to collect is one id, file::(collection)."""
    module = file.removesuffix(".py").replace("/", ".")
    results = {}
    for (classname, name), result in junit_cases(junit).items():
        if not classname:
            results[f"{file}::(collection)"] = result
        else:
            inner = classname[len(module) + 1:] if classname.startswith(module + ".") else classname
            results["::".join(filter(None, (file, inner if classname != module else "", name)))] = result
    return results


def _run_suite_side(side: Side, test_dir: Path, runs: list[SuiteRun], deselect: list[str], reports: Path,
                    progress) -> tuple[dict[str, tuple[str, str]], dict[str, float]]:
    """Each run on SIDE, one after the other: (test id -> (outcome, message), run -> seconds)."""
    (reports / side.name).mkdir(parents=True, exist_ok=True)
    results, seconds = {}, {}
    for number, suite in enumerate(runs, 1):
        junit = (reports / side.name / f"{suite.report_name}.xml").absolute()  # pytest runs in test_dir
        junit.unlink(missing_ok=True)
        command = [side.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
                   "--rootdir", str(test_dir), f"--junitxml={junit}", suite.target,
                   *(("-k", suite.k) if suite.k else ()), *(f"--deselect={d}" for d in deselect)]
        progress(f"upstream tests: {side.name}: {suite.label} ({number}/{len(runs)}) ...")
        began = time.monotonic()
        with open(junit.with_suffix(".log"), "w") as log:
            subprocess.run(command, cwd=test_dir, env=side.env, stdout=log, stderr=subprocess.STDOUT)
        seconds[suite.label] = round(time.monotonic() - began, 1)
        if not junit.is_file():  # pytest itself failed (usage, a crash)
            raise WorkFailed(f"upstream tests: pytest on {side.name} wrote no report for {suite.label}; "
                             f"see {junit.with_suffix('.log')}")
        found = suite_outcomes(junit, suite.file)
        progress(f"upstream tests: {side.name}: {suite.label}: {len(found)} tests in {seconds[suite.label]:.0f}s")
        results.update(found)
    return results, seconds


def _sha256s(test_dir: Path, files: list[str]) -> dict[str, str]:
    """The files run, and the helpers beside them that they may import (non-test .py files)."""
    paths = set(files)
    for folder in {Path(f).parent for f in files}:
        paths |= {str(p.relative_to(test_dir)) for p in (test_dir / folder).glob("*.py")
                  if not p.name.startswith("test_")}
    if (test_dir / "conftest.py").is_file():
        paths.add("conftest.py")
    return {f"test/{p}": hashlib.sha256((test_dir / p).read_bytes()).hexdigest() for p in sorted(paths)}


def _file_rows(files: list[str], table: list[Outcome]) -> list[dict]:
    rows = []
    for file in files:
        mine = [row for row in table if row.test_id.startswith(file + "::")]
        kinds = [row.kind for row in mine]
        rows.append({
            "file": file,
            "collected": {side: sum(getattr(row, side) != "absent" for row in mine) for side in SIDES},
            "passed": {side: sum(getattr(row, side) == "passed" for row in mine) for side in SIDES},
            "fail_on_both": kinds.count("fails on both"),
            "newly_pass": kinds.count("newly passes"),
            "one_side_only": kinds.count("one side only"),
            "regressions": kinds.count("regression"),
        })
    return rows


def _print_table(rows: list[dict], out) -> None:
    head = ("file", "collected stock/stack", "passed stock", "passed stack", "fail on both", "newly pass",
            "one side only", "regressions")
    lines = [head] + [(r["file"], f"{r['collected']['stock']}/{r['collected']['stack']}",
                       *(str(v) for v in (r["passed"]["stock"], r["passed"]["stack"], r["fail_on_both"],
                                          r["newly_pass"], r["one_side_only"], r["regressions"])))
                      for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    for line in lines:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths)).rstrip(), file=out)


def from_upstream_dir(stack: Stack, upstream: Path, select: str, out, reports: Path, sides, progress,
                      command: list[str]) -> list[Outcome]:
    test_dir = upstream / "test"
    if not test_dir.is_dir():
        raise BadInput(f"--upstream-tests {upstream}: no test/ folder (give the folder that holds test/...)")
    runs = suite_runs(stack, select)
    missing = sorted({run.file for run in runs if not (test_dir / run.file).is_file()})
    runs = [run for run in runs if run.file not in missing]
    for file in missing:
        print(f"not run: test/{file} is mapped for the stack's files but not in {upstream}", file=out)
    if not runs:
        raise BadInput(f"--upstream-tests {upstream}: none of the test files upstream-tests.toml maps the "
                       f"stack's files to is there")
    deselect = [] if select == "full" else _sweeps(stack)
    files = list(dict.fromkeys(run.file for run in runs))
    reports.mkdir(parents=True, exist_ok=True)
    progress(f"upstream tests: {len(runs)} runs per side from {test_dir}, stock and the stack at the same "
             f"time; reports in {reports}")
    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ndv-upstream-caches-") as caches:
        # Private inductor caches per side: one shared between two runs gives false failures.
        private = [Side(side.name, side.python, {**side.env, **run.private_inductor_env(Path(caches, side.name))})
                   for side in sides()]
        with ThreadPoolExecutor(max_workers=len(private)) as pool:
            done = dict(zip(SIDES, pool.map(
                lambda side: _run_suite_side(side, test_dir, runs, deselect, reports, progress), private)))
    wall = round(time.monotonic() - began, 1)

    stock, stack_side = done["stock"][0], done["stack"][0]
    table = []
    for test_id in sorted(set(stock) | set(stack_side)):
        before, why_before = stock.get(test_id, ("absent", ""))
        after, why_after = stack_side.get(test_id, ("absent", ""))
        table.append(Outcome(test_id, before, after, why_after or why_before))
    for kind in ("regression", "newly passes", "fails on both", "one side only"):
        for row in (r for r in table if r.kind == kind):
            print(f"{kind.upper() if kind == 'regression' else kind}: {row.test_id} (stock {row.stock}, "
                  f"stack {row.stack}){': ' + row.message[:200] if row.message else ''}", file=out)
    empty = [run.label for run in runs if not any(t.startswith(run.file + "::") for t in set(stock) | set(stack_side))]
    for label in empty:
        print(f"selects nothing: {label} collected no test on either side (fix upstream-tests.toml)", file=out)
    rows = _file_rows(files, table)
    _print_table(rows, out)
    regressions = [row for row in table if row.kind == "regression"]
    print(f"{len(table)} tests, --select {select}: {len(regressions)} regressions, "
          f"{sum(r['newly_pass'] for r in rows)} newly pass, {sum(r['fail_on_both'] for r in rows)} fail on both "
          f"sides, {sum(r['one_side_only'] for r in rows)} skipped or missing on one side only; {wall:.0f}s",
          file=out)
    summary = {
        "command": shlex.join(command), "dir": str(upstream), "select": select,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "sides": {side.name: {"python": side.python, "torch": side.env.get("NDV_OVERLAY", "as installed")}
                  for side in private},
        "sha256": _sha256s(test_dir, files), "not_in_dir": [f"test/{f}" for f in missing],
        "deselected": deselect, "runs": [{"target": run.target, "k": run.k, "seconds": {
            side: done[side][1][run.label] for side in SIDES}} for run in runs],
        "seconds": wall, "files": rows, "selects_nothing": empty,
        "tests": [asdict(row) | {"kind": row.kind} for row in table if row.kind],
    }
    (reports / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"reports: {reports} (summary.json, and per side the JUnit XML and pytest's output)", file=out)
    if regressions:
        names = ", ".join(row.test_id for row in regressions[:5])
        more = f" and {len(regressions) - 5} more" if len(regressions) > 5 else ""
        raise WorkFailed(f"upstream tests: {len(regressions)} regressions (passed on stock, not with the "
                         f"stack): {names}{more}")
    if empty:
        raise WorkFailed(f"upstream tests: {empty[0]} selects no test in {upstream}")
    if not any(row.stock == "passed" for row in table):
        raise WorkFailed(f"upstream tests: no test passed on stock in {upstream}: nothing to compare")
    return table


def main(stack: Stack, out, junit_dir: Path | None = None, progress=lambda msg: print(msg, file=sys.stderr),
         pytorch: Path | None = None, onto: str | None = None, stock_python: str | None = None,
         patched_python: str | None = None, upstream: Path | None = None, select: str | None = None,
         command: list[str] | None = None, **overlay_options) -> list[Outcome]:
    lint.check(stack)
    if onto and pytorch is None:
        raise BadInput("--onto needs --pytorch DIR")
    if upstream is not None and pytorch is not None:
        raise BadInput("--upstream-tests DIR and --pytorch DIR are two ways to run upstream's tests; give one")
    if select is not None and upstream is None:
        raise BadInput("--select needs --upstream-tests DIR")
    if select is not None and select not in SELECTIONS:
        raise BadInput(f"--select {select}: not one of {', '.join(SELECTIONS)}")
    if patched_python and overlay_options.get("cpp_from"):
        raise BadInput("--cpp-from is for the overlay; --patched-python brings its own torch")
    for name, python in (("stock", stock_python), ("patched", patched_python)):
        if python and not Path(python).is_file():
            raise BadInput(f"--{name}-python {python}: no such python")
    sides = functools.partial(make_sides, stack, stock_python, patched_python, **overlay_options)
    if upstream is not None:
        reports = junit_dir or Path(tempfile.mkdtemp(prefix="ndv-upstream-tests-"))  # kept: the reports
        return from_upstream_dir(stack, upstream, select or "all", out, reports, sides, progress,
                                 command or ["test.sh", "--upstream-tests", str(upstream)])
    if pytorch is None:
        return from_patches(stack, out, junit_dir, sides, progress)
    return from_checkout(stack, pytorch, out, junit_dir, onto, sides, progress)
