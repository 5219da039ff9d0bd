"""test --each-prefix: each prefix of the series passes its own tests (the stack bisects).

For k = 1..N: the first k patches, as a stack of their own, overlaid on the installed torch;
the test files patch k adds or changes, as the first k patches leave them, run with pytest on
that overlay. Only the patched side: `test` already compares stock and the whole stack. A
prefix passes when every one of those tests passes; a skipped test is reported, never counted
as a pass. Without a checkout, as `test` without --pytorch: a change patch k makes to an
upstream test file is listed as not run.

The prefixes live in the cache, named by a hash of what is in them, so that a second run
with the same stack reuses their overlays.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ndvstack import lint, run
from ndvstack.atomic import build_dir
from ndvstack.errors import WorkFailed
from ndvstack.layers import DEFAULT_OVERLAY_SRC
from ndvstack.overlay import default_cache
from ndvstack.shims import SHIMS_FILE, load_shims
from ndvstack.stack import SERIES_FILE, Patch, Stack
from ndvstack.upstream_tests import FAILED, Side, _is_test_file, new_test_files, run_side


def _files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def _write_prefix(stack: Stack, names: list[str], overlay_src: Path, folder: Path) -> None:
    """FOLDER/patches: the stack's data and its first patches NAMES; FOLDER/overlay:
    OVERLAY_SRC less the shims of later patches (the overlay refuses a shim for a patch
    it does not have)."""
    patches = folder / "patches"
    patches.mkdir()
    for item in stack.dir.iterdir():
        if item.is_file() and item.suffix != ".patch" and item.name != SERIES_FILE:
            shutil.copy2(item, patches)
    for name in names:
        shutil.copy2(stack.dir / name, patches)
    (patches / SERIES_FILE).write_text("".join(f"{name}\n" for name in names))
    shutil.copytree(overlay_src, folder / "overlay", ignore=shutil.ignore_patterns("__pycache__"))
    kept = [shim for patch, shim in load_shims(overlay_src).items() if patch in names]
    (folder / "overlay" / SHIMS_FILE).write_text("shim = []\n" if not kept else "".join(
        f"[[shim]]\npatch = {json.dumps(s.patch)}\nname = {json.dumps(s.name)}\n"
        f"source = {json.dumps(str(s.source.relative_to(overlay_src)))}\n"
        f"symbols = {json.dumps(list(s.symbols))}\nbound_in = {json.dumps(s.bound_in)}\n\n" for s in kept))


def prefix(stack: Stack, k: int, overlay_src: Path, cache: Path) -> tuple[Stack, Path]:
    """(the stack of the first K patches, its overlay source), made once per content."""
    names = stack.series()[:k]
    digest = hashlib.sha256(json.dumps(names).encode())
    for path in [*(p for p in _files(stack.dir) if p.suffix != ".patch" and p.name != SERIES_FILE),
                 *(stack.dir / name for name in names)]:
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    for path in _files(overlay_src):
        digest.update(str(path.relative_to(overlay_src)).encode() + b"\0" + path.read_bytes())
    folder = cache / "prefixes" / digest.hexdigest()[:32]
    if not (folder / "patches" / SERIES_FILE).is_file():
        tmp = build_dir(folder.parent, "prefix")
        try:
            _write_prefix(stack, names, overlay_src, tmp)
            tmp.rename(folder)
        except OSError:
            if not (folder / "patches" / SERIES_FILE).is_file():  # not a lost race with the same content
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return Stack(folder / "patches"), folder / "overlay"


def own_test_files(patch: Patch) -> list[str]:
    """The test files PATCH adds or changes."""
    return sorted({c.path for c in patch.files if c.new_path and c.path.startswith("test/") and _is_test_file(c.path)})


def check_prefix(stack: Stack, k: int, overlay_src: Path, cache: Path, junit_dir: Path | None, out,
                 progress) -> bool:
    """Runs prefix K's own tests and reports them; returns whether it passes."""
    start = time.monotonic()
    name = stack.series()[k - 1]
    head = f"[{k}/{len(stack.series())}] {name}"
    prefix_stack, prefix_src = prefix(stack, k, overlay_src, cache)
    own = own_test_files(prefix_stack.patches()[-1])
    with tempfile.TemporaryDirectory(prefix="ndv-each-prefix-") as tmp:
        tree = Path(tmp, "pytorch")
        tree.mkdir()
        written, _ = new_test_files(prefix_stack, tree)
        runnable = [path for path in own if path in written]
        for path in sorted(set(own) - set(runnable)):
            print(f"{head}: not run: {path} (changes an upstream file; needs a checkout)", file=out)
        if not runnable:
            print(f"{head}: no test file of its own to run here", file=out)
            return True
        progress(f"test --each-prefix: {head}: overlay of {k} patches, then {', '.join(runnable)} ...")
        side = Side("stack", sys.executable, run.environment(prefix_stack, stock=False, overlay_src=prefix_src))
        junit = (junit_dir or Path(tmp)) / f"prefix-{k:02d}.xml"
        junit.parent.mkdir(parents=True, exist_ok=True)
        results = run_side(side, tree, runnable, junit)
    counts = {kind: sum(v == kind for v in results.values()) for kind in ("passed", *FAILED, "skipped")}
    ok = counts["passed"] > 0 and not counts["failed"] and not counts["error"]
    print(f"{head}: {', '.join(runnable)}: {counts['passed']} passed, {counts['failed'] + counts['error']} "
          f"failed, {counts['skipped']} skipped ({time.monotonic() - start:.0f}s)", file=out)
    for test_id, outcome in sorted(results.items()):
        if outcome != "passed":
            print(f"  {outcome.upper()} {test_id}", file=out)
    return ok


def main(stack: Stack, out, junit_dir: Path | None = None, overlay_src: Path = DEFAULT_OVERLAY_SRC,
         cache: Path | None = None, progress=lambda msg: print(msg, file=sys.stderr)) -> None:
    lint.check(stack)
    cache = cache or default_cache()
    names = stack.series()
    failing = [names[k - 1] for k in range(1, len(names) + 1)
               if not check_prefix(stack, k, overlay_src, cache, junit_dir, out, progress)]
    if failing:
        raise WorkFailed(f"test --each-prefix: {len(failing)} of {len(names)} prefixes fail their own tests "
                         f"(first: {failing[0]})")
    print(f"each of the {len(names)} prefixes passes its own tests", file=out)
