"""lint: check the stack in patches/ without any checkout, reporting every problem at once.

Two kinds of finding. The stack's form (findings): every verb that uses the stack refuses a
stack with one. Upstream's form (message_findings): what upstream's review and CLA check
would refuse; `lint` and `submit` refuse them, while the other verbs still work on a stack
being written:
  - a new test file (a patch creating test/**/test_*.py) unless its message says why, in a
    line "New test file: <reason>": tests go into the upstream file and class that own the area;
  - a message without a "Test Plan:" section naming at least one command;
  - an author other than the stack's one identity (patches/author), or a placeholder identity;
  - process text of ours (PROCESS_TEXT) that upstream would not take;
  - a malformed "Fixes" line.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import PurePosixPath

from ndvstack.errors import BadInput, WorkFailed
from ndvstack.progress import count
from ndvstack.stack import (ALLOWED_FILE, AUTHOR_FILE, COVERAGE_FILE, SERIES_FILE, UNCOVERED_PREFIXES, Identity,
                            Patch, Stack, is_test_file)

SYMLINK_MODE = "120000"

NEW_TEST_FILE = "New test file:"
# Words of our own process, never upstream's: kept small, each with why.
PROCESS_TEXT = {
    r"\bissues? \d+": "this project's tracker (upstream's issues are #N)",
    r"\bsessions?\b": "how the work was done",
    r"\bscoreboard\b": "this project's test harness",
    r"\bshims?\b": "this project's overlay of native code",
    r"\breconstruct\w*": "how the text was recovered",
}
# A command in a test plan: optional VAR=value settings, then a program upstream's plans use.
_COMMAND = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:python3?|pytest|\./|bash\b|sh\b|ctest\b|"
                      r"build/bin/|buck2?\b|lintrunner\b|torchrun\b)")
_SECTION = re.compile(r"^[A-Za-z][\w -]*:( |$)")  # a heading ("Release note:") or a trailer
_FIXES_LINE = re.compile(r"^\s*(fix(es|ed)?|close[sd]?|resolve[sd]?)\b[\s:]*(#|https?://|[\w.-]+/[\w.-]+#)", re.I)
_FIXES = re.compile(r"^Fixes (#\d+|[\w.-]+/[\w.-]+#\d+|https://github\.com/[\w.-]+/[\w.-]+/issues/\d+)$")


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


def placeholder(identity: Identity) -> str | None:
    """Why IDENTITY is a placeholder that a CLA check would refuse, or None."""
    domain = identity.email.rsplit("@", 1)[-1].lower()
    if domain in ("example.com", "example.org", "example.net", "localhost") or "." not in domain or \
            domain.endswith((".example", ".invalid", ".test", ".localhost", ".local")):
        return f"the address is at {domain}"
    if identity.name.strip().lower() == "lead" or re.match(r"^seed\b.*\bmaintainers$", identity.name.strip(), re.I):
        return f"the name {identity.name!r} is a placeholder"
    return None


def _test_plan_problem(body: str) -> str | None:
    lines = body.splitlines()
    starts = [i for i, line in enumerate(lines) if re.match(r"^\s*Test Plan:", line, re.I)]
    if not starts:
        return "commit message has no `Test Plan:` section (the exact commands that test it)"
    section = [lines[starts[0]].split(":", 1)[1]]
    for line in lines[starts[0] + 1:]:
        if _SECTION.match(line) and not _COMMAND.match(line):
            break
        section.append(line)
    for line in section:
        line = line.strip().removeprefix("$ ").strip("`").strip()
        if _COMMAND.match(line):
            return None
    return "its `Test Plan:` names no command (e.g. `python test/test_autograd.py -k ...`)"


def _message_problems(patch: Patch, author: Identity | None) -> list[str]:
    problems = []
    message = f"{patch.subject}\n\n{patch.body}"
    created = [c.path for c in patch.files if c.old_path is None and c.new_path and is_test_file(c.new_path)]
    if created and not re.search(rf"^{NEW_TEST_FILE}\s*\S", message, re.M):
        problems.append(f"creates the test file {created[0]}: put its tests in the upstream file and class that own "
                        f"the area, or say why in a line `{NEW_TEST_FILE} <reason>`")
    plan = _test_plan_problem(patch.body)
    if plan:
        problems.append(plan)
    identity = Identity(patch.author, patch.email)
    why = placeholder(identity)
    if author is not None and identity != author:
        problems.append(f"author {identity} is not the stack's author {author} ({AUTHOR_FILE}); re-export "
                        f"(stack.sh export) to write it{'; and it is a placeholder: ' + why if why else ''}")
    elif why:
        problems.append(f"author {identity} is a placeholder identity ({why}): a CLA check refuses it")
    found = [f"{m[0]!r} (line {number}: {reason})" for number, line in enumerate(message.splitlines(), 1)
             for pattern, reason in PROCESS_TEXT.items() for m in re.finditer(pattern, line, re.I)]
    if found:
        problems.append(f"commit message has process text upstream would not take: {', '.join(found)}")
    for line in message.splitlines():
        if _FIXES_LINE.match(line) and not _FIXES.match(line):
            problems.append(f"malformed Fixes line {line.strip()!r}: write `Fixes #N`, `Fixes owner/repo#N` or "
                            f"`Fixes https://github.com/owner/repo/issues/N`, one per line")
    return problems


def message_findings(stack: Stack) -> list[str]:
    """What upstream's review and CLA check would refuse (see the module's doc), one line each.
    Assumes the series itself is readable (findings() is clean of it)."""
    problems = []
    author = None
    try:
        author = stack.author()
        why = placeholder(author)
        if why:
            problems.append(f"{stack.dir / AUTHOR_FILE}: {author} is a placeholder identity ({why}): a CLA check "
                            f"refuses it")
    except BadInput as e:
        problems.append(str(e))
    try:
        names = stack.series()
    except BadInput:
        return problems
    for name in dict.fromkeys(names):
        try:
            patch = Patch.load(stack.dir / name)
        except (BadInput, OSError):
            continue  # findings() names it
        problems += [f"{name}: {p}" for p in _message_problems(patch, author)]
    return problems


def findings(stack: Stack) -> list[str]:
    """Every problem of the stack's form, one line each, in a stable order."""
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


def check(stack: Stack, messages: bool = False) -> None:
    """For the verbs that need a valid stack: refuse (exit 2) naming every finding; with
    MESSAGES (submit), upstream's form too."""
    found = findings(stack)
    if messages and not found:
        found = message_findings(stack)
    if found:
        raise BadInput(f"the stack in {stack.dir} is invalid ({count(len(found), 'problem')}; "
                       f"see `stack.sh lint`): " + "; ".join(found))


def main(stack: Stack, out) -> None:
    found = findings(stack)
    found += message_findings(stack)
    for line in found:
        print(line, file=out)
    if found:
        raise WorkFailed(f"lint: {count(len(found), 'problem')} in {stack.dir}")
    print(f"lint: {len(stack.series())} patches, no problems", file=out)
