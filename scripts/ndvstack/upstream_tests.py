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
the stack, and fail (exit 1) on any new failure, and on any failure in the test files the
stack adds.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

from ndvstack import apply, lint, run
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.hunks import apply_to_tree
from ndvstack.repo import open_checkout, require_base, require_commit
from ndvstack.stack import COVERAGE_FILE, UNCOVERED_PREFIXES, Stack

SIDES = ("stock", "stack")
FAILED = ("failed", "error")


@dataclass
class Outcome:
    test_id: str
    stock: str
    stack: str

    @property
    def change(self) -> str:
        if self.stock in FAILED and self.stack == "passed":
            return "newly passes"
        if self.stock == "passed" and self.stack in FAILED + ("absent",):
            return "NEWLY FAILS"
        return ""


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


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> passed / failed / error / skipped, from pytest's JUnit XML."""
    results = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        kinds = [child.tag for child in case]
        results[test_id] = ("failed" if "failure" in kinds else "error" if "error" in kinds
                            else "skipped" if "skipped" in kinds else "passed")
    return results


def run_side(side: Side, cwd: Path, ids: list[str], junit: Path) -> dict[str, str]:
    command = [side.python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(cwd),
               f"--junitxml={junit}", *ids]
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
    failing = [row for row in table if row.change == "NEWLY FAILS" or
               (row.test_id in own and row.stack in FAILED + ("absent",))]
    both = sum(row.stock in FAILED and row.stack in FAILED for row in table)
    print(f"{len(table)} tests: {newly_pass} newly pass with the stack, {len(failing)} fail with it "
          f"({both} fail on both sides)", file=out)
    if failing:
        raise WorkFailed(f"test: {len(failing)} tests fail with the stack (first: {failing[0].test_id})")
    return table


def _run_both(sides, cwd: Path, ids: list[str], junit_dir: Path, progress) -> dict:
    """Runs IDS on each of SIDES() (made only now: the overlay is built only if there is
    something to run)."""
    junit_dir.mkdir(parents=True, exist_ok=True)
    results = {}
    for side in sides():
        progress(f"test: {len(ids)} test files or classes on {side.name} ({side.python}) ...")
        results[side.name] = run_side(side, cwd, ids, junit_dir / f"{side.name}.xml")
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
            results = _run_both(sides, worktree / "test", relative, junit_dir or Path(tmp), progress)
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


def main(stack: Stack, out, junit_dir: Path | None = None, progress=lambda msg: print(msg, file=sys.stderr),
         pytorch: Path | None = None, onto: str | None = None, stock_python: str | None = None,
         patched_python: str | None = None, **overlay_options) -> list[Outcome]:
    lint.check(stack)
    if onto and pytorch is None:
        raise BadInput("--onto needs --pytorch DIR")
    if patched_python and overlay_options.get("cpp_from"):
        raise BadInput("--cpp-from is for the overlay; --patched-python brings its own torch")
    for name, python in (("stock", stock_python), ("patched", patched_python)):
        if python and not Path(python).is_file():
            raise BadInput(f"--{name}-python {python}: no such python")
    sides = functools.partial(make_sides, stack, stock_python, patched_python, **overlay_options)
    if pytorch is None:
        return from_patches(stack, out, junit_dir, sides, progress)
    return from_checkout(stack, pytorch, out, junit_dir, onto, sides, progress)
