"""verify-cpp and --cpp-from on the fake torch of fake_libtorch.py (test doubles): the patch
text applied without fuzz, compiled, checked, loaded like a shim, and compared with the shim
on the stack's tests."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fake_libtorch import REGISTER, SCALE, SOURCE, UNIT, fake_world
from fake_pytorch import dir_bytes
from fake_stack import quiet
from ndvstack import cpp_text, run, upstream_tests, verify_cpp
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.shims import Toolchain

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return fake_world(tmp_path_factory.mktemp("fake_libtorch"))


def verify(world, source, overlay_src=None, cache=None, **more):
    out = io.StringIO()
    try:
        result = verify_cpp.main(world.stack, source, out, overlay_src or world.overlay_src(),
                                 cache=cache or world.root / "cache", progress=quiet, **world.options(**more))
    finally:
        verify.out = out.getvalue()
    return result


def test_the_text_applies_compiles_and_gives_the_shims_outcomes(world):
    result = verify(world, world.source.path)
    # A checkout: its files at the base, although its HEAD has the patch applied.
    assert f"source: the files at the base {world.source.base[:12]} of {world.source.path}" in verify.out
    assert f"{world.stack.series()[0]}: 1 C++ hunks apply without fuzz" in verify.out
    [text] = result.texts
    assert text.unit == UNIT and text.symbols == {world.stack.series()[0]: [SCALE]}
    assert text.interposed == ["_ZN8ndv_fake6offsetEi"] and text.new == []
    assert "also interposes 1 other functions of the file that libtorch exports: ndv_fake::offset" in verify.out
    expected = {f"test.test_ndv_fake_ops::{name}": "passed"
                for name in ("test_scale_by_three", "test_scale_of_a_negative", "test_offset_unchanged")}
    assert result.outcomes == {"shim": expected, "text": expected} and result.differ == []
    assert "3 tests: 3 with the same outcome on the shims and on the compiled patch text (3 passed" in verify.out


def python_in(env, code):
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)


CHECK = ("import torch; print(torch._ndv_overlay.MANIFEST['shims'][0]['kind'] if 'kind' in "
         "torch._ndv_overlay.MANIFEST['shims'][0] else 'shim', torch.scale(2), torch.scale(-1))")


def test_cpp_from_loads_the_text_like_a_shim_and_the_loader_checks_it(world):
    options = world.options(overlay_src=world.overlay_src("drifted"), cache=world.root / "cache", progress=quiet)
    shim = python_in(run.environment(world.stack, stock=False, **options), CHECK)
    text_env = run.environment(world.stack, stock=False, cpp_from=world.source.path, **options)
    text = python_in(text_env, CHECK)
    assert shim.stdout.split() == ["shim", "6", "-2"], shim.stderr
    assert text.stdout.split() == ["patch", "text", "6", "-3"], text.stderr
    manifest = json.loads((Path(text_env["NDV_OVERLAY"]) / "torch/_ndv_overlay/manifest.json").read_text())
    [entry] = manifest["shims"]
    assert entry["source"] == UNIT and entry["symbols"] == [SCALE] and entry["library"].endswith(".so")
    # The fake libtorch_cpu first in the global scope: its scale() wins, and the import says so.
    preloaded = python_in({**text_env, "LD_PRELOAD": str(Path(world.toolchain.torch_lib) / "libtorch_cpu.so")},
                          CHECK)
    assert preloaded.returncode == 1
    assert (f"ImportError: ndvstack overlay: patch text {entry['name']} ({world.stack.series()[0]}) is not "
            f"in effect: libtorch_python binds another definition") in preloaded.stderr
    assert preloaded.stderr.rstrip().endswith(f"for {SCALE}")


def test_a_shim_that_drifted_from_the_text_fails_naming_the_test(world):
    with pytest.raises(WorkFailed, match=r"verify-cpp: 1 tests differ between the shims and the compiled "
                                         r"patch text \(first: test\.test_ndv_fake_ops::test_scale_of_a_negative\)"):
        verify(world, world.source.path, world.overlay_src("drifted"))
    assert ("DIFFERS shim: failed  text: passed  test.test_ndv_fake_ops::test_scale_of_a_negative"
            in verify.out)


def test_a_hunk_that_does_not_apply_names_the_patch_and_hunk_and_is_never_fuzzed(world):
    # A context line changed upstream, as in the newer custom_function.cpp.
    source = world.source_folder("context", SOURCE.replace("How much every caller", "How much each caller"))
    cache = world.root / "cache-context"
    with pytest.raises(WorkFailed, match=rf"^{world.stack.series()[0]} does not apply to the source without "
                                         rf"fuzz: {UNIT} hunk #1 \(@@ -7,7 \+7,7 @@ int scale\(int x\) {{\) "
                                         rf"\(rebase the patch"):
        verify(world, source, cache=cache)
    assert not (cache / "texts").exists() and verify.out == ""  # nothing compiled, nothing reported
    # Reduced context would have placed it: only the no-fuzz rule refuses it.
    patch = world.stack.dir / world.stack.series()[0]
    fuzzy = subprocess.run(["git", "apply", "--check", "-C1", f"--include={UNIT}", str(patch)], cwd=source,
                           capture_output=True, text=True,
                           env={**os.environ, "GIT_CEILING_DIRECTORIES": str(source.parent)})
    assert fuzzy.returncode == 0, fuzzy.stderr


def test_a_text_that_does_not_define_the_shims_symbol_fails(world):
    # The hunk applies (the signature is outside its context) but the function is another one.
    source = world.source_folder("signature", SOURCE.replace("int scale(int x) {", "int scale(long x) {"))
    with pytest.raises(WorkFailed, match=rf"{world.stack.series()[0]}: {UNIT} with its hunks does not "
                                         rf"define {SCALE}, which overlay/shims.toml names"):
        verify(world, source)


def test_a_text_whose_static_initialiser_calls_into_libtorch_is_refused(world):
    source = world.source_folder("registers", SOURCE + 'static int registered = ndv_fake::register_op("scale");\n')
    with pytest.raises(WorkFailed, match=rf"{UNIT}: a static initialiser calls into torch's libraries "
                                         rf"\(ndv_fake::register_op\(char const\*\)\): loaded beside libtorch "
                                         rf"it would run a second time"):
        verify(world, source)


def test_a_text_defining_libtorchs_global_data_is_refused(world):
    source = world.source_folder("data", SOURCE + "namespace ndv_fake { int registrations = 0; }\n")
    with pytest.raises(WorkFailed, match=rf"{UNIT}: defines global data that torch's libraries also define "
                                         rf"\(ndv_fake::registrations\)"):
        verify(world, source)


def test_the_initialiser_check_sees_through_local_calls(world, tmp_path):
    # -O0 keeps __static_initialization_and_destruction_0 as a function of its own.
    (tmp_path / "tu.cpp").write_text('#include <ndv_fake/ops.h>\nstatic int r = ndv_fake::register_op("x");\n')
    library = tmp_path / "tu.so"
    subprocess.run(["c++", "-O0", "-fPIC", "-shared", *world.toolchain.cflags[-2:], str(tmp_path / "tu.cpp"),
                    "-o", str(library), *world.toolchain.ldflags], check=True)
    assert REGISTER in cpp_text.initialiser_calls(library)


@pytest.mark.parametrize("case", ["no source", "no such folder", "no file", "no compiler", "unknown tests"])
def test_bad_input_is_refused_before_anything_changes(world, case):
    cache = world.root / f"cache-{case.replace(' ', '-')}"
    empty = world.root / "sources" / "empty"
    empty.mkdir(parents=True, exist_ok=True)
    source, more = {"no source": (None, {}), "no such folder": (world.root / "nowhere", {}),
                    "no file": (empty, {}),
                    "no compiler": (world.source.path, {"toolchain": Toolchain("/nonexistent/c++", "", (), (), "")}),
                    "unknown tests": (world.source.path, {"tests": ["test/test_other.py"]})}[case]
    message = {"no source": r"verify-cpp needs --source PATH",
               "no such folder": rf"{world.root / 'nowhere'}: no such directory",
               "no file": rf"{empty}: has no {UNIT} \(the stack's C\+\+ patches change it\)",
               "no compiler": r"no C\+\+ compiler: /nonexistent/c\+\+ not found",
               "unknown tests": r"--tests test/test_other.py: no such test file in the source's test/ with "
                                r"the stack's test hunks, nor among those the stack adds"}[case]
    before = dir_bytes(world.source.path)
    with pytest.raises(BadInput, match=message):
        verify(world, source, cache=cache, **more)
    assert not cache.exists() and dir_bytes(world.source.path) == before


def test_the_entry_point_refuses_with_one_line_and_exit_2(world, tmp_path):
    stack_sh = ROOT / "scripts" / "stack.sh"
    result = subprocess.run([str(stack_sh), "verify-cpp"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: verify-cpp needs --source PATH")
    result = subprocess.run([str(stack_sh), "--patches", str(world.stack.dir), "--overlay-src", str(world.overlay_src()),
                             "verify-cpp", "--source", str(world.source_folder("entry point"))], capture_output=True,
                            text=True, env={**os.environ, "CXX": "/nonexistent/c++",
                                            "NDV_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert result.stderr.startswith("error: no C++ compiler: /nonexistent/c++ not found")
    assert not (tmp_path / "cache").exists()
    result = subprocess.run([str(stack_sh), "run", "--stock", "--cpp-from", str(tmp_path), "--", "true"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "--cpp-from lays the C++ patch text over torch" in result.stderr


def test_test_sh_takes_cpp_from(world):
    # The drifted shim fails a test of the stack; with --cpp-from the patch text replaces it.
    # Upstream's test files: none; the stack's own file is created by its patch.
    upstream = world.root / "upstream-tests"
    (upstream / "test").mkdir(parents=True, exist_ok=True)
    options = world.options(overlay_src=world.overlay_src("drifted"), cache=world.root / "cache", progress=quiet,
                            upstream=upstream)
    with pytest.raises(WorkFailed, match=r"upstream tests: 1 of the stack's tests fail with it or cannot show "
                                         r"its fix \(first: test/test_ndv_fake_ops.py::test_scale_of_a_negative: "
                                         r"failed with the stack\)"):
        upstream_tests.main(world.stack, io.StringIO(), **options)
    table = upstream_tests.main(world.stack, io.StringIO(), cpp_from=world.source.path, **options)
    assert {row.stack for row in table} == {"passed"} and len(table) == 3


def test_verify_cpp_has_help():
    result = subprocess.run([str(ROOT / "scripts" / "stack.sh"), "verify-cpp", "--help"], capture_output=True,
                            text=True)
    assert result.returncode == 0 and result.stdout.startswith("usage: stack.sh verify-cpp")
