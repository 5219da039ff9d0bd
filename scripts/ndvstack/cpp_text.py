"""The stack's C++ patch text, compiled: its hunks applied to a source (never with fuzz),
each translation unit it touches compiled against the installed wheel with the shims'
flags, and the libraries checked so that they can stand in for the shims.

A patch's shim (overlay/shims.toml) defines a few exported libtorch symbols; the compiled
text of a touched TU defines those and every other function of that file, and the
overlay (`--cpp-from`) loads it exactly like a shim: before torch._C, with RTLD_GLOBAL,
checked by the loader's GOT test. All of the TU's exported definitions then win over
libtorch's, which is what replacing the file in libtorch would do. That is safe only if
loading the TU a second time beside libtorch repeats nothing libtorch already did, so a
library is refused when
  - a static initialiser calls into torch's libraries (a registration would run twice), or
  - it defines global data that torch's libraries also define (libtorch would use the
    TU's copy, constructed again after libtorch's own initialisers ran).
Header-only instantiations (weak functions, vtables, typeinfo, unique statics) are the
same definitions as libtorch's, from the same headers.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ndvstack.atomic import build_dir
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.git import Git
from ndvstack.hunks import apply_to_tree, rejected_hunks
from ndvstack.layers import is_cpp
from ndvstack.repo import require_base
from ndvstack.shims import Shim, Toolchain, exported_symbols
from ndvstack.stack import Base, FileChange, Patch

SUPPORT_HEADER = "native/ndv_shim_support.h"  # ndv_bound_in(), which the loader's check calls
UNIT_SUFFIXES = {".c", ".cc", ".cpp", ".cxx"}
NOT_HERE_SUFFIXES = {".cu", ".cuh", ".mm"}    # CUDA and Objective-C++: no compiler for them here
DATA_TYPES = set("DBGRS")                      # nm: strong initialised, zeroed, small and read-only data
LINKER_SYMBOLS = {"_edata", "_end", "__bss_start", "_init", "_fini"}
TOOLS = ("nm", "objdump")


@dataclass(frozen=True)
class CppPatch:
    patch: Patch
    shim: Shim
    changes: list[FileChange]  # its C++ file changes

    @property
    def units(self) -> list[str]:
        return [c.path for c in self.changes if c.new_path and PurePosixPath(c.path).suffix in UNIT_SUFFIXES]


@dataclass
class Text:
    """One compiled translation unit of the stack's C++ text, as a library."""
    unit: str                         # its repo path
    name: str                         # the library is <name>.so
    library: Path
    patches: list[str]                # the C++ patches that touch it, in series order
    symbols: dict[str, list[str]]     # patch -> the shims.toml symbols it defines for that patch
    bound_in: dict[str, str]          # patch -> whose binding the loader's check reads
    sha256: str                       # of the patched unit
    interposed: list[str] = field(default_factory=list)  # its other functions that libtorch exports
    new: list[str] = field(default_factory=list)         # its functions that libtorch does not export
    initialisers: list[str] = field(default_factory=list)  # what its static initialisers call
    seconds: float = 0.0              # the compile (0: from the cache)


def cpp_patches(patches: list[Patch], shims: dict[str, Shim]) -> list[CppPatch]:
    """The series' patches that change C++, each with its shim; BadInput for one this cannot verify."""
    found = []
    for patch in patches:
        changes = [c for c in patch.files if is_cpp(c.path)]
        if not changes:
            continue
        for change in changes:
            if PurePosixPath(change.path).suffix in NOT_HERE_SUFFIXES:
                raise BadInput(f"{patch.name}: {change.path} cannot be compiled here (CUDA or Objective-C++)")
        shim = shims.get(patch.name)
        if shim is None:
            raise BadInput(f"{patch.name} changes C++ and overlay/shims.toml names no shim for it, so "
                           f"no symbols to check its text against")
        cpp = CppPatch(patch, shim, changes)
        if not cpp.units:
            raise BadInput(f"{patch.name} changes only headers ({changes[0].path}): no translation unit "
                           f"of its own to compile")
        found.append(cpp)
    return found


def checkout_base(source: Path, base: Base) -> str | None:
    """The base's commit when SOURCE is the top of a git checkout that has it, else None (a
    folder, or a checkout without the base: its files are used as they are)."""
    git = Git(source)
    top = git.run("rev-parse", "--show-toplevel", check=False).stdout.strip()
    if top and Path(top).resolve() == source.resolve():
        try:
            return require_base(git, base)
        except BadInput:
            pass
    return None


def read_sources(source: Path, paths: list[str], base: Base) -> tuple[dict[str, bytes], str]:
    """The base text of PATHS from SOURCE: a pytorch checkout that has the base commit (the
    files at the base), or a folder holding them at their repo paths (as they are)."""
    if not source.is_dir():
        raise BadInput(f"{source}: no such directory (give --source a pytorch checkout or a folder "
                       f"holding the touched files at their repo paths)")
    sha = checkout_base(source, base)
    texts = {}
    for path in paths:
        if sha:
            shown = subprocess.run(["git", "show", f"{sha}:{path}"], cwd=source, capture_output=True)
            if shown.returncode != 0:
                raise BadInput(f"{source}: has no {path} at the base {sha[:12]}")
            texts[path] = shown.stdout
        elif (source / path).is_file():
            texts[path] = (source / path).read_bytes()
        else:
            raise BadInput(f"{source}: has no {path} (the stack's C++ patches change it)")
    where = f"the files at the base {sha[:12]} of {source}" if sha else f"the files in {source}"
    return texts, where


