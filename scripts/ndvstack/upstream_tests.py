"""test: the stack's own tests, and the upstream tests that cover it, stock vs patched (A/B).

The stack's own tests are the test functions its patches add or change in upstream's test
files (own_tests: found by applying the test hunks, never named by hand). A new one must
fail on stock and pass with the stack (passing on stock it cannot show the fix: a defect);
a changed one must pass with the stack.

With --upstream-tests DIR (or $NDV_UPSTREAM_TESTS): DIR/test (a folder of upstream test
files, or a checkout's tree) is copied, the series' test hunks are applied to the copy
(`git apply`, no fuzz; DIR is never written), and pytest runs there (from test/, as
upstream's run_test.py does) on stock and on the stack at the same time, each side with
its own inductor cache and TMPDIR. --select own (the default): the stack's own tests only.
quick / all / full: also the upstream files patches/upstream-tests.toml maps the stack's
files to (quick: each entry's quick part; all: the whole files but the sweeps; full: with
them), as the regression gate: a test that passed on stock and does not pass with the stack
(fails, errors, is skipped or is gone) is a regression; tests that fail on both sides are
counted, never blamed; a mapped file that does not collect on stock is reported and fails
the run. A per-file table goes to the terminal and, with the command, the sha256 of DIR's
files and the stack's tests per patch, to summary.json beside the JUnit files.

With --pytorch DIR: the stack is applied to the checkout at the base (or --onto REV) in a
throw-away worktree; the mapped tests (and the entries' checkout_only files) and the
stack's own tests run there on two pythons: stock (this venv's torch, or --stock-python) and
patched (the overlay, or --patched-python: a venv with the wheel build.sh made); JUnit XML
per side, and the same verdicts.
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

from ndvstack import apply, lint, own_tests, run
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.git import Git
from ndvstack.hunks import apply_to_tree
from ndvstack.own_tests import OwnTests
from ndvstack.repo import open_checkout, require_base, require_commit
from ndvstack.stack import COVERAGE_FILE, UNCOVERED_PREFIXES, Stack, is_test_file

SIDES = ("stock", "stack")
FAILED = ("failed", "error")
# A test id reported twice (a teardown error after a pass, say) keeps the worst of its outcomes.
_WORST = ("passed", "skipped", "failed", "error")
SELECTIONS = ("own", "quick", "all", "full")


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
    files = sorted(p for p in ours if (out / p).is_file() and is_test_file(p))
    return files, not_run


def selected_tests(stack: Stack) -> list[str]:
    """The covering tests (files or file::Class) of every source file the stack touches, with
    the entries' checkout_only files: what --pytorch runs besides the stack's own tests."""
    coverage = stack.coverage()
    if coverage is None:
        raise BadInput(f"{stack.dir / COVERAGE_FILE}: missing (which upstream tests cover the stack's files)")
    touched = sorted({path for patch in stack.patches() for path in patch.touched
                      if not path.startswith(UNCOVERED_PREFIXES)})
    ids: dict[str, None] = {}
    for entry in (c for c in coverage if any(path.startswith(c.path) for path in touched)):
        ids.update(dict.fromkeys((*entry.tests, *entry.checkout_only)))
    return list(ids)


def stack_test_verdict(kind: str, stock: str, stack: str) -> str:
    """What is wrong with one of the stack's own tests (KIND new, changed or kept), or "" if
    nothing: every one must pass with the stack, a new one must fail on stock to show the fix,
    and a kept one (what works on stock) must pass on stock."""
    def said(outcome):
        return "not collected" if outcome == "absent" else outcome
    if stack != "passed":
        return f"{said(stack)} with the stack"
    if kind == "new" and stock not in FAILED:
        return f"{'passes' if stock == 'passed' else said(stock)} on stock: it cannot show the fix"
    if kind == "kept" and stock != "passed":
        return f"{said(stock)} on stock: it pins what works on stock, so it must pass there"
    return ""


def print_stack_tests(rows: list[dict], out) -> None:
    """One line per test of the stack: ok, FAILS (with the stack) or DEFECT (not failing on stock)."""
    new = sum(row["kind"] == "new" for row in rows)
    kept = sum(row["kind"] == "kept" for row in rows)
    print(f"the stack's tests: {new} new (must fail on stock and pass with the stack), {kept} kept (must pass "
          f"on both: patches/regression-tests), {len(rows) - new - kept} changed (must pass with the stack)",
          file=out)
    for row in rows:
        verdict = row["verdict"]
        status = "ok" if not verdict else "FAILS" if "with the stack" in verdict else "DEFECT"
        print(f"  {status}: {row['kind']} {row['test_id']}{' (' + row['patch'] + ')' if row['patch'] else ''}: "
              f"stock {row['stock']}, stack {row['stack']}{'; ' + verdict if verdict else ''}", file=out)


def junit_id(test_id: str) -> str:
    """test/dir/test_x.py::Class::name as pytest's JUnit names it run from test/:
    dir.test_x.Class::name."""
    file, *rest = test_id[len("test/"):].split("::")
    module = file.removesuffix(".py").replace("/", ".")
    return f"{module}.{rest[0]}::{rest[1]}" if len(rest) == 2 else f"{module}::{rest[0]}"


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


def report(results: dict[str, dict[str, str]], own: dict[str, str], out) -> list[Outcome]:
    """Per test id, stock vs stack; OWN (JUnit id -> new / changed): the stack's own tests."""
    ids = sorted(set(results["stock"]) | set(results["stack"]) | set(own))
    table = [Outcome(i, results["stock"].get(i, "absent"), results["stack"].get(i, "absent")) for i in ids]
    for row in table:
        if row.test_id not in own and (row.change or row.stack in FAILED):
            print(f"{row.stock:8s} {row.stack:8s} {row.test_id} {row.change}".rstrip(), file=out)
    rows = [{"test_id": row.test_id, "kind": own[row.test_id], "patch": "", "stock": row.stock, "stack": row.stack,
             "verdict": stack_test_verdict(own[row.test_id], row.stock, row.stack)}
            for row in table if row.test_id in own]
    if rows:
        print_stack_tests(rows, out)
    newly_pass = sum(row.change == "newly passes" for row in table)
    failing = [row.test_id for row in table if row.test_id not in own and row.kind == "regression"]
    failing += [row["test_id"] for row in rows if row["verdict"]]
    both = sum(row.stock in FAILED and row.stack in FAILED for row in table)
    print(f"{len(table)} tests: {newly_pass} newly pass with the stack, {len(failing)} fail with it or cannot "
          f"show its fix ({both} fail on both sides)", file=out)
    if failing:
        raise WorkFailed(f"test: {len(failing)} tests fail with the stack or cannot show its fix "
                         f"(first: {failing[0]})")
    return table


