"""lint --upstream-tests DIR: upstream's linters on the lines each patch adds.

The files the stack touches are laid out at the base in a scratch git repository (each from DIR
where DIR has it, as test.sh and verify-cpp read the C++ and test texts; torch/** otherwise from
the installed base wheel) and the patches are applied on top, one commit each (`git apply`,
no fuzz). Each patch's files are then linted as that patch leaves them, with upstream's settings
(a pytorch tree's own .clang-format, pyproject.toml and .flake8, or those in DIR/lint/, as CI's
test data has them):

  - clang-format on C++ (upstream's CLANGFORMAT), ruff format, ruff check and flake8 on Python;
  - upstream's line linters: a bare `# noqa` or `# type: ignore` (NOQA, TYPEIGNORE), trailing
    spaces (SPACES), tabs (TABS), `#include "..."` in torch/csrc (INCLUDE).

A finding counts only on a line the patch adds (a formatter's rewrite counts when it touches
one): what was there before is the base's, or an earlier patch's. mypy is not run: no mypy.ini
near 2.15 is at hand.
"""

from __future__ import annotations

import difflib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ndvstack.basetree import SCRATCH_IDENTITY, text_at
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.git import Git
from ndvstack.progress import count
from ndvstack.stack import Patch, Stack

CONFIGS = (".clang-format", "pyproject.toml", ".flake8")
CPP_SUFFIXES = (".cpp", ".h", ".hpp", ".cc", ".cu", ".cuh")
# The linters, by the program each runs (from the venv's bin/, pinned in pyproject.toml).
PROGRAMS = {"clang-format": "clang-format", "ruff": "ruff", "flake8": "flake8"}


@dataclass(frozen=True)
class Finding:
    patch: str
    path: str
    line: int
    linter: str
    message: str

    def __str__(self) -> str:
        return f"{self.patch}: {self.path}:{self.line}: " + (f"{self.linter}: " if self.linter else "") + self.message


def config_dir(upstream: Path) -> Path:
    """Where upstream's linter settings are: DIR/lint/, or DIR itself (a pytorch tree)."""
    for folder in (upstream / "lint", upstream):
        if all((folder / name).is_file() for name in CONFIGS):
            return folder
    raise BadInput(f"--upstream-tests {upstream}: no upstream linter settings ({', '.join(CONFIGS)}) "
                   f"in it or in its lint/ folder")


def program(name: str) -> str:
    path = Path(sys.executable).parent / PROGRAMS[name]
    if not path.exists():
        found = shutil.which(PROGRAMS[name])
        if not found:
            raise WorkFailed(f"{name} is not installed (scripts/_venv.sh installs it, pinned in pyproject.toml)")
        return found
    return str(path)


def versions() -> dict[str, str]:
    """Each linter's version, as it prints it."""
    def version(out: str) -> str:
        found = re.search(r"\d+\.\d+(\.\d+)?", out)
        return found.group(0) if found else "?"

    said = {name: subprocess.run([program(name), "--version"], capture_output=True, text=True).stdout
            for name in PROGRAMS}
    plugins = re.findall(r"([\w-]+): (\d+[\w.]*)", said["flake8"].split("\n", 1)[0].split("(", 1)[-1])
    return {"clang-format": version(said["clang-format"]), "ruff": version(said["ruff"]),
            "flake8": version(said["flake8"]) + "".join(
                f" + {name} {v}" for name, v in plugins if name not in ("mccabe", "pycodestyle", "pyflakes"))}


def base_text(path: str, upstream: Path, torch_dir: Path | None) -> bytes:
    text = text_at(path, upstream, torch_dir)
    if text is not None:
        return text
    raise BadInput(f"no base text of {path}: --upstream-tests {upstream} lacks it, and "
                   + ("the installed torch is not the base" if torch_dir is None else "the base wheel's torch/ too"))


def stacked_repo(patches: list[Patch], upstream: Path, torch_dir: Path | None, folder: Path) -> tuple[Git, list[str]]:
    """A git repository of the touched files at the base, then one commit per patch (their shas)."""
    git = Git(folder)
    git.run("init", "--quiet")
    created = {c.new_path for p in patches for c in p.files if c.old_path is None and c.new_path}
    for path in sorted({path for p in patches for path in p.touched} - created):
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_bytes(base_text(path, upstream, torch_dir))
    git.run("add", "-A")
    git.run("commit", "--quiet", "--allow-empty", "-m", "base", env=SCRATCH_IDENTITY)
    commits = []
    for patch in patches:
        result = git.run("apply", "--index", str(patch.path), check=False)
        if result.returncode != 0:
            raise WorkFailed(f"{patch.path.name} does not apply to the base texts: "
                             f"{result.stderr.strip().splitlines()[0] if result.stderr.strip() else '?'}")
        git.run("commit", "--quiet", "--allow-empty", "-m", patch.path.name, env=SCRATCH_IDENTITY)
        commits.append(git.out("rev-parse", "HEAD"))
    return git, commits


