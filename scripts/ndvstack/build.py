"""build --from-source: the patched wheel, made by upstream's own wheel build of a pytorch
checkout with the stack applied.

In the order it runs: the preflight (each check a one-line error that names what is
missing and what to do; nothing is changed before all pass), the plan (the environment
and the commands; `--dry-run` prints it and stops), then its steps: the stack applied in a
throw-away worktree and kept as refs/ndv/build; the dedicated build worktree moved to that
commit (made on the first run; later runs keep its build/ folder, and the compiler cache
keeps the objects); its submodules cloned from the checkout's own; upstream's wheel build
with the whole log in a file and one progress line; the wheel and its manifest into
dist/ by rename.
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

from ndvstack import apply, buildlog, lint
from ndvstack.atomic import build_dir
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
GIB_PER_JOB = {"cuda": 5, "cpu": 2}  # an nvcc job on flash-attention takes about 5 GB
FREE_GIB = {"cuda": 60, "cpu": 30}  # a first build; a build/ folder kept from a run needs less
FREE_GIB_REUSED = 10
BUILD_REF = "refs/ndv/build"
ERAS = {"setuptools": "setup.py, setuptools.build_meta", "scikit-build-core": "pyproject.toml, scikit_build_core.build"}
_SECRET = re.compile(r"TOKEN|SECRET|PASSW|CREDENTIAL|(^|_)(ACCESS_)?KEY(_ID)?$", re.IGNORECASE)


def _shown(key: str, value: str) -> str:
    """VALUE as the plan and the manifest may show it: no secrets, no URL credentials."""
    return "<set>" if _SECRET.search(key) else re.sub(r"://[^/@\s]*@", "://<credentials>@", value)


@dataclass
class Options:
    pytorch: Path
    onto: str | None = None
    cpu: bool = False
    python: str = "python3"
    build_root: Path | None = None  # default: <git common dir>/ndv-build
    compiler_cache: str | None = None  # ccache or sccache; default: whichever is on PATH
    remote_cache: str | None = None
    dist: Path = DEFAULT_DIST


@dataclass
class BuildPlan:
    checkout: Path
    sha: str  # the commit the stack goes onto
    onto: str  # the same, described: "<sha> (the base, v2.13.0)" or "<sha> (REV)"
    patches: list
    version: str
    era: str
    python: str
    worktree: Path
    log: Path
    dist: Path
    reuse: bool
    facts: list[tuple[str, str]] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)  # set for the build, on top of the caller's
    submodules: list[str] = field(default_factory=list)

    @property
    def out(self) -> Path:
        return self.worktree.parent / "out"

    def build_command(self) -> list[str]:
        command = [self.python, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(self.out)]
        if self.era == "scikit-build-core":  # keep the CMake build folder between runs
            command.append("--config-setting=build-dir=build")
        return command


# The preflight: each returns what it found or raises BadInput.

def _tool(host: Host, name: str, minimum: tuple[int, ...], hint: str) -> tuple[str, tuple[int, ...]]:
    path = host.which(name)
    if path is None:
        raise BadInput(f"{name} not found on PATH; {hint}")
    version = version_in(host.output([path, "--version"]))
    if version is None or version < minimum:
        found = dotted(version) if version else "an unknown version"
        raise BadInput(f"{path} is {found}; the build needs {name} >= {dotted(minimum)} ({hint})")
    return path, version


def _python(host: Host, python: str) -> tuple[str, tuple[int, ...]]:
    path = host.which(python) if "/" not in python else (python if Path(python).is_file() else None)
    if path is None:
        raise BadInput(f"{python}: no such python (pass --python PATH: the python the wheel is for)")
    version = version_in(host.output([path, "-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"]))
    if version is None or version < MIN_PYTHON:
        raise BadInput(f"{path} is Python {dotted(version) if version else '?'}; pytorch needs >= {dotted(MIN_PYTHON)}")
    return path, version


# Run by the target python: which of the requirements (PEP 508 strings) it lacks.
_MISSING_REQUIREMENTS = """\
import json, re, sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:  # presence only
    Requirement = None
missing = []
for text in json.loads(sys.argv[1]):
    req = Requirement(text) if Requirement else None
    if req and req.marker and not req.marker.evaluate():
        continue
    name = req.name if req else re.match(r"[A-Za-z0-9._-]+", text)[0]
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        missing.append(text)
        continue
    if req and not req.specifier.contains(version, prereleases=True):
        missing.append(f"{text} (has {version})")