def _run_both(sides, cwd: Path, ids: list[str], junit_dir: Path, progress, deselect: list[str] = ()) -> dict:
    """Runs IDS on each of SIDES() (made only now: the overlay is built only if there is
    something to run)."""
    junit_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for side in sides():
        progress(f"test: {len(ids)} test files, classes or tests on {side.name} ({side.python}) ...")
        results[side.name] = run_side(side, cwd, ids, junit_dir / f"{side.name}.xml", deselect)
    return results


def _show(git: Git, rev: str, path: str) -> str | None:
    result = git.run("show", f"{rev}:{path}", check=False)
    return result.stdout if result.returncode == 0 else None


def checkout_stack_tests(git: Git, base: str, head: str) -> dict[str, str]:
    """The tests the commits base..head add or change: test id -> new / changed."""
    paths = [p for p in git.out("diff", "--name-only", "--no-renames", base, head).splitlines() if is_test_file(p)]
    found = {}
    for path in paths:
        new = _show(git, head, path)
        if new is not None:
            found.update(own_tests.changed_tests(path, _show(git, base, path), new, f"the stack at {head[:12]}"))
    return found


def from_checkout(stack: Stack, pytorch: Path, out, junit_dir: Path | None, onto: str | None, sides,
                  progress) -> list[Outcome]:
    mapped = selected_tests(stack)
    git = open_checkout(pytorch)
    sha = require_commit(git, onto, "the revision") if onto else require_base(git, stack.base)
    with apply.stacked_worktree(git, stack.patches(), sha, progress) as (worktree, head):
        own = checkout_stack_tests(Git(worktree), sha, head)
        present = [i for i in mapped if (worktree / i.split("::")[0]).is_file()]
        for missing in sorted(set(mapped) - set(present)):
            print(f"not run: {missing} (not in the checkout at {sha[:12]})", file=out)
        # The stack's tests that the mapped files or classes do not run anyway.
        extra = [i for i in own if not any(i == t or i.startswith(t + "::") for t in present)]
        if not present and not extra:
            raise BadInput(f"{git.cwd}: none of the tests that cover the stack exist at {sha[:12]}, and the "
                           f"stack adds or changes no test")
        # From test/, as run_test.py does: the checkout's own torch/ must not shadow the torch under test.
        relative = [i[len("test/"):] for i in (*present, *extra)]
        with tempfile.TemporaryDirectory(prefix="ndv-junit-") as tmp:
            results = _run_both(sides, worktree / "test", relative, junit_dir or Path(tmp), progress,
                                deselect=_sweeps(stack))
    return report(results, {junit_id(i): kind for i, kind in own.items()}, out)