def added_lines(git: Git, rev: str) -> dict[str, set[int]]:
    """Path -> the line numbers commit REV adds (in its text after REV)."""
    added: dict[str, set[int]] = {}
    path = None
    for line in git.out("diff", "-U0", "--no-color", "--no-renames", f"{rev}~1", rev).splitlines():
        if line.startswith("+++ "):
            path = None if line == "+++ /dev/null" else line[len("+++ b/"):]
        elif line.startswith("@@") and path is not None:
            start, _, length = re.match(r"@@ -\S+ \+(\d+)(,(\d+))? @@", line).groups()
            first, n = int(start), 1 if length is None else int(length)
            added.setdefault(path, set()).update(range(first, first + n))
    return added


def rewritten_lines(text: str, formatted: str) -> list[tuple[int, int]]:
    """The (first, last) line ranges of TEXT, 1-based, that a formatter's FORMATTED changes;
    a pure insertion is the line before and after it."""
    ranges = []
    matcher = difflib.SequenceMatcher(a=text.splitlines(), b=formatted.splitlines(), autojunk=False)
    for tag, a0, a1, _, _ in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            ranges.append((a0 + 1, a1))
        elif tag == "insert":
            ranges.append((max(a0, 1), a0 + 1))
    return ranges


def _formatter(name: str, args: list[str], path: str, tree: Path, lines: set[int]) -> list[tuple[int, str]]:
    text = (tree / path).read_text()
    result = subprocess.run([program(name), *args], input=text, capture_output=True, text=True, cwd=tree)
    if result.returncode != 0:
        return [(min(lines), f"failed: {result.stderr.strip().splitlines()[-1] if result.stderr.strip() else '?'}")]
    found = []
    for first, last in rewritten_lines(text, result.stdout):
        touched = sorted(n for n in range(first, last + 1) if n in lines)
        if touched:
            where = f"lines {first}-{last}" if last > first else f"line {first}"
            found.append((touched[0], f"would reformat {where}"))
    return found


def clang_format(path: str, tree: Path, lines: set[int]) -> list[tuple[int, str]]:
    return _formatter("clang-format", ["--style=file", f"--assume-filename={tree / path}"], path, tree, lines)


def ruff_format(path: str, tree: Path, lines: set[int]) -> list[tuple[int, str]]:
    return _formatter("ruff", ["format", "--stdin-filename", path, "-"], path, tree, lines)


def ruff_check(path: str, tree: Path, lines: set[int]) -> list[tuple[int, str]]:
    result = subprocess.run([program("ruff"), "check", "--no-cache", "--output-format", "json",
                             "--exit-zero", path], capture_output=True, text=True, cwd=tree)
    if result.returncode != 0:
        raise WorkFailed(f"ruff check {path} failed: {result.stderr.strip()}")
    return [(d["location"]["row"], f"{d['code']} {d['message']}") for d in json.loads(result.stdout)
            if d["location"]["row"] in lines]


def flake8_findings(path: str, tree: Path) -> list[tuple[int, str]]:
    result = subprocess.run([program("flake8"), "--format=%(row)d\t%(code)s %(text)s", path],
                            capture_output=True, text=True, cwd=tree)
    if result.returncode not in (0, 1):
        raise WorkFailed(f"flake8 {path} failed: {result.stderr.strip()}")
    rows = [line.partition("\t") for line in result.stdout.splitlines()]
    return [(int(row), message) for row, _, message in rows if row.isdigit()]


def flake8(path: str, tree: Path, lines: set[int], skew: set[str] = frozenset()) -> list[tuple[int, str]]:
    """flake8's findings on LINES, but for the codes in SKEW (see lint_patches)."""
    return [(row, message) for row, message in flake8_findings(path, tree)
            if row in lines and message.split(" ", 1)[0] not in skew]


