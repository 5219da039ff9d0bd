"""verify-cpp: the stack's C++ patch text verified by compiling it, not only through its shim.

1. Each C++ patch's hunks are applied to the base text of the files it touches, from
   --source (a pytorch checkout: the files at the base; or a folder holding them at their
   repo paths), with `git apply`: full context, never fuzz. A hunk that does not apply
   fails the run, naming the patch and the hunk.
2. Each touched translation unit is compiled against the installed wheel with the shims'
   flags, and checked: it defines the symbols overlay/shims.toml names for its patches,
   and it is safe to load beside libtorch (see cpp_text).
3. The stack's tests (with a --source holding upstream's test/: the test functions the
   patches' test hunks add or change there, own_tests; without: the test files it adds; or
   those named by --tests, pytest ids or files) run twice on the overlay, at the same time:
   with the shims, and with the compiled text in their place (`run --cpp-from`: loaded by
   the overlay's loader before torch._C and checked like a shim). Each side has its own
   inductor cache. A test whose outcome differs fails the run.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ndvstack import cpp_text, lint, overlay, own_tests, run, shims, upstream_tests
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.layers import DEFAULT_OVERLAY_SRC
from ndvstack.stack import Stack

SIDES = {"shim": "the shims", "text": "the compiled patch text"}


@dataclass
class Result:
    texts: list[cpp_text.Text]
    outcomes: dict[str, dict[str, str]]  # side -> test id -> passed / failed / error / skipped
    differ: list[str]


def _short(symbols: list[str], limit: int = 4) -> str:
    """Demangled function names without their parameters, the first LIMIT of them."""
    names = [name.split("(")[0] for name in cpp_text._demangle(symbols)]
    return ", ".join(names[:limit]) + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def report_texts(texts: list[cpp_text.Text], applied: dict[str, int], where: str, out) -> None:
    print(f"source: {where}", file=out)
    for patch, hunks in applied.items():
        print(f"{patch}: {hunks} C++ hunks apply without fuzz", file=out)
    for text in texts:
        how = f"compiled in {text.seconds:.1f}s" if text.seconds else "compiled (cached)"
        print(f"{text.unit}: {how} -> {text.library}", file=out)
        for patch, symbols in text.symbols.items():
            print(f"  defines {_short(symbols)} ({len(symbols)} symbols overlay/shims.toml names "
                  f"for {patch})", file=out)
        print(f"  also interposes {len(text.interposed)} other functions of the file that libtorch "
              f"exports{': ' + _short(text.interposed) if text.interposed else ''}; "
              f"{len(text.new)} that it does not", file=out)
        calls = _short(text.initialisers, limit=6) if text.initialisers else "nothing"
        print(f"  static initialisers call {calls} (nothing in torch's libraries)", file=out)


def test_tree(stack: Stack, source: Path, tree: Path) -> list[str]:
    """Writes the tests to run under TREE and returns the stack's tests. With upstream's test/
    in SOURCE (a checkout's at the base, or a folder's as it is, e.g. ../shared/upstream-2.15;
    SOURCE is never written): a copy of it with the series' test hunks applied (own_tests), and
    the test functions they add or change, as pytest ids. Without: the test files the stack
    creates, as the patches have them."""
    sha = cpp_text.checkout_base(source, stack.base) if source.is_dir() else None
    upstream = source
    if sha:  # a checkout: its test/ at the base (if it has one there), like its C++ files
        upstream = tree.parent / "upstream"
        archive = subprocess.run(["git", "archive", "--format=tar", sha, "test"], cwd=source, capture_output=True)
        if archive.returncode == 0:
            with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
                tar.extractall(upstream, filter="data")
    if not (upstream / "test").is_dir():
        return upstream_tests.new_test_files(stack, tree)[0]
    return sorted(own_tests.apply_test_hunks(stack.patches(), upstream, tree).kind)


def _side(stack: Stack, kind: str, source: Path, tmp: Path, overlay_options: dict) -> upstream_tests.Side:
    env = run.environment(stack, stock=False, cpp_from=source if kind == "text" else None, **overlay_options)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(tmp / kind / "inductor")  # never shared between the sides
    return upstream_tests.Side(kind, sys.executable, env)


def compare(outcomes: dict[str, dict[str, str]], out) -> list[str]:
    shim, text = outcomes["shim"], outcomes["text"]
    ids = sorted(set(shim) | set(text))
    differ = [i for i in ids if shim.get(i, "absent") != text.get(i, "absent")]
    for test_id in differ:
        print(f"DIFFERS shim: {shim.get(test_id, 'absent'):7s} text: {text.get(test_id, 'absent'):7s} "
              f"{test_id}", file=out)
    same = [shim[i] for i in ids if i not in differ]
    both_fail = [i for i in ids if i not in differ and shim[i] in upstream_tests.FAILED]
    for test_id in both_fail:
        print(f"fails with both: {test_id}", file=out)
    print(f"{len(ids)} tests: {len(ids) - len(differ)} with the same outcome on the shims and on the "
          f"compiled patch text ({same.count('passed')} passed, {len(both_fail)} failed, "
          f"{same.count('skipped')} skipped), {len(differ)} differ", file=out)
    return differ


def main(stack: Stack, source: Path | None, out, overlay_src: Path = DEFAULT_OVERLAY_SRC,
         tests: list[str] | None = None, junit_dir: Path | None = None, cache: Path | None = None,
         progress=lambda msg: print(msg, file=sys.stderr), **overlay_options) -> Result:
    """OVERLAY_OPTIONS go to overlay.ensure (tests pass a test-double torch and toolchain)."""
    if source is None:
        raise BadInput("verify-cpp needs --source PATH: a pytorch checkout, or a folder holding the "
                       "files the C++ patches touch at their repo paths")
    lint.check(stack)
    cache = cache or overlay.default_cache()
    with tempfile.TemporaryDirectory(prefix="ndv-verify-cpp-") as tmp_name:
        tmp = Path(tmp_name)
        tree = tmp / "pytorch"
        tree.mkdir()
        files = test_tree(stack, source, tree)
        if tests:
            unknown = [t for t in tests if not (tree / t.split("::")[0]).is_file()]
            if unknown:
                raise BadInput(f"--tests {unknown[0]}: no such test file in the source's test/ with the "
                               f"stack's test hunks, nor among those the stack adds")
            files = list(dict.fromkeys(tests))
        if not files:
            raise BadInput("the stack has no tests to compare the text on: none in the test files it adds, "
                           "nor (with a --source holding upstream's test/) among the test functions its "
                           "test hunks add or change")

        texts, applied, where = cpp_text.build(stack.patches(), shims.load_shims(overlay_src), source,
                                               stack.base, overlay_src, overlay_options.get("toolchain"),
                                               cache, progress)
        report_texts(texts, applied, where, out)

        options = {"overlay_src": overlay_src, "cache": cache, "progress": progress, **overlay_options}
        sides = [_side(stack, kind, source, tmp, options) for kind in SIDES]
        junits = junit_dir or tmp
        junits.mkdir(parents=True, exist_ok=True)
        progress(f"verify-cpp: {len(files)} test files or ids, on {SIDES['shim']} and on {SIDES['text']} "
                 f"at the same time ...")
        start = time.monotonic()

        def run_one(side):
            began = time.monotonic()
            result = upstream_tests.run_side(side, tree, files, junits / f"{side.name}.xml")
            progress(f"verify-cpp: {SIDES[side.name]}: {len(result)} tests in {time.monotonic() - began:.0f}s")
            return result

        try:
            with ThreadPoolExecutor(max_workers=len(sides)) as pool:
                outcomes = dict(zip(SIDES, pool.map(run_one, sides)))
        except subprocess.SubprocessError as e:
            raise WorkFailed(f"verify-cpp: the tests could not run: {e}") from None
        progress(f"verify-cpp: both sides in {time.monotonic() - start:.0f}s")
    differ = compare(outcomes, out)
    if not any(outcomes.values()):
        raise WorkFailed("verify-cpp: no test ran, so nothing was compared")
    if differ:
        raise WorkFailed(f"verify-cpp: {len(differ)} tests differ between the shims and the compiled "
                         f"patch text (first: {differ[0]})")
    return Result(texts, outcomes, differ)
