"""lint: check the stack in patches/ without any checkout, reporting every problem at once."""

from __future__ import annotations

import subprocess
from pathlib import PurePosixPath

from ndvstack.errors import BadInput, WorkFailed
from ndvstack.stack import ALLOWED_FILE, COVERAGE_FILE, SERIES_FILE, UNCOVERED_PREFIXES, Patch, Stack

SYMLINK_MODE = "120000"


def _path_problems(path: str, allowed: list[str]) -> list[str]:
    if path.startswith("/"):
        return [f"absolute path {path}"]
    if ".." in PurePosixPath(path).parts:
        return [f"path {path} contains '..'"]
    if not any(path.startswith(prefix) for prefix in allowed):
        return [f"path {path} is outside the allow-list ({ALLOWED_FILE})"]
    return []


def _patch_problems(patch: Patch, allowed: list[str]) -> list[str]:
    problems = []
    if not patch.subject:
        problems.append("commit message has no subject")
    if not patch.body:
        problems.append("commit message has no body (say why the change is right)")
    if not patch.files:
        problems.append("contains no diff")
    for change in patch.files:
        for path in dict.fromkeys(p for p in (change.old_path, change.new_path) if p):
            problems += _path_problems(path, allowed)
        if SYMLINK_MODE in (change.old_mode, change.new_mode):
            problems.append(f"{change.path} is a symlink")
        if change.binary:
            problems.append(f"{change.path} is a binary change")
        if change.old_mode and change.new_mode and change.old_path and change.new_path:
            kind = "a mode-only change" if not change.hunks else "changes its mode"
            problems.append(f"{change.path} is {kind} ({change.old_mode} -> {change.new_mode})")
    return problems


def _patch_id(patch: Patch) -> str | None:
    result = subprocess.run(["git", "patch-id", "--stable"], input=patch.path.read_bytes(),
                            capture_output=True)
    out = result.stdout.split()
    return out[0].decode() if out else None


def findings(stack: Stack) -> list[str]:
    """Every problem of the stack, one line each, in a stable order."""
    problems: list[str] = []

    def gather(load):
        try:
            return load()
        except BadInput as e:  # already names its file
            problems.append(str(e))
            return None

    gather(lambda: stack.base)
    allowed = gather(stack.allowed_paths) or []
    series = gather(stack.series)
    if series is None:
        return problems

    seen: set[str] = set()
    for name in series:
        if name in seen:
            problems.append(f"{SERIES_FILE}: {name} is listed twice")
        seen.add(name)
    for name in dict.fromkeys(series):
        if not (stack.dir / name).is_file():
            problems.append(f"{SERIES_FILE}: {name} is listed but has no file")
    for name in stack.patch_files():
        if name not in seen:
            problems.append(f"{name}: not listed in {SERIES_FILE}")

    coverage = gather(stack.coverage)
    ids: dict[str, str] = {}
    for name in dict.fromkeys(series):
        if not (stack.dir / name).is_file():
            continue
        patch = gather(lambda: Patch.load(stack.dir / name))
        if patch is None:
            continue
        problems += [f"{name}: {p}" for p in _patch_problems(patch, allowed)]
        if coverage is not None:
            problems += [f"{name}: {path} is covered by no entry of {COVERAGE_FILE}" for path in patch.touched
                         if not path.startswith(UNCOVERED_PREFIXES) and not any(path.startswith(c.path)
                                                                                for c in coverage)]
        pid = _patch_id(patch)
        if pid and pid in ids:
            problems.append(f"{name}: the same commit as {ids[pid]} (patch-id {pid[:12]})")
        elif pid:
            ids[pid] = name
    return problems


def _count(found: list[str]) -> str:
    return f"{len(found)} problem{'' if len(found) == 1 else 's'}"


def check(stack: Stack) -> None:
    """For the verbs that need a valid stack: refuse (exit 2) naming every finding."""
    found = findings(stack)
    if found:
        raise BadInput(f"the stack in {stack.dir} is invalid ({_count(found)}; "
                       f"see `stack.sh lint`): " + "; ".join(found))


def main(stack: Stack, out) -> None:
    found = findings(stack)
    for line in found:
        print(line, file=out)
    if found:
        raise WorkFailed(f"lint: {_count(found)} in {stack.dir}")
    print(f"lint: {len(stack.series())} patches, no problems", file=out)
