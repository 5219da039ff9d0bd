"""The stack as data: patches/{base.toml, series, allowed-paths, author, *.patch}.

Nothing here touches a checkout; `git mailinfo` is the only git used, and it needs none.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from ndvstack.errors import BadInput

REPO_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PATCHES = REPO_ROOT / "patches"

BASE_FILE = "base.toml"
SERIES_FILE = "series"
ALLOWED_FILE = "allowed-paths"
# Tests the stack adds that pin what works on stock (a program a withdrawn or reworked design
# broke): they must pass on stock and with the stack. One test id a line, `# why` after it.
REGRESSION_TESTS_FILE = "regression-tests"
COVERAGE_FILE = "upstream-tests.toml"
AUTHOR_FILE = "author"
# Paths that need no covering tests: tests themselves, and the docs.
UNCOVERED_PREFIXES = ("test/", "docs/")

_SHA = re.compile(r"^[0-9a-f]{40}$")
_RELEASE = re.compile(r"^\d+\.\d+\.\d+$")
_WHEEL = re.compile(r"^torch-(?P<version>[^-]+)-(?P<python>cp\d+)-(?P<abi>cp\d+)-(?P<platform>[^-]+)\.whl$")


def is_test_file(path: str) -> bool:
    """A pytest test module under test/: test/**/test_*.py."""
    return path.startswith("test/") and Path(path).name.startswith("test_") and path.endswith(".py")


@dataclass(frozen=True)
class Identity:
    """A git identity, `Name <email>`."""

    name: str
    email: str

    def __str__(self) -> str:
        return f"{self.name} <{self.email}>"

    _FORM = re.compile(r"^(?P<name>[^<>]*[^<>\s])\s+<(?P<email>[^<>\s]+@[^<>\s]+)>$")

    @classmethod
    def parse(cls, text: str) -> "Identity | None":
        m = cls._FORM.match(text.strip())
        return cls(m["name"], m["email"]) if m else None


@dataclass(frozen=True)
class Base:
    repo: str
    commit: str
    release: str
    wheel: str
    wheel_sha256: str

    @property
    def wheel_version(self) -> str:
        return _WHEEL.match(self.wheel)["version"]

    @classmethod
    def load(cls, path: Path) -> "Base":
        """Parses and validates base.toml; every problem is named in one BadInput."""
        try:
            data = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise BadInput(f"{path}: missing (the pinned base of the stack)") from None
        except tomllib.TOMLDecodeError as e:
            raise BadInput(f"{path}: not valid TOML: {e}") from None
        problems = []
        wheel = data.get("wheel", {})
        fields = {"repo": data.get("repo"), "commit": data.get("commit"), "release": data.get("release"),
                  "wheel.file": wheel.get("file"), "wheel.sha256": wheel.get("sha256")}
        problems += [f"{name} is missing" for name, value in fields.items() if not isinstance(value, str)]
        unknown = sorted(set(data) - {"repo", "commit", "release", "wheel"}) + \
            sorted(f"wheel.{k}" for k in set(wheel) - {"file", "sha256"})
        problems += [f"unknown key {k}" for k in unknown]
        present = {name: value for name, value in fields.items() if isinstance(value, str)}
        if "repo" in present and not present["repo"].startswith("https://github.com/"):
            problems.append(f"repo {present['repo']!r} is not a https://github.com/ URL")
        if "commit" in present and not _SHA.match(present["commit"]):
            problems.append(f"commit {present['commit']!r} is not a full 40-hex sha")
        if "release" in present and not _RELEASE.match(present["release"]):
            problems.append(f"release {present['release']!r} is not X.Y.Z")
        if "wheel.file" in present:
            m = _WHEEL.match(present["wheel.file"])
            if not m:
                problems.append(f"wheel.file {present['wheel.file']!r} is not a torch wheel file name")
            elif m["version"].split("+")[0] != present.get("release"):
                problems.append(f"wheel.file {present['wheel.file']!r} is not release {present.get('release')}")
        if "wheel.sha256" in present and not re.match(r"^[0-9a-f]{64}$", present["wheel.sha256"]):
            problems.append(f"wheel.sha256 {present['wheel.sha256']!r} is not a sha256")
        if problems:
            raise BadInput(f"{path}: " + "; ".join(problems))
        return cls(fields["repo"], fields["commit"], fields["release"], fields["wheel.file"],
                   fields["wheel.sha256"])


def read_list(path: Path) -> list[str]:
    """quilt's format: one entry per line, `#` comments and blank lines ignored."""
    entries = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            entries.append(line)
    return entries