# --upstream-tests DIR: upstream's own test files, as the regression gate.

@dataclass(frozen=True)
class SuiteRun:
    """One pytest run on each side: TARGET (a file or file::Class, relative to test/), with -k K;
    or, with IDS, only those tests of the file TARGET (the stack's own, by pytest id)."""

    target: str
    k: str | None = None
    ids: tuple[str, ...] = ()

    @property
    def file(self) -> str:
        return self.target.split("::")[0]

    @property
    def label(self) -> str:
        if self.ids:
            return f"{self.target}: the stack's {len(self.ids)} tests"
        return self.target + (f" -k {shlex.quote(self.k)}" if self.k else "")

    @property
    def args(self) -> list[str]:
        return [*self.ids] or [self.target, *(("-k", self.k) if self.k else ())]

    @property
    def report_name(self) -> str:
        """The JUnit file's name: unique per run (a target runs once per side, and once more for
        the stack's tests in it)."""
        name = self.target.removesuffix(".py").replace(".py::", ".").replace("/", ".")
        return name + (".stack-tests" if self.ids else "")


def _sweeps(stack: Stack) -> list[str]:
    """The sweeps to leave out, as pytest --deselect prefixes relative to test/."""
    return [sweep[len("test/"):] for sweep in stack.sweeps()]


def suite_runs(stack: Stack, select: str, touched: list[str] | None = None) -> list[SuiteRun]:
    """What SELECT runs for the stack's touched source paths (or TOUCHED): the covering entries'
    quick picks, or their tests; one run per target, -k expressions of the same target or-ed."""
    coverage = stack.coverage()
    if coverage is None:
        raise BadInput(f"{stack.dir / COVERAGE_FILE}: missing (which upstream tests cover the stack's files)")
    if touched is None:
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
                   "--rootdir", str(test_dir), f"--junitxml={junit}", *suite.args,
                   *(f"--deselect={d}" for d in deselect)]
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
    return {f"test/{p}": hashlib.sha256((test_dir / p).read_bytes()).hexdigest() for p in sorted(paths)
            if (test_dir / p).is_file()}  # a test file the stack creates is not DIR's


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


def stack_runs(own: OwnTests, runs: list[SuiteRun]) -> list[SuiteRun]:
    """One run per file of the stack's own tests that RUNS do not run whole: those tests, by id."""
    whole = {run.target for run in runs if run.k is None and not run.ids}
    by_file: dict[str, list[str]] = {}
    for test_id in (*own.new, *own.changed):
        rel = test_id[len("test/"):]
        file, *inner = rel.split("::")
        if file not in whole and not (len(inner) == 2 and f"{file}::{inner[0]}" in whole):
            by_file.setdefault(file, []).append(rel)
    return [SuiteRun(file, ids=tuple(ids)) for file, ids in by_file.items()]


