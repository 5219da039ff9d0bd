"""test --each-prefix: each prefix of the series passes its own tests (the stack bisects).

For k = 1..N: the first k patches, as a stack of their own, overlaid on the installed torch;
patch k's own tests (the test functions it adds or changes, own_tests), on the upstream test
tree as the first k patches leave it (DIR's text with their test hunks), run with pytest on
that overlay, with an inductor cache and TMPDIR of their own. Only the patched side: `test`
compares stock and the whole stack. A prefix passes when every one of its tests passes; a
skipped or uncollected test is reported, never counted as a pass. A prefix with no tests of
its own says so.

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

from ndvstack import lint, own_tests, run
from ndvstack.atomic import build_dir
from ndvstack.errors import WorkFailed
from ndvstack.layers import DEFAULT_OVERLAY_SRC
from ndvstack.overlay import default_cache
from ndvstack.shims import SHIMS_FILE, load_shims
from ndvstack.stack import SERIES_FILE, Stack
from ndvstack.upstream_tests import FAILED, Side, SuiteRun, _run_suite_side


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


def check_prefix(stack: Stack, k: int, upstream: Path, overlay_src: Path, cache: Path, junit_dir: Path | None,
                 out, progress) -> bool:
    """Runs prefix K's own tests and reports them; returns whether it passes."""
    start = time.monotonic()
    name = stack.series()[k - 1]
    head = f"[{k}/{len(stack.series())}] {name}"
    prefix_stack, prefix_src = prefix(stack, k, overlay_src, cache)
    with tempfile.TemporaryDirectory(prefix="ndv-each-prefix-") as tmp:
        own = own_tests.apply_test_hunks(prefix_stack.patches(), upstream, Path(tmp, "tree"))
        ids = own.per_patch[name]
        if not ids:
            print(f"{head}: no tests of its own (it adds or changes no test function)", file=out)
            return True
        progress(f"test --each-prefix: {head}: overlay of {k} patches, then its {len(ids)} tests ...")
        env = {**run.environment(prefix_stack, stock=False, overlay_src=prefix_src),
               **run.private_inductor_env(Path(tmp, "inductor"))}
        by_file: dict[str, list[str]] = {}
        for test_id in ids:
            by_file.setdefault(test_id[len("test/"):].split("::")[0], []).append(test_id[len("test/"):])
        reports = junit_dir / f"prefix-{k:02d}" if junit_dir else Path(tmp, "reports")
        results, _ = _run_suite_side(Side("stack", sys.executable, env), own.tree / "test",
                                     [SuiteRun(file, ids=tuple(i)) for file, i in by_file.items()], [], reports,
                                     progress)
    outcome = {test_id: results.get(test_id[len("test/"):], ("absent", ""))[0] for test_id in ids}
    counts = {kind: sum(v == kind for v in outcome.values()) for kind in ("passed", *FAILED, "skipped", "absent")}
    print(f"{head}: {len(ids)} tests: {counts['passed']} passed, {counts['failed'] + counts['error']} failed, "
          f"{counts['skipped']} skipped, {counts['absent']} not collected ({time.monotonic() - start:.0f}s)", file=out)
    for test_id, result in outcome.items():
        if result != "passed":
            print(f"  {'NOT COLLECTED' if result == 'absent' else result.upper()} {test_id}", file=out)
    return counts["passed"] == len(ids)


def main(stack: Stack, out, junit_dir: Path | None = None, overlay_src: Path = DEFAULT_OVERLAY_SRC,
         cache: Path | None = None, upstream: Path | None = None,
         progress=lambda msg: print(msg, file=sys.stderr)) -> None:
    lint.check(stack)
    upstream = own_tests.upstream_dir(upstream, "test --each-prefix")
    cache = cache or default_cache()
    names = stack.series()
    failing = [names[k - 1] for k in range(1, len(names) + 1)
               if not check_prefix(stack, k, upstream, overlay_src, cache, junit_dir, out, progress)]
    if failing:
        raise WorkFailed(f"test --each-prefix: {len(failing)} of {len(names)} prefixes fail their own tests "
                         f"(first: {failing[0]})")
    print(f"each of the {len(names)} prefixes passes its own tests", file=out)