_BARE_NOQA = re.compile(r"#\s*noqa(?!:\s*[A-Z]+\d+)", re.I)
_BARE_TYPE_IGNORE = re.compile(r"#\s*type:\s*ignore(?!\[)")


def line_linters(path: str, tree: Path, lines: set[int]) -> list[tuple[int, str]]:
    """Upstream's line linters (NOQA, TYPEIGNORE, SPACES, TABS, INCLUDE) on the added lines."""
    found = []
    python = path.endswith((".py", ".pyi"))
    for number, line in enumerate((tree / path).read_text().splitlines(), 1):
        if number not in lines:
            continue
        if line != line.rstrip():
            found.append((number, "SPACES trailing spaces"))
        if "\t" in line:
            found.append((number, "TABS a tab"))
        if python and _BARE_NOQA.search(line):
            found.append((number, "NOQA a bare `# noqa`: name the code (`# noqa: F401`)"))
        if python and _BARE_TYPE_IGNORE.search(line):
            found.append((number, "TYPEIGNORE a bare `# type: ignore`: name the code (`# type: ignore[attr-defined]`)"))
        if path.startswith("torch/csrc/") and re.match(r'\s*#\s*include\s+"', line):
            found.append((number, 'INCLUDE `#include "..."`: upstream writes `#include <...>`'))
    return found


def linters_for(path: str) -> list:
    if path.endswith(CPP_SUFFIXES):
        return [("clang-format", clang_format), ("lines", line_linters)]
    if path.endswith(".py"):
        return [("ruff format", ruff_format), ("ruff check", ruff_check), ("flake8", flake8),
                ("lines", line_linters)]
    return [("lines", line_linters)]


def lint_patches(stack: Stack, upstream: Path, torch_dir: Path | None,
                 progress=lambda msg: None) -> tuple[list[Finding], dict[str, set[str]]]:
    """Every finding a patch of STACK adds, in series order; and the flake8 codes not counted, by
    path: those the file already has at the base. The .flake8 at hand is older than the base, and
    upstream's CI passes the base, so a code the base has is one upstream does not enforce there
    (test files' expected graphs are longer than B950 allows, for one)."""
    configs = config_dir(upstream)
    patches = stack.patches()
    found: list[Finding] = []
    with tempfile.TemporaryDirectory(prefix="ndv-lint-") as tmp:
        tree = Path(tmp)
        git, commits = stacked_repo(patches, upstream, torch_dir, tree)
        for name in CONFIGS:  # the settings at the tree's root, where each linter looks first
            shutil.copyfile(configs / name, tree / name)
        git.run("checkout", "--quiet", "--detach", f"{commits[0]}~1")
        skew = {path: {message.split(" ", 1)[0] for _, message in flake8_findings(path, tree)}
                for path in git.out("ls-files").splitlines() if path.endswith(".py")}
        for k, (patch, commit) in enumerate(zip(patches, commits, strict=True), 1):
            git.run("checkout", "--quiet", "--detach", commit)
            progress(f"lint: {patch.path.name} ({k}/{len(patches)})")
            for path, lines in sorted(added_lines(git, commit).items()):
                if path in CONFIGS or not (tree / path).is_file():
                    continue
                for linter, run in linters_for(path):
                    extra = {"skew": skew.get(path, set())} if linter == "flake8" else {}
                    found += [Finding(patch.path.name, path, line, "" if linter == "lines" else linter, message)
                              for line, message in run(path, tree, lines, **extra)]
    return found, {path: codes for path, codes in skew.items() if codes}


def main(stack: Stack, upstream: Path, torch_dir: Path | None, out, progress=lambda msg: None) -> list[str]:
    """Lint the stack's code; print the findings and a summary line; return the findings."""
    if not upstream.is_dir():
        raise BadInput(f"--upstream-tests {upstream}: no such folder")
    tools = versions()
    found, skew = lint_patches(stack, upstream, torch_dir, progress)
    lines = [str(f) for f in found]
    for line in lines:
        print(line, file=out)
    for path, codes in sorted(skew.items()):
        print(f"lint: not counted in {path}: flake8 {', '.join(sorted(codes))} (the base has them)", file=out)
    print(f"lint: upstream's linters ({', '.join(f'{name} {v}' for name, v in tools.items())}, and the NOQA, "
          f"TYPEIGNORE, SPACES, TABS and INCLUDE line linters) on the lines the "
          f"{len(stack.series())} patches add: {count(len(found), 'problem') if found else 'no problems'}", file=out)
    return lines
