"""The stack's own tests: the test functions its patches add or change in upstream's test files.

A patch's tests are read from the patch, never named by hand. Its test/ hunks are applied
with `git apply` (never fuzz) to a copy of an upstream test tree (a folder holding test/...),
patch after patch, and every test_*.py file they touch is parsed with `ast` before and after:
each `def test...` that is new, or whose text (decorators included) changed, is one of the
patch's tests, as a pytest id `test/<file>.py::<Class>::<name>` (a module-level test
function: `test/<file>.py::<name>`). A test the patches remove is none of theirs.

Over the whole series a test is `new` (DIR's text lacks it: it must fail on stock and pass
with the stack) or `changed` (DIR has it, the stack changes it: it must pass with the stack).
"""

from __future__ import annotations

import ast
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ndvstack.errors import BadInput, WorkFailed
from ndvstack.hunks import apply_to_tree
from ndvstack.stack import Patch, is_test_file

ENV_VAR = "NDV_UPSTREAM_TESTS"


def given_or_env(given: Path | None) -> Path | None:
    """GIVEN (--upstream-tests), else $NDV_UPSTREAM_TESTS, else None."""
    return given or (Path(os.environ[ENV_VAR]) if os.environ.get(ENV_VAR) else None)


def upstream_dir(given: Path | None, what: str) -> Path:
    """The folder of upstream test files (it holds test/...): GIVEN, else $NDV_UPSTREAM_TESTS."""
    folder = given_or_env(given)
    if folder is None:
        raise BadInput(f"{what} needs upstream's test files (the stack's tests are methods its patches add to "
                       f"them): pass --upstream-tests DIR or set {ENV_VAR}=DIR (e.g. ../shared/upstream-2.15)")
    if not (folder / "test").is_dir():
        source = "--upstream-tests" if given else ENV_VAR
        raise BadInput(f"{source} {folder}: no test/ folder (give the folder that holds test/...)")
    return folder


def test_functions(text: str) -> dict[str, str]:
    """The test functions of a test module's TEXT: `Class::name` (or `name` at module level)
    -> its source, decorators included."""
    lines = text.splitlines(keepends=True)

    def source(node) -> str:
        start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        return "".join(lines[start - 1:node.end_lineno])

    def is_test(node) -> bool:
        return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")

    found = {}
    for node in ast.parse(text).body:
        if is_test(node):
            found[node.name] = source(node)
        elif isinstance(node, ast.ClassDef):
            found.update({f"{node.name}::{item.name}": source(item) for item in node.body if is_test(item)})
    return found


def changed_tests(path: str, old: str | None, new: str, what: str) -> dict[str, str]:
    """The tests in file PATH that NEW adds or changes from OLD (None: no file): pytest id ->
    new / changed. WHAT names the change in an error."""
    try:
        before = test_functions(old) if old is not None else {}
        after = test_functions(new)
    except SyntaxError as e:
        raise WorkFailed(f"{what}: {path} does not parse as Python (line {e.lineno}: {e.msg})") from None
    return {f"{path}::{key}": "changed" if key in before else "new"
            for key, text in after.items() if before.get(key) != text}


@dataclass
class OwnTests:
    """The series' test hunks applied to a copy of an upstream test tree."""

    tree: Path                                   # holds test/: DIR's files with the series' test hunks
    per_patch: dict[str, list[str]] = field(default_factory=dict)  # patch -> the ids it adds or changes
    new: list[str] = field(default_factory=list)      # ids DIR's text lacks
    changed: list[str] = field(default_factory=list)  # ids of DIR's text that the series changes
    kept: set[str] = field(default_factory=set)       # new ids of what works on stock (patches/regression-tests)

    @property
    def kind(self) -> dict[str, str]:
        """test id -> new / changed / kept, for every test of the series: a kept test is a new
        one that pins what works on stock (it must pass on both sides)."""
        return {**{i: "changed" for i in self.changed},
                **{i: "kept" if i in self.kept else "new" for i in self.new}}

    def patch_of(self, test_id: str) -> str:
        """The last patch that adds or changes TEST_ID."""
        return [name for name, ids in self.per_patch.items() if test_id in ids][-1]


def _read(path: Path) -> str | None:
    return path.read_text() if path.is_file() else None


def apply_test_hunks(patches: list[Patch], upstream: Path, tree: Path) -> OwnTests:
    """Copies UPSTREAM/test to TREE/test (a new folder; UPSTREAM is never written), applies
    each patch's test/ hunks there in order, and finds each patch's tests."""
    shutil.copytree(upstream / "test", tree / "test", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    own = OwnTests(tree)
    original: dict[str, str | None] = {}  # every test file the series touches (in order)
    for patch in patches:
        changes = [c for c in patch.files if c.path.startswith("test/")]
        files = [c for c in changes if c.new_path and is_test_file(c.new_path)]
        before = {c.new_path: _read(tree / (c.old_path or c.new_path)) for c in files}
        original.update(before)
        if changes:
            result = apply_to_tree(tree, changes, tree.parent / f"{patch.name}.test-hunks.diff")
            if result.returncode != 0:
                detail = (result.stderr.strip().splitlines() or ["git apply failed"])[0]
                raise WorkFailed(f"{patch.name}: its test hunks do not apply to {upstream / 'test'} "
                                 f"(git apply, no fuzz): {detail}")
        own.per_patch[patch.name] = [test_id for path, old in before.items()
                                     for test_id in changed_tests(path, old, _read(tree / path) or "", patch.name)]
    for path in original:
        old = _read(upstream / path)
        for test_id, kind in changed_tests(path, old, _read(tree / path) or "", "the series").items():
            (own.new if kind == "new" else own.changed).append(test_id)
    return own