print(json.dumps(missing))
"""


def _build_requirements(host: Host, python: str, requires: list[str]) -> None:
    out = host.output([python, "-c", _MISSING_REQUIREMENTS, json.dumps(["build", *requires])])
    missing = json.loads(out) if out else ["(could not ask the python)"]
    if missing:
        raise BadInput(f"{python} lacks build requirements: {', '.join(missing)} "
                       f"(pip install build and pytorch's requirements-build.txt)")


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


def _submodules(git: Git) -> list[str]:
    """The checkout's submodule paths, parents first; each must be checked out as recorded."""
    paths = []
    for line in git.out("submodule", "status", "--recursive").splitlines():
        state, path = line[:1], line[1:].split()[1]
        if state == "-":
            raise BadInput(f"{git.cwd}: submodule {path} is not initialised; "
                           f"run git submodule update --init --recursive")
        if state in "+U":
            raise BadInput(f"{git.cwd}: submodule {path} is not at the commit the checkout records; "
                           f"run git submodule update --recursive")
        paths.append(path)
    return paths


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


def _compiler_cache(host: Host, wanted: str | None, remote: str | None, worktree: Path,
                    cuda: bool) -> tuple[dict[str, str], str]:
    """The launcher environment and a description of it."""
    names = [wanted] if wanted else ["ccache", "sccache"]
    found = [(name, path) for name in names if (path := host.which(name))]
    if not found:
        raise BadInput(f"{' or '.join(names)} not found on PATH; install it (e.g. apt install ccache): "
                       f"without a compiler cache every rebuild starts from zero")
    name, path = found[0]
    version = version_in(host.output([path, "--version"]))
    languages = ["C", "CXX"] + (["CUDA"] if cuda else [])
    env = {f"CMAKE_{lang}_COMPILER_LAUNCHER": path for lang in languages}
    if name == "ccache":
        # Hits across checkouts and worktrees at other paths: paths relative to the worktree.
        env.update(CCACHE_BASEDIR=str(worktree), CCACHE_NOHASHDIR="true")
    if remote:
        env.update(_remote_cache(name, version, remote))
    own = sorted(key for key in host.env if key.startswith(("CCACHE_", "SCCACHE_")) and key not in env)
    described = f"{name} {dotted(version) if version else '?'} ({path}); remote: {_shown('', remote or 'none')}"
    if own:
        described += f"; yours: {', '.join(own)}"
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


def _python_first(env: dict[str, str], python: str) -> dict[str, str]:
    """ENV with PYTHON's bin folder first on PATH, as the build runs (render() shows it so)."""
    return {**env, "PATH": f"{Path(python).parent}:{env.get('PATH', '')}"}


def _release(git: Git, sha: str, stack: Stack) -> str:
    text = git.run("show", f"{sha}:version.txt", check=False).stdout.strip()
    return text.split("+")[0] if text else stack.base.release


def preflight(stack: Stack, options: Options, host: Host) -> BuildPlan:
    """Every check, then the plan; BadInput on the first that fails, nothing changed."""
    lint.check(stack)
    if host.which("git") is None:
        raise BadInput("git not found on PATH")
    git = open_checkout(options.pytorch)
    require_clean(git)
    if options.onto:
        sha = require_commit(git, options.onto, "the revision")
        onto = f"{sha} ({options.onto})"
    else:
        sha = require_base(git, stack.base)
        onto = f"{sha} (the base, v{stack.base.release})"
    submodules = _submodules(git)
    era, requires = _era(git, sha)
    python, python_version = _python(host, options.python)
    _build_requirements(host, python, requires)
    tools = dataclasses.replace(host, env=_python_first(host.env, python))  # its own cmake, ninja first
    cmake, cmake_version = _tool(tools, "cmake", MIN_CMAKE, "pip install 'cmake>=3.27' or your system's")
    ninja, ninja_version = _tool(tools, "ninja", MIN_NINJA, "pip install ninja")
    kind = "cpu" if options.cpu else "cuda"
    env = {}
    facts = [("python", f"{python} {dotted(python_version)}"), ("cmake", f"{cmake} {dotted(cmake_version)}"),
             ("ninja", f"{ninja} {dotted(ninja_version)}")]
    if options.cpu:
        env["USE_CUDA"] = "0"
        facts.append(("cuda", "off (--cpu)"))
        tag = "cpu"
    else:
        nvcc, cuda_version = _cuda(tools)
        arch_list, arch_source = _arch_list(tools)
        env.update(USE_CUDA="1", CUDA_HOME=str(Path(nvcc).parent.parent), TORCH_CUDA_ARCH_LIST=arch_list)
        facts += [("cuda", f"nvcc {dotted(cuda_version)} ({nvcc})"), ("arch list", f"{arch_list} ({arch_source})")]
        tag = f"cu{cuda_version[0]}{cuda_version[1]}"
    jobs, jobs_source = _max_jobs(host, kind)
    env["MAX_JOBS"] = jobs
    if era == "scikit-build-core":
        env["CMAKE_BUILD_PARALLEL_LEVEL"] = jobs
    facts.append(("max jobs", f"{jobs} ({jobs_source})"))

    build_root = options.build_root or Path(git.out("rev-parse", "--path-format=absolute", "--git-common-dir"),
                                            "ndv-build")
    worktree = build_root / "pytorch"
    reuse = worktree.is_dir()
    if reuse and not _is_worktree_of(git, worktree):
        raise BadInput(f"{worktree}: exists and is not a worktree of {git.cwd}; remove it or pass --build-root")
    cache_env, cache = _compiler_cache(tools, options.compiler_cache, options.remote_cache, worktree,
                                       cuda=not options.cpu)
    env.update(cache_env)
    facts.append(("cache", cache))
    need = FREE_GIB_REUSED if (worktree / "build").is_dir() else FREE_GIB[kind]
    free = free_at(host, build_root) // GIB
    if free < need:
        raise BadInput(f"only {free} GiB free at {build_root}; the build needs about {need} GiB "
                       f"(free some, or pass --build-root on a larger disk)")
    facts.append(("disk", f"{free} GiB free at {build_root}, about {need} GiB needed"))
    version = f"{_release(git, sha, stack)}+{tag}.{stack_label(stack, '')}"
    env.update(PYTORCH_BUILD_VERSION=version, PYTORCH_BUILD_NUMBER="1")
    return BuildPlan(checkout=git.cwd, sha=sha, onto=onto, patches=stack.patches(), version=version, era=era,
                     python=python, worktree=worktree, log=build_root / "build.log", dist=options.dist,
                     reuse=reuse, facts=facts, env=dict(sorted(env.items())), submodules=submodules)