def apply_patches(cpp: list[CppPatch], texts: dict[str, bytes], tree: Path) -> dict[str, int]:
    """Writes TEXTS under TREE and applies each patch's C++ hunks there in series order with
    `git apply` (full context, no fuzz); WorkFailed names the patch and the hunks that fail.
    Returns patch -> hunks applied."""
    for rel, data in texts.items():
        (tree / rel).parent.mkdir(parents=True, exist_ok=True)
        (tree / rel).write_bytes(data)
    applied = {}
    for item in cpp:
        diff = tree.parent / f"{item.patch.name}.diff"
        result = apply_to_tree(tree, item.changes, diff)
        if result.returncode != 0:
            failed = rejected_hunks(Git(tree), diff, item.changes) or [result.stderr.strip().splitlines()[-1]]
            raise WorkFailed(f"{item.patch.name} does not apply to the source without fuzz: "
                             f"{'; '.join(failed)} (rebase the patch onto this text; it is never fuzzed)")
        applied[item.patch.name] = sum(len(c.hunks) for c in item.changes)
    return applied


def library_name(unit: str) -> str:
    return "text_" + re.sub(r"[^a-z0-9]+", "_", str(PurePosixPath(unit).with_suffix("")).lower()).strip("_")


def _first_error(stderr: str) -> str:
    return next((line for line in stderr.splitlines() if "error" in line or "undefined reference" in line),
                stderr.strip()[-300:])


def compile_unit(unit: str, tree: Path, support: Path, toolchain: Toolchain, output: Path) -> None:
    """UNIT (patched, in TREE) and the shim support linked into OUTPUT with the shims' flags.
    TREE comes first on the include path, so headers the stack changes win over the wheel's;
    --no-undefined makes a use of something the wheel does not export a link error here."""
    stub = output.parent / "ndv_support.cpp"
    stub.write_text(f'#include "{support}"  // ndv_bound_in(), for the loader\'s check\n')
    command = [toolchain.compiler, *toolchain.cflags, "-I", str(tree), str(tree / unit), str(stub),
               "-o", str(output), *toolchain.ldflags, "-Wl,--no-undefined"]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise WorkFailed(f"{unit} with the stack's hunks does not compile: {_first_error(result.stderr)}")


def linked_libraries(toolchain: Toolchain) -> list[Path]:
    """The wheel's libraries the shims link (-lNAME found in the torch library folder)."""
    names = [flag[2:] for flag in toolchain.ldflags if flag.startswith("-l")]
    return [p for p in (Path(toolchain.torch_lib) / f"lib{n}.so" for n in names) if p.is_file()]


def _demangle(names: list[str]) -> list[str]:
    if not names or shutil.which("c++filt") is None:
        return names
    result = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return result.stdout.splitlines() or names


_FUNCTION = re.compile(r"^[0-9a-f]+ <(.+)>:$")
_CALL = re.compile(r"\s(?:call|jmp)q?\s+(?:[0-9a-f]+ <([^>]+)>|\*.*# [0-9a-f]+ <([^>]+)>)")


def initialiser_calls(library: Path) -> list[str]:
    """The external functions LIBRARY's static initialisers (_GLOBAL__sub_I_*) call, through
    the local functions they call (mangled names, without @plt or @VERSION)."""
    disassembly = subprocess.run(["objdump", "-d", "--no-show-raw-insn", str(library)],
                                 capture_output=True, text=True).stdout
    calls: dict[str, list[str]] = {}
    current = None
    for line in disassembly.splitlines():
        if m := _FUNCTION.match(line):
            current = m[1]
            calls[current] = []
        elif current and (m := _CALL.search(line)):
            calls[current].append((m[1] or m[2]).split("+")[0])
    seen, external = set(), []
    todo = [name for name in calls if name.startswith("_GLOBAL__sub_I")]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for target in calls.get(name, []):
            if "@" in target:
                symbol = target.split("@")[0]
                if symbol not in external:
                    external.append(symbol)
            elif target in calls:
                todo.append(target)
    return external


