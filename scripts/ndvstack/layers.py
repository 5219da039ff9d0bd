"""What the stack lays over a torch package, shared by the overlay and the patched wheel:
the plan (which hunks are overlaid, which are skipped and why, which shims stand in for
C++), the patched Python files, and the loader with its shims."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath

from ndvstack.errors import BadInput
from ndvstack.git import Git
from ndvstack.hunks import apply_to_tree, rejected_hunks
from ndvstack.shims import Shim
from ndvstack.stack import REPO_ROOT, Patch

DEFAULT_OVERLAY_SRC = REPO_ROOT / "overlay"
LOADER_PACKAGE = "torch/_ndv_overlay"
CPP_SUFFIXES = {".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".cu", ".cuh", ".mm"}
HOOK_TOP = ("from torch import _ndv_overlay  # ndvstack overlay: load the stack's native shims "
            "before torch._C (not upstream)\n")
HOOK_END = ("_ndv_overlay.verify()  # ndvstack overlay: fail the import if a shim is not what "
            "torch calls (not upstream)\n")


def is_cpp(path: str) -> bool:
    return PurePosixPath(path).suffix in CPP_SUFFIXES


@dataclass
class Skipped:
    patch: str
    path: str
    hunks: int
    reason: str


@dataclass
class Plan:
    patches: list[Patch]
    overlaid: dict[str, list[str]] = field(default_factory=dict)  # path -> patches, in order
    skipped: list[Skipped] = field(default_factory=list)
    shims: list[Shim] = field(default_factory=list)


def make_plan(patches: list[Patch], shims: dict[str, Shim], allow_unshimmed: bool = False) -> Plan:
    names = {patch.name for patch in patches}
    stale = sorted(set(shims) - names)
    if stale:
        raise BadInput(f"overlay/shims.toml names {stale[0]}, which is not in the series")
    plan = Plan(patches)
    for patch in patches:
        cpp = [change.path for change in patch.files if is_cpp(change.path)]
        shim = shims.get(patch.name)
        if cpp and shim is None and not allow_unshimmed:
            raise BadInput(f"{patch.name} changes C++ ({cpp[0]}) and has no shim in overlay/shims.toml; "
                           f"write one, or pass --allow-unshimmed to overlay without its C++")
        if shim is not None:
            plan.shims.append(shim)
        for change in patch.files:
            path = change.path
            if is_cpp(path):
                reason = (f"C++: given by the native shim {shim.name}" if shim else
                          "C++ without a shim: NOT in effect (--allow-unshimmed)")
            elif path.startswith("torch/"):
                plan.overlaid.setdefault(path, []).append(patch.name)
                continue
            elif path.startswith("test/"):
                reason = "a test file: not part of the torch package"
            elif path.startswith("docs/"):
                reason = "documentation: not part of the torch package"
            else:
                reason = "outside torch/: not part of the torch package"
            plan.skipped.append(Skipped(patch.name, path, len(change.hunks), reason))
    return plan


def patched_files(plan: Plan, package_root: Path) -> dict[str, bytes | None]:
    """Applies the plan's torch/ hunks, patch by patch and never with fuzz, to copies of the
    files under PACKAGE_ROOT (the folder holding torch/). Returns path -> new bytes (None:
    deleted). Raises BadInput naming the patch and hunks when one does not apply."""
    if not plan.overlaid:
        return {}
    with tempfile.TemporaryDirectory(prefix="ndv-overlay-") as tmp:
        scratch = Path(tmp, "tree")
        for rel in plan.overlaid:
            if (package_root / rel).is_file():
                (scratch / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(package_root / rel, scratch / rel)
        for patch in plan.patches:
            changes = [c for c in patch.files if c.path in plan.overlaid]
            if not changes:
                continue
            diff = Path(tmp, f"{patch.name}.diff")
            result = apply_to_tree(scratch, changes, diff)
            if result.returncode != 0:
                failed = rejected_hunks(Git(scratch), diff, changes) or [result.stderr.strip().splitlines()[-1]]
                raise BadInput(f"{patch.name} does not apply to the installed wheel's files: "
                               f"{'; '.join(failed)}")
        return {rel: (scratch / rel).read_bytes() if (scratch / rel).is_file() else None
                for rel in plan.overlaid}


def _replace_file(path: Path, data: bytes) -> None:
    """Writes a new file at PATH without touching the old inode (it may be a hard link
    into the user's site-packages)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.ndv-new")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def _hook(init_py: bytes) -> bytes:
    """torch/__init__.py with the loader imported before anything else and checked at the end."""
    lines = init_py.decode().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.startswith(("import ", "from ")))
    return "".join(lines[:first] + [HOOK_TOP] + lines[first:] + [HOOK_END]).encode()


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:  # in blocks: a release wheel is hundreds of MB
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def portable_build(toolchain) -> dict:
    """How the shims were compiled, with the torch install's folder (a venv's, so a clone's)
    written as <torch>: the same wheel from any clone."""
    torch_dir = str(Path(toolchain.torch_lib).parent)
    described = toolchain.describe()
    for key in ("cflags", "ldflags"):
        described[key] = [flag.replace(torch_dir, "<torch>") for flag in described[key]]
    return described


def manifest(plan: Plan, base, built_from: str, label: str, toolchain, origin: dict) -> dict:
    return {
        "built_from": built_from,
        "label": label,
        "base": {"repo": base.repo, "commit": base.commit, "release": base.release, "wheel": base.wheel},
        "patches": [{"name": p.name, "subject": p.subject, "sha256": sha256(p.path)} for p in plan.patches],
        "overlaid": {path: names for path, names in sorted(plan.overlaid.items())},
        "skipped": [asdict(s) for s in plan.skipped],
        "shims": [{"name": s.name, "patch": s.patch, "library": f"{s.name}.so", "source": s.source.name,
                   "source_sha256": sha256(s.source), "symbols": list(s.symbols), "bound_in": s.bound_in}
                  for s in plan.shims],
        "shim_build": portable_build(toolchain) if toolchain else None,
        "origin": origin,
    }


def lay_into(package_root: Path, patched: dict[str, bytes | None], libraries: dict[str, Path],
             loader_src: Path, manifest_data: dict, version: str | None = None) -> None:
    """Writes the patched files, the loader package with its shims and manifest, the hook in
    torch/__init__.py and (if VERSION) the version label, into PACKAGE_ROOT/torch/."""
    for rel, data in patched.items():
        if data is None:
            (package_root / rel).unlink(missing_ok=True)
        else:
            _replace_file(package_root / rel, data)
    loader = package_root / LOADER_PACKAGE
    _replace_file(loader / "__init__.py", (loader_src / "__init__.py").read_bytes())
    for name, library in libraries.items():
        _replace_file(loader / f"{name}.so", library.read_bytes())
        (loader / f"{name}.so").chmod(0o755)
    _replace_file(loader / "manifest.json", (json.dumps(manifest_data, indent=2) + "\n").encode())
    init_py = package_root / "torch/__init__.py"
    _replace_file(init_py, _hook(init_py.read_bytes()))
    if version:
        version_py = package_root / "torch/version.py"
        text = version_py.read_text()
        old = next(line for line in text.splitlines() if line.startswith("__version__ = "))
        _replace_file(version_py, text.replace(old, f"__version__ = '{version}'").encode())