@dataclass
class Hunk:
    header: str           # the @@ line
    old_start: int
    old_count: int
    new_start: int
    new_count: int
    lines: list[str]      # body lines, each starting with ' ', '+', '-' or '\\'


@dataclass
class FileChange:
    old_path: str | None  # None for a created file
    new_path: str | None  # None for a deleted file
    old_mode: str | None = None
    new_mode: str | None = None
    binary: bool = False
    hunks: list[Hunk] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.new_path or self.old_path

    @property
    def text(self) -> str:
        """This file's part of the diff, as `git apply` takes it."""
        return "".join(self._text)

    _text: list[str] = field(default_factory=list, repr=False)


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def _strip_prefix(raw: str, prefix: str) -> str:
    raw = raw.split("\t", 1)[0]
    if raw.startswith('"'):
        raw = raw[1:-1].encode("latin-1", "backslashreplace").decode("unicode_escape")
    return raw[len(prefix):] if raw.startswith(prefix) else raw


def parse_diff(text: str) -> list[FileChange]:
    """The file changes of a git diff (the part of a patch from the first `diff --git`)."""
    files: list[FileChange] = []
    lines = text.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.startswith("diff --git "):
            i += 1
            continue
        # `diff --git a/X b/X`: exact for same-path changes; ---/+++ or rename lines override.
        rest = line[len("diff --git "):].rstrip("\n")
        half = (len(rest) - 1) // 2
        change = FileChange(_strip_prefix(rest[:half], "a/"), _strip_prefix(rest[half + 1:], "b/"))
        change._text.append(line)
        i += 1
        while i < len(lines) and not lines[i].startswith(("diff --git ", "@@ ")):
            line = lines[i]
            if line.startswith("-- \n") or line == "--\n":
                break
            change._text.append(line)
            for key, attr in (("old mode ", "old_mode"), ("new mode ", "new_mode"),
                              ("deleted file mode ", "old_mode"), ("new file mode ", "new_mode")):
                if line.startswith(key):
                    setattr(change, attr, line[len(key):].strip())
            if line.startswith("new file mode "):
                change.old_path = None
            elif line.startswith("deleted file mode "):
                change.new_path = None
            elif line.startswith("rename from ") or line.startswith("copy from "):
                change.old_path = _strip_prefix(line.split(" ", 2)[2].rstrip("\n"), "")
            elif line.startswith("rename to ") or line.startswith("copy to "):
                change.new_path = _strip_prefix(line.split(" ", 2)[2].rstrip("\n"), "")
            elif line.startswith("--- "):
                raw = line[4:].rstrip("\n")
                change.old_path = None if raw == "/dev/null" else _strip_prefix(raw, "a/")
            elif line.startswith("+++ "):
                raw = line[4:].rstrip("\n")
                change.new_path = None if raw == "/dev/null" else _strip_prefix(raw, "b/")
            elif line.startswith(("GIT binary patch", "Binary files ")):
                change.binary = True
            i += 1
        while i < len(lines) and lines[i].startswith("@@ "):
            m = _HUNK.match(lines[i])
            if not m:
                break
            hunk = Hunk(lines[i].rstrip("\n"), int(m[1]), int(m[2] or 1), int(m[3]), int(m[4] or 1), [])
            change._text.append(lines[i])
            i += 1
            old_left, new_left = hunk.old_count, hunk.new_count
            while i < len(lines) and (old_left > 0 or new_left > 0 or lines[i].startswith("\\")):
                body = lines[i]
                kind = body[:1]
                if kind == " " or body == "\n":
                    old_left, new_left = old_left - 1, new_left - 1
                elif kind == "-":
                    old_left -= 1
                elif kind == "+":
                    new_left -= 1
                elif kind != "\\":
                    break
                hunk.lines.append(body)
                change._text.append(body)
                i += 1
            change.hunks.append(hunk)
        files.append(change)
    return files