def check(text: Text, named: set[str], torch_exports: dict[str, str]) -> None:
    """The checks that make TEXT safe to load like a shim (see the module's docstring);
    fills in what it interposes. WorkFailed names the patch, the unit and the symbol."""
    exports = exported_symbols(text.library)
    for patch, symbols in text.symbols.items():
        for symbol in symbols:
            if exports.get(symbol) != "T":
                raise WorkFailed(f"{patch}: {text.unit} with its hunks does not define {symbol}, which "
                                 f"overlay/shims.toml names (is the signature the wheel's?)")
            if symbol not in torch_exports:
                raise WorkFailed(f"{patch}: the wheel's libraries export no {symbol}; its text would "
                                 f"replace nothing")
    ours = {"ndv_bound_in"} | named
    functions = sorted(s for s, kind in exports.items() if kind == "T" and s not in ours)
    text.interposed = [s for s in functions if s in torch_exports]
    text.new = [s for s in functions if s not in torch_exports]
    data = sorted(s for s, kind in exports.items() if kind in DATA_TYPES and s not in LINKER_SYMBOLS
                  and s in torch_exports)
    if data:
        raise WorkFailed(f"{text.unit}: defines global data that torch's libraries also define "
                         f"({_demangle(data[:1])[0]}): loaded beside libtorch, libtorch would use "
                         f"this copy, constructed again after its own initialisers ran")
    text.initialisers = initialiser_calls(text.library)
    into_torch = [s for s in text.initialisers if s in torch_exports]
    if into_torch:
        raise WorkFailed(f"{text.unit}: a static initialiser calls into torch's libraries "
                         f"({_demangle(into_torch[:1])[0]}): loaded beside libtorch it would run a "
                         f"second time (a registration would be made twice)")


def _key(unit: str, tree: Path, touched: list[str], support: Path, toolchain: Toolchain) -> str:
    digest = hashlib.sha256(json.dumps([unit, toolchain.describe()]).encode())
    for rel in sorted(touched):  # the unit and every header the stack changes
        if (tree / rel).is_file():
            digest.update(rel.encode() + b"\0" + (tree / rel).read_bytes())
    digest.update(support.read_bytes())
    return digest.hexdigest()


def require_tools(toolchain: Toolchain) -> None:
    if shutil.which(toolchain.compiler) is None:
        raise BadInput(f"no C++ compiler: {toolchain.compiler} not found (install g++ or set CXX)")
    for tool in TOOLS:
        if shutil.which(tool) is None:
            raise BadInput(f"no {tool} (binutils): the compiled text's symbols cannot be checked")


def build(patches: list[Patch], shims: dict[str, Shim], source: Path, base: Base, overlay_src: Path,
          toolchain: Toolchain | None, cache: Path, progress) -> tuple[list[Text], dict[str, int], str]:
    """(the compiled texts, patch -> hunks applied, where the base text came from). Every
    refusal of bad input (BadInput) comes before anything is written."""
    cpp = cpp_patches(patches, shims)
    if not cpp:
        raise BadInput("the stack has no C++ patch: nothing to verify")
    needed, created = [], set()  # the base files the hunks apply to; not those an earlier patch creates
    for change in (c for item in cpp for c in item.changes):
        if change.old_path and change.old_path not in created and change.old_path not in needed:
            needed.append(change.old_path)
        created |= {change.new_path} if change.new_path else set()
    texts, where = read_sources(source, needed, base)
    toolchain = toolchain or Toolchain.detect()
    require_tools(toolchain)
    support = overlay_src / SUPPORT_HEADER
    if not support.is_file():
        raise BadInput(f"{support}: missing (the loader's check needs ndv_bound_in)")
    torch_exports: dict[str, str] = {}
    for library in linked_libraries(toolchain):
        torch_exports.update(exported_symbols(library))

    units = list(dict.fromkeys(u for item in cpp for u in item.units))
    changed = list(dict.fromkeys(c.path for item in cpp for c in item.changes if c.new_path))
    named = {s for item in cpp for s in item.shim.symbols}
    built = []
    with tempfile.TemporaryDirectory(prefix="ndv-cpp-text-") as tmp:
        tree = Path(tmp, "tree")
        tree.mkdir()
        applied = apply_patches(cpp, texts, tree)
        for unit in units:
            mine = [item for item in cpp if unit in item.units]
            name = library_name(unit)
            key = _key(unit, tree, changed, support, toolchain)
            cached = cache / "texts" / key[:32] / f"{name}.so"
            text = Text(unit, name, cached, [i.patch.name for i in mine],
                        {i.patch.name: list(i.shim.symbols) for i in mine},
                        {i.patch.name: i.shim.bound_in for i in mine},
                        hashlib.sha256((tree / unit).read_bytes()).hexdigest())
            if not cached.is_file():
                progress(f"compiling {unit} with the hunks of {', '.join(text.patches)} ...")
                start = time.monotonic()
                scratch = build_dir(cached.parent.parent, "text")
                try:
                    compile_unit(unit, tree, support, toolchain, scratch / f"{name}.so")
                    try:
                        scratch.rename(cached.parent)
                    except OSError:  # another build put it there first: same key, same content
                        pass
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
                text.seconds = time.monotonic() - start
            check(text, named, torch_exports)
            built.append(text)
    return built, applied, where


def manifest_entries(texts: list[Text]) -> list[dict]:
    """The loader's manifest entries for TEXTS: one per (unit, patch), so the loader checks
    each patch's shims.toml symbols in the unit's library, exactly as it checks a shim."""
    return [{"name": t.name, "patch": patch, "library": f"{t.name}.so", "kind": "patch text",
             "source": t.unit, "source_sha256": t.sha256, "symbols": symbols, "bound_in": t.bound_in[patch]}
            for t in texts for patch, symbols in t.symbols.items()]
