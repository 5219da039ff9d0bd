"""The stack's native shims: which C++ patch each stands for (overlay/shims.toml), and
their build with the flags torch.utils.cpp_extension gives, cached by content hash."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ndvstack.atomic import build_dir, pause_point
from ndvstack.errors import BadInput, WorkFailed

SHIMS_FILE = "shims.toml"
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


@dataclass(frozen=True)
class Shim:
    patch: str
    name: str
    source: Path
    symbols: tuple[str, ...]
    # For each symbol, where the loader's import-time check reads what it is bound to: a
    # library that imports it (its GOT slot), or "global" (dlsym(RTLD_DEFAULT): the lookup
    # of every object loaded later, e.g. a C++ extension).
    bound_in: tuple[tuple[str, ...], ...]

    def sources(self) -> list[Path]:
        """The shim's own file and the headers beside it that it may include."""
        return [self.source, *sorted(self.source.parent.glob("*.h"))]


def load_shims(overlay_src: Path) -> dict[str, Shim]:
    """patch file name -> its Shim, validated."""
    path = overlay_src / SHIMS_FILE
    try:
        entries = tomllib.loads(path.read_text()).get("shim", [])
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise BadInput(f"{path}: cannot read it: {e}") from None
    shims: dict[str, Shim] = {}
    for number, entry in enumerate(entries, 1):
        where = f"{path} shim #{number}"
        missing = [k for k in ("patch", "name", "source", "symbols", "bound_in") if k not in entry]
        if missing:
            raise BadInput(f"{where}: missing {', '.join(missing)}")
        if not _NAME.match(entry["name"]):
            raise BadInput(f"{where}: name {entry['name']!r} is not lower_snake_case")
        source = overlay_src / entry["source"]
        if not source.is_file():
            raise BadInput(f"{where}: source {source} does not exist")
        if entry["patch"] in shims:
            raise BadInput(f"{where}: {entry['patch']} already has a shim")
        symbols = entry["symbols"]
        if not (isinstance(symbols, list) and symbols and all(isinstance(s, str) for s in symbols)):
            raise BadInput(f"{where}: symbols is not a list of mangled names")
        shims[entry["patch"]] = Shim(entry["patch"], entry["name"], source, tuple(symbols),
                                     _bound_in(entry["bound_in"], len(symbols), where))
    return shims


def _bound_in(value, count: int, where: str) -> tuple[tuple[str, ...], ...]:
    """bound_in as written: one place for every symbol ("libtorch_python"), or a list with one
    entry per symbol, each a place or a list of places."""
    if isinstance(value, str):
        return ((value,),) * count
    if isinstance(value, list) and len(value) == count:
        places = tuple((v,) if isinstance(v, str) else tuple(v) if isinstance(v, list) else () for v in value)
        if all(places) and all(isinstance(p, str) and p for ps in places for p in ps):
            return places
    raise BadInput(f"{where}: bound_in is neither a library name nor a list with one entry (a name "
                   f"or a list of names) per symbol")


def compiler() -> str:
    """The C++ compiler the shims are built with: $CXX, else c++."""
    return os.environ.get("CXX") or "c++"


@dataclass(frozen=True)
class Toolchain:
    """How shims are compiled for the installed torch."""
    compiler: str
    compiler_version: str
    cflags: tuple[str, ...]
    ldflags: tuple[str, ...]
    torch_lib: str

    @classmethod
    def detect(cls) -> "Toolchain":
        cxx = compiler()
        if shutil.which(cxx) is None:
            raise BadInput(f"no C++ compiler: {cxx} not found (install g++ or set CXX); "
                           f"the stack's C++ patches need their shims compiled")
        version = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout
        # Importing torch is the slow part of a cold build; a warm one never gets here. Its
        # cpp_extension warns at import on a machine without CUDA: not ours to print.
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
        import torch
        from torch.utils import cpp_extension
        includes = [flag for path in cpp_extension.include_paths() for flag in ("-isystem", path)]
        [torch_lib] = cpp_extension.library_paths()[:1]
        # The std::string ABI the wheel was built with (cpp_extension passes the same define).
        abi = f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}"
        # torch's headers' __FILE__ (in their checks' messages) as torch/include/..., not the venv's path.
        relative = f"-ffile-prefix-map={Path(torch.__file__).parent}=torch"
        return cls(cxx, version.splitlines()[0] if version else "unknown",
                   ("-O2", "-std=c++20", "-fPIC", abi, relative, "-shared", *includes),
                   (f"-L{torch_lib}", "-Wl,-rpath,$ORIGIN/../lib", "-Wl,--no-as-needed",
                    "-lc10", "-ltorch_cpu", "-ldl"),
                   torch_lib)

    def describe(self) -> dict:
        return {"compiler": self.compiler, "compiler_version": self.compiler_version,
                "cflags": list(self.cflags), "ldflags": list(self.ldflags)}


def shim_key(shim: Shim, toolchain_id: str) -> str:
    digest = hashlib.sha256(toolchain_id.encode())
    for path in shim.sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(json.dumps([shim.name, shim.symbols]).encode())
    return digest.hexdigest()


def exported_symbols(library: Path) -> dict[str, str]:
    """The dynamic symbols LIBRARY defines -> their nm type (T function, W weak, D/B data, ...)."""
    result = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True)
    rows = (line.split() for line in result.stdout.splitlines())
    return {row[-1]: row[-2] for row in rows if len(row) >= 2}


def defined_symbols(library: Path) -> set[str]:
    return set(exported_symbols(library))


def build(shim: Shim, toolchain: Toolchain, cache: Path, progress) -> Path:
    """The shim's library, compiled unless the cache has it for these sources and flags."""
    key = shim_key(shim, json.dumps(toolchain.describe()))
    cached = cache / "shims" / key[:32] / f"{shim.name}.so"
    if cached.is_file():
        return cached
    tmp = build_dir(cached.parent.parent, "shim")
    try:
        output = tmp / f"{shim.name}.so"
        # The shim's own __FILE__ as native/<file>, whichever clone it is compiled in.
        relative = f"-ffile-prefix-map={shim.source.parent}={shim.source.parent.name}"
        command = [toolchain.compiler, *toolchain.cflags, relative, str(shim.source), "-o", str(output),
                   *toolchain.ldflags]
        progress(f"compiling shim {shim.name} ({shim.source.name}) ...")
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            first_error = next((line for line in result.stderr.splitlines() if "error" in line),
                               result.stderr.strip()[-300:])
            raise WorkFailed(f"shim {shim.name} does not compile: {first_error}")
        missing = [s for s in shim.symbols if s not in defined_symbols(output)]
        if missing:
            raise WorkFailed(f"shim {shim.name} does not define {missing[0]} (is the signature right?)")
        libtorch = defined_symbols(Path(toolchain.torch_lib) / "libtorch_cpu.so")
        unknown = [s for s in shim.symbols if s not in libtorch]
        if unknown:
            raise WorkFailed(f"shim {shim.name}: libtorch_cpu.so exports no {unknown[0]}; "
                             f"the shim would replace nothing")
        pause_point("shim: compiled")
        try:
            tmp.rename(cached.parent)
        except OSError:  # another build put it there first: same key, same content
            pass
        return cached
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