@dataclass
class Patch:
    """One format-patch file: its commit message (via `git mailinfo`) and its file changes."""

    name: str
    path: Path
    author: str
    email: str
    date: str
    subject: str
    body: str
    files: list[FileChange]

    @classmethod
    def load(cls, path: Path) -> "Patch":
        """Raises BadInput naming the file when `git mailinfo` cannot parse it."""
        raw = path.read_bytes()
        with tempfile.TemporaryDirectory(prefix="ndv-mailinfo-") as tmp:
            msg, diff = Path(tmp, "msg"), Path(tmp, "diff")
            # -b: strip only [PATCH]; upstream subjects start with tags like "[inductor]".
            result = subprocess.run(["git", "mailinfo", "-b", "--encoding=UTF-8", str(msg), str(diff)],
                                    input=raw, capture_output=True, cwd=tmp)
            info = dict(line.split(": ", 1) for line in result.stdout.decode().splitlines() if ": " in line)
            error = result.stderr.decode(errors="replace").strip().replace(str(diff), path.name)
            # A message without a diff is "empty patch" to mailinfo; lint reports it as such.
            if not raw.strip():
                raise BadInput(f"{path.name}: empty file (format-patch writes one for an empty commit)")
            if result.returncode != 0 and "empty patch" not in error:
                raise BadInput(f"{path.name}: git mailinfo cannot parse it: {error}")
            if not info.get("Author") or not info.get("Date"):
                raise BadInput(f"{path.name}: git mailinfo cannot parse it: no From:/Date: header")
            body = msg.read_text(encoding="utf-8", errors="replace").strip() if msg.exists() else ""
            diff_text = diff.read_text(encoding="utf-8", errors="surrogateescape") if diff.exists() else ""
        return cls(path.name, path, info["Author"], info.get("Email", ""), info["Date"],
                   info.get("Subject", "").strip(), body, parse_diff(diff_text))

    @property
    def touched(self) -> list[str]:
        return sorted({p for f in self.files for p in (f.old_path, f.new_path) if p})


_TEST_ID = re.compile(r"^test/[\w/.-]+\.py(::\w+)?$")


@dataclass(frozen=True)
class QuickPick:
    """Part of an entry's tests for `test.sh --upstream-tests --select quick`: a test file
    or file::Class, and a pytest -k expression (None: all of it)."""

    test: str
    k: str | None = None


@dataclass(frozen=True)
class Coverage:
    """One entry of upstream-tests.toml: a path prefix the stack touches, the upstream
    test files (or file::Class) that exercise it, and the quick subset of them."""

    path: str
    tests: tuple[str, ...]
    quick: tuple[QuickPick, ...] = ()
    # Files only a pytorch checkout has (not the shared folder of upstream test files): run by
    # `test.sh --pytorch`, never by `--upstream-tests`.
    checkout_only: tuple[str, ...] = ()


def _quick_picks(prefix: str, tests: list, picks) -> tuple[list[QuickPick], list[str]]:
    if not isinstance(picks, list) or not picks:
        return [], [f"[[cover]] {prefix}: needs quick = [{{ test = \"test/...\", k = \"...\" }}, ...] "
                    "(the subset --select quick runs)"]

    def part_of_tests(test: str) -> bool:  # one of them, or a class of a whole file among them
        return any(test == t or ("::" not in t and test.startswith(t + "::")) for t in tests if isinstance(t, str))

    found, problems = [], []
    for pick in picks:
        if not isinstance(pick, dict) or set(pick) - {"test", "k"} or not isinstance(pick.get("test"), str) \
                or not isinstance(pick.get("k", ""), str):
            problems.append(f"[[cover]] {prefix}: quick item {pick!r} is not {{ test = \"...\", k = \"...\" }}")
        elif not _TEST_ID.match(pick["test"]) or not part_of_tests(pick["test"]):
            problems.append(f"[[cover]] {prefix}: quick test {pick['test']!r} is not part of its tests")
        else:
            found.append(QuickPick(pick["test"], pick.get("k")))
    return found, problems