def _is_worktree_of(git: Git, path: Path) -> bool:
    listed = [line.split(" ", 1)[1] for line in git.out("worktree", "list", "--porcelain").splitlines()
              if line.startswith("worktree ")]
    return str(path.resolve()) in {str(Path(p).resolve()) for p in listed}


def render(plan: BuildPlan) -> str:
    """The plan as `--dry-run` prints it: the same inputs give the same text."""
    lines = ["from-source build plan (dry run: nothing was run or changed)",
             f"  {'checkout':10s} {plan.checkout}",
             f"  {'onto':10s} {plan.onto}",
             f"  {'stack':10s} {len(plan.patches)} patches; version {plan.version}",
             f"  {'era':10s} {plan.era} ({ERAS[plan.era]})"]
    lines += [f"  {label:10s} {text}" for label, text in plan.facts]
    lines.append("environment (on top of yours):")
    for key, value in plan.env.items():
        lines.append(f"  {key}={_shown(key, value)}")
    lines.append(f"  PATH={Path(plan.python).parent}:$PATH")
    wt = plan.worktree
    lines += ["steps:",
              f"  1. git am --3way {len(plan.patches)} patches onto {plan.sha[:12]} in a throw-away worktree; "
              f"git update-ref {BUILD_REF} <the result>",
              f"  2. git -C {wt} checkout --detach {BUILD_REF}  (reused: its build/ is kept)" if plan.reuse else
              f"  2. git worktree add --detach {wt} {BUILD_REF}",
              f"  3. git submodule update --init, each from the checkout's own clone: "
              f"{', '.join(plan.submodules) or '(none)'}",
              f"  4. cd {wt} && {shlex.join(plan.build_command())} > {plan.log}",
              f"  5. the wheel and <wheel>.json into {plan.dist}/ by rename"]
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
    env = _python_first({**host.env, **plan.env}, plan.python)
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
    data = manifest(LayerPlan(plan.patches), stack.base, "source", label, None,
                    {"pytorch": str(plan.checkout), "onto": plan.onto, "commit": head, "era": plan.era,
                     "environment": {k: _shown(k, v) for k, v in plan.env.items()}})
    tmp = build_dir(plan.dist.parent, "ndv-wheel")
    try:
        staged = tmp / built.name  # a copy on dist's filesystem, so the publish is renames only
        shutil.copyfile(built, staged)
        publish(staged, data, plan.dist, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    progress(f"build: {plan.dist / built.name} ({seconds:.0f}s)")
    return plan.dist / built.name


def main(stack: Stack, options: Options, out, dry_run: bool = False, host: Host | None = None,
         progress=lambda msg: print(msg, file=sys.stderr)) -> Path | None:
    host = host or Host()
    plan = preflight(stack, options, host)
    if dry_run:
        out.write(render(plan))
        return None
    return execute(stack, plan, host, progress)