def from_upstream_dir(stack: Stack, upstream: Path, select: str, out, reports: Path, sides, progress,
                      command: list[str]) -> list[Outcome]:
    test_dir = upstream / "test"
    patches = stack.patches()
    if not patches:
        print("the series is empty: no tests of its own, nothing to compare", file=out)
        return []
    reports.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ndv-upstream-tests-") as scratch:
        # DIR's text with the series' test hunks: never DIR itself.
        own = own_tests.apply_test_hunks(patches, upstream, Path(scratch, "tree"))
        own.kept = stack.regression_tests()
        tree = own.tree / "test"
        runs = [] if select == "own" else suite_runs(stack, select)
        missing = sorted({run.file for run in runs if not (tree / run.file).is_file()})
        runs = [run for run in runs if run.file not in missing]
        for file in missing:
            print(f"not run: test/{file} is mapped for the stack's files but not in {upstream}", file=out)
        if select != "own" and not runs:
            raise BadInput(f"--upstream-tests {upstream}: none of the test files upstream-tests.toml maps the "
                           f"stack's files to is there")
        runs += stack_runs(own, runs)
        if not runs:
            raise WorkFailed(f"the stack's {len(patches)} patches add or change no test in {test_dir}'s files "
                             f"(test/**/test_*.py): no test shows what they fix")
        deselect = [] if select == "full" else _sweeps(stack)
        progress(f"upstream tests: {len(runs)} runs per side from {test_dir} with the stack's test hunks, stock "
                 f"and the stack at the same time; reports in {reports}")
        began = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="ndv-upstream-caches-") as caches:
            # Private inductor caches per side: one shared between two runs gives false failures.
            private = [Side(side.name, side.python,
                            {**side.env, **run.private_inductor_env(Path(caches, side.name))})
                       for side in sides()]
            with ThreadPoolExecutor(max_workers=len(private)) as pool:
                done = dict(zip(SIDES, pool.map(
                    lambda side: _run_suite_side(side, tree, runs, deselect, reports, progress), private)))
        wall = round(time.monotonic() - began, 1)

    stock, stack_side = done["stock"][0], done["stack"][0]
    kinds = {test_id[len("test/"):]: kind for test_id, kind in own.kind.items()}
    table = []
    for test_id in sorted(set(stock) | set(stack_side) | set(kinds)):
        before, why_before = stock.get(test_id, ("absent", ""))
        after, why_after = stack_side.get(test_id, ("absent", ""))
        table.append(Outcome(test_id, before, after, why_after or why_before))
    theirs = [row for row in table if row.test_id not in kinds]
    for kind in ("regression", "newly passes", "fails on both", "one side only"):
        for row in (r for r in theirs if r.kind == kind):
            print(f"{kind.upper() if kind == 'regression' else kind}: {row.test_id} (stock {row.stock}, "
                  f"stack {row.stack}){': ' + row.message[:200] if row.message else ''}", file=out)
    mine = [{"test_id": f"test/{row.test_id}", "kind": kinds[row.test_id], "patch": own.patch_of(f"test/{row.test_id}"),
             "stock": row.stock, "stack": row.stack,
             "verdict": stack_test_verdict(kinds[row.test_id], row.stock, row.stack)}
            for row in table if row.test_id in kinds]
    if mine:
        print_stack_tests(mine, out)
    for suite in (r for r in runs if r.ids and not any(i in stock or i in stack_side for i in r.ids)):
        # pytest runs none of the ids it was given when one is not found (a parametrized or
        # device-type test is collected under other names): say so, from its log.
        log = (reports / "stack" / f"{suite.report_name}.log").read_text(errors="replace").replace(f"{tree}/", "")
        at = log.find("ERROR: not found:")
        why = " ".join(log[at:].split("\n")[:2]) if at >= 0 else f"see its log in {reports}"
        print(f"not collected: {suite.label}: {why}", file=out)
    uncollected = [row for row in table if row.test_id.endswith("::(collection)") and row.stock in FAILED]
    for row in uncollected:
        print(f"DOES NOT COLLECT on stock: test/{row.test_id.split('::')[0]}: {row.message[:200]}", file=out)
    empty = [run.label for run in runs if not run.ids and
             not any(t.startswith(run.file + "::") for t in set(stock) | set(stack_side))]
    for label in empty:
        print(f"selects nothing: {label} collected no test on either side (fix upstream-tests.toml)", file=out)
    files = list(dict.fromkeys(run.file for run in runs))
    rows = _file_rows(files, table)
    _print_table(rows, out)
    regressions = [row for row in theirs if row.kind == "regression"]
    bad = [row for row in mine if row["verdict"]]
    print(f"{len(table)} tests, --select {select}: {len(regressions)} regressions, "
          f"{sum(r['newly_pass'] for r in rows)} newly pass, {sum(r['fail_on_both'] for r in rows)} fail on both "
          f"sides, {sum(r['one_side_only'] for r in rows)} skipped or missing on one side only; the stack's "
          f"{len(mine)} tests: {len(bad)} fail with it or cannot show its fix; {wall:.0f}s", file=out)
    summary = {
        "command": shlex.join(command), "dir": str(upstream), "select": select,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "sides": {side.name: {"python": side.python, "torch": side.env.get("NDV_OVERLAY", "as installed")}
                  for side in private},
        "sha256": _sha256s(test_dir, files), "not_in_dir": [f"test/{f}" for f in missing],
        "deselected": deselect, "runs": [{"target": run.target, "k": run.k, "ids": list(run.ids), "seconds": {
            side: done[side][1][run.label] for side in SIDES}} for run in runs],
        "seconds": wall, "files": rows, "selects_nothing": empty,
        "not_collected_on_stock": [row.test_id.split("::")[0] for row in uncollected],
        "stack_tests": mine, "stack_tests_per_patch": own.per_patch,
        "tests": [asdict(row) | {"kind": row.kind} for row in theirs if row.kind],
    }
    (reports / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(f"reports: {reports} (summary.json, and per side the JUnit XML and pytest's output)", file=out)
    if regressions:
        names = ", ".join(row.test_id for row in regressions[:5])
        more = f" and {len(regressions) - 5} more" if len(regressions) > 5 else ""
        raise WorkFailed(f"upstream tests: {len(regressions)} regressions (passed on stock, not with the "
                         f"stack): {names}{more}")
    if bad:
        raise WorkFailed(f"upstream tests: {len(bad)} of the stack's tests fail with it or cannot show its fix "
                         f"(first: {bad[0]['test_id']}: {bad[0]['verdict']})")
    if uncollected:
        raise WorkFailed(f"upstream tests: test/{uncollected[0].test_id.split('::')[0]} does not collect on stock "
                         f"in {upstream}: the gate cannot vouch for it")
    if empty:
        raise WorkFailed(f"upstream tests: {empty[0]} selects no test in {upstream}")
    if select != "own" and not any(row.stock == "passed" for row in theirs):
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
    if select is not None and pytorch is not None:
        raise BadInput("--select is for the upstream test files of --upstream-tests (or $NDV_UPSTREAM_TESTS), "
                       "not --pytorch")
    if select is not None and select not in SELECTIONS:
        raise BadInput(f"--select {select}: not one of {', '.join(SELECTIONS)}")
    if patched_python and overlay_options.get("cpp_from"):
        raise BadInput("--cpp-from is for the overlay; --patched-python brings its own torch")
    for name, python in (("stock", stock_python), ("patched", patched_python)):
        if python and not Path(python).is_file():
            raise BadInput(f"--{name}-python {python}: no such python")
    sides = functools.partial(make_sides, stack, stock_python, patched_python, **overlay_options)
    if pytorch is not None:
        return from_checkout(stack, pytorch, out, junit_dir, onto, sides, progress)
    upstream = own_tests.upstream_dir(upstream, "test")
    reports = junit_dir or Path(tempfile.mkdtemp(prefix="ndv-upstream-tests-"))  # kept: the reports
    return from_upstream_dir(stack, upstream, select or "own", out, reports, sides, progress,
                             command or ["test.sh", "--upstream-tests", str(upstream)])