def _load_map(path: Path) -> tuple[list[Coverage], list[str]]:
    """(the [[cover]] entries, the sweeps: file::Class prefixes only --select full runs)."""
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{path}: not valid TOML: {e}") from None
    entries, problems = [], []
    for number, entry in enumerate(data.get("cover", []), 1):
        prefix, tests = entry.get("path"), entry.get("tests")
        if not isinstance(prefix, str) or not isinstance(tests, list) or not tests:
            problems.append(f"[[cover]] {number} needs path = \"...\" and tests = [\"test/...\", ...]")
            continue
        problems += [f"[[cover]] {prefix}: {t!r} is not test/....py or test/....py::Class"
                     for t in tests if not isinstance(t, str) or not _TEST_ID.match(t)]
        checkout_only = entry.get("checkout_only", [])
        if not isinstance(checkout_only, list) or not all(isinstance(t, str) and _TEST_ID.match(t)
                                                          for t in checkout_only):
            problems.append(f"[[cover]] {prefix}: checkout_only must be a list of test/....py or test/....py::Class")
            checkout_only = []
        quick, quick_problems = _quick_picks(prefix, tests, entry.get("quick"))
        problems += quick_problems
        problems += [f"[[cover]] {prefix}: unknown key {k}"
                     for k in sorted(set(entry) - {"path", "tests", "quick", "checkout_only"})]
        entries.append(Coverage(prefix, tuple(tests), tuple(quick), tuple(checkout_only)))
    sweeps = data.get("sweeps", [])
    if not isinstance(sweeps, list) or not all(isinstance(s, str) and _TEST_ID.match(s) for s in sweeps):
        problems.append("sweeps must be a list of test/....py::Class")
    unknown = sorted(set(data) - {"cover", "sweeps"})
    problems += [f"unknown key {k}" for k in unknown]
    if problems:
        raise BadInput(f"{path}: " + "; ".join(problems))
    return entries, sweeps


def load_coverage(path: Path) -> list[Coverage]:
    return _load_map(path)[0]


@dataclass
class Stack:
    dir: Path

    @property
    def base(self) -> Base:
        return Base.load(self.dir / BASE_FILE)

    def series(self) -> list[str]:
        path = self.dir / SERIES_FILE
        if not path.is_file():
            raise BadInput(f"{path}: missing (the order of the patches)")
        return read_list(path)

    def regression_tests(self) -> set[str]:
        """The test ids of REGRESSION_TESTS_FILE (none if there is no such file)."""
        path = self.dir / REGRESSION_TESTS_FILE
        return set(read_list(path)) if path.is_file() else set()

    def allowed_paths(self) -> list[str]:
        path = self.dir / ALLOWED_FILE
        if not path.is_file():
            raise BadInput(f"{path}: missing (the paths the stack may touch)")
        return read_list(path)

    def author(self) -> Identity:
        """The one author of every patch (patches/author: `Name <email>`)."""
        path = self.dir / AUTHOR_FILE
        if not path.is_file():
            raise BadInput(f"{path}: missing (the one author of the stack's patches, `Name <email>`)")
        entries = read_list(path)
        identity = Identity.parse(entries[0]) if len(entries) == 1 else None
        if identity is None:
            raise BadInput(f"{path}: must hold one line `Name <email>` (the one author of the stack's patches)")
        return identity

    def coverage(self) -> list[Coverage] | None:
        """upstream-tests.toml's entries; None if the stack has no such file."""
        path = self.dir / COVERAGE_FILE
        return load_coverage(path) if path.is_file() else None

    def sweeps(self) -> list[str]:
        """upstream-tests.toml's sweeps (OpInfo/ModuleInfo-parametrized classes): run only when asked."""
        path = self.dir / COVERAGE_FILE
        return _load_map(path)[1] if path.is_file() else []

    def patches(self) -> list[Patch]:
        """The series' patches in order. Assumes a lint-clean stack."""
        return [Patch.load(self.dir / name) for name in self.series()]

    def patch_files(self) -> list[str]:
        return sorted(p.name for p in self.dir.glob("*.patch"))
