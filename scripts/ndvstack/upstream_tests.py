"""test: the upstream test files the stack adds, run stock vs patched (A/B), per test id.

Without a pytorch checkout, the test files the stack creates (new files under test/,
taken from the patches) are written to a temporary tree and run with pytest twice, on
stock torch and with the overlay (`run --stock` / `run`), each writing JUnit XML. The
report says, per test id, what passes and fails on each side; the run fails (exit 1) if
any test fails with the stack. Changes to existing upstream test files need a checkout
and are listed as not run.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass
from pathlib import Path

from ndvstack import lint, run
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.hunks import apply_to_tree
from ndvstack.stack import Stack

SIDES = ("stock", "stack")


@dataclass
class Outcome:
    test_id: str
    stock: str
    stack: str


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
    files = sorted(p for p in ours if (out / p).is_file() and Path(p).name.startswith("test_")
                   and p.endswith(".py"))
    return files, not_run


def outcomes(junit: Path) -> dict[str, str]:
    """test id -> passed / failed / error / skipped, from pytest's JUnit XML."""
    results = {}
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        test_id = f"{case.get('classname')}::{case.get('name')}"
        kinds = [child.tag for child in case]
        results[test_id] = ("failed" if "failure" in kinds else "error" if "error" in kinds
                            else "skipped" if "skipped" in kinds else "passed")
    return results


def run_side(stack: Stack, side: str, tree: Path, files: list[str], junit: Path,
             **overlay_options) -> dict[str, str]:
    env = run.environment(stack, stock=side == "stock", **overlay_options)
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tree),
               f"--junitxml={junit}", *files]
    result = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    if not junit.is_file():  # pytest itself failed (usage, collection crash)
        raise WorkFailed(f"pytest on {side} wrote no report: {result.stdout[-500:]}{result.stderr[-500:]}")
    return outcomes(junit)


def main(stack: Stack, out, junit_dir: Path | None = None, progress=lambda msg: print(msg, file=sys.stderr),
         **overlay_options) -> list[Outcome]:
    lint.check(stack)
    with tempfile.TemporaryDirectory(prefix="ndv-upstream-tests-") as tmp:
        tree = Path(tmp, "pytorch")
        tree.mkdir()
        files, not_run = new_test_files(stack, tree)
        for line in not_run:
            print(f"not run: {line}", file=out)
        if not files:
            raise BadInput("the stack adds no test files under test/; nothing to run without --pytorch")
        junit_dir = junit_dir or Path(tmp)
        junit_dir.mkdir(parents=True, exist_ok=True)
        results = {}
        for side in SIDES:
            progress(f"test: {len(files)} files on {side} ...")
            results[side] = run_side(stack, side, tree, files, junit_dir / f"{side}.xml", **overlay_options)
    ids = sorted(set(results["stock"]) | set(results["stack"]))
    table = [Outcome(i, results["stock"].get(i, "absent"), results["stack"].get(i, "absent")) for i in ids]
    for row in table:
        change = ("newly passes" if row.stock in ("failed", "error") and row.stack == "passed" else
                  "NEWLY FAILS" if row.stock == "passed" and row.stack in ("failed", "error") else "")
        print(f"{row.stock:8s} {row.stack:8s} {row.test_id} {change}".rstrip(), file=out)
    failing = [row for row in table if row.stack in ("failed", "error", "absent")]
    newly = sum(1 for row in table if row.stock in ("failed", "error") and row.stack == "passed")
    print(f"{len(table)} tests: {newly} newly pass with the stack, {len(failing)} fail with it", file=out)
    if failing:
        raise WorkFailed(f"test: {len(failing)} tests fail with the stack (first: {failing[0].test_id})")
    return table
