"""build --from-source against a fake pytorch source tree and fake build tools (test doubles):
the preflight's refusals, the era, the environment, the dry run's plan, progress, the run,
the rerun and a failing build."""

import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from expecttest import assert_expected_inline

from fake_pytorch import dir_bytes
from fake_source_tree import fake_pytorch_source, fake_tools
from ndvstack import build
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
    """A Host whose PATH holds only the fake tools and git."""
    tools = tools or fake_tools(tmp_path / "tools")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "git").exists():
        (bin_dir / "git").symlink_to("/usr/bin/git")
    base_env = {"PATH": f"{tools}:{bin_dir}", "HOME": os.environ["HOME"],
                "FAKE_BUILD_RECORD": str(tmp_path / "record.jsonl")}
    return Host(env={**base_env, **env}, cpus=cpus, memory_bytes=memory_gib * GIB,
                free_bytes=lambda path: free_gib * GIB)


def options(fake, tmp_path, **kwargs):
    return build.Options(pytorch=fake.path, python=sys.executable, dist=tmp_path / "dist", **kwargs)


def plan_text(stack, fake, tmp_path, host, **kwargs):
    out = io.StringIO()
    build.main(stack, options(fake, tmp_path, **kwargs), out, dry_run=True, host=host, progress=quiet)
    text = out.getvalue().replace(str(tmp_path), "<tmp>").replace(str(Path(sys.executable).parent), "<venv>")
    text = text.replace(" %d.%d.%d\n" % sys.version_info[:3], " <version>\n")
    text = text.replace(fake.base, "<base>").replace(fake.base[:12], "<base12>")
    return re.sub(r"ndv5\.[0-9a-f]{8}", "ndv5.<hash>", text)


def test_dry_run_prints_the_plan_and_changes_nothing(tmp_path, source):
    fake, stack = source
    before = fake.snapshot()
    text = plan_text(stack, fake, tmp_path, machine(tmp_path))
    assert_expected_inline(text, """\
from-source build plan (dry run: nothing was run or changed)
  checkout   <tmp>/pytorch
  onto       <base> (the base, v2.13.0)
  stack      5 patches; version 2.13.0+cu128.ndv5.<hash>
  era        setuptools (setup.py, setuptools.build_meta)
  python     <venv>/python <version>
  cmake      <tmp>/tools/cmake 3.28.3
  ninja      <tmp>/tools/ninja 1.11.1
  cuda       nvcc 12.8 (<tmp>/tools/nvcc)
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
  PYTORCH_BUILD_VERSION=2.13.0+cu128.ndv5.<hash>
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
    assert plan_text(stack, fake, tmp_path, machine(tmp_path)) == text  # deterministic


def test_dry_run_cpu_sccache_remote_and_scikit_build_core_era(tmp_path):
    fake = fake_pytorch_source(tmp_path, tmp_path / "patches", era="scikit-build-core", setup_py=False)
    tools = fake_tools(tmp_path / "tools", ccache=None, sccache="sccache 0.8.2", nvcc=None, gpus=None)
    text = plan_text(Stack(tmp_path / "patches"), fake, tmp_path, machine(tmp_path, tools, cpus=8, memory_gib=8),
                     cpu=True, remote_cache="s3://bucket/ci", onto="HEAD")
    assert "era        scikit-build-core (pyproject.toml, scikit_build_core.build)" in text
    assert "--config-setting=build-dir=build" in text and "CMAKE_BUILD_PARALLEL_LEVEL=4\n" in text
    assert "max jobs   4 (8 cores; 8 GiB at 2 GiB a compile job)" in text
    assert "SCCACHE_BUCKET=bucket\n  SCCACHE_S3_KEY_PREFIX=ci\n" in text
    assert "USE_CUDA=0" in text and "CUDA_LAUNCHER" not in text and "version 2.13.0+cpu.ndv5." in text
    assert "onto       <base> (HEAD)" in text


@pytest.mark.parametrize("case, expected", [
    ("dirty", "the checkout is not clean"),
    ("no_base", "lacks the revision no-such-rev"),
    ("submodule_not_initialised", "submodule third_party/sub is not initialised; run git submodule update --init"),
    ("old_python", "is Python 3.9.18; pytorch needs >= 3.10"),
    ("missing_requirement", "lacks build requirements: definitely-not-installed>=1"),
    ("old_cmake", "is 3.20.0; the build needs cmake >= 3.27"),
    ("no_ninja", "ninja not found on PATH"),
    ("no_nvcc", "nvcc not found (on PATH); install the CUDA toolkit >= 12.6, set CUDA_HOME, or build with --cpu"),
    ("old_cuda", "is CUDA 11.8; the build needs >= 12.6"),
    ("no_arch_list", "TORCH_CUDA_ARCH_LIST is not set and nvidia-smi shows no GPU"),
    ("bad_max_jobs", "MAX_JOBS='lots' is not a positive number"),
    ("no_compiler_cache", "ccache or sccache not found on PATH"),
    ("small_disk", "only 20 GiB free at"),
    ("old_ccache_remote", "--remote-cache needs ccache >= 4.4"),
    ("bad_sccache_remote", "sccache takes s3://BUCKET/PREFIX"),
    ("no_setup_py", "no setup.py or scikit-build-core pyproject.toml"),
])
def test_preflight_refuses_with_one_line_and_changes_nothing(tmp_path, case, expected):
    fake = fake_pytorch_source(tmp_path, tmp_path / "patches", setup_py=case != "no_setup_py",
                               requires=["definitely-not-installed>=1"] if case == "missing_requirement" else None)
    stack = Stack(tmp_path / "patches")
    tool_versions = {"old_cmake": {"cmake": "cmake version 3.20.0"}, "no_ninja": {"ninja": None},
                     "no_nvcc": {"nvcc": None}, "old_cuda": {"nvcc": "Cuda compilation tools, release 11.8, V11.8.89"},
                     "no_compiler_cache": {"ccache": None},
                     "old_ccache_remote": {"ccache": "ccache version 4.2"},
                     "bad_sccache_remote": {"ccache": None, "sccache": "sccache 0.8.2"}}.get(case, {})
    tools = fake_tools(tmp_path / "tools", gpus=None if case == "no_arch_list" else ("9.0",), **tool_versions)
    env = {"MAX_JOBS": "lots"} if case == "bad_max_jobs" else {}
    host = machine(tmp_path, tools, free_gib=20 if case == "small_disk" else 500, **env)
    kwargs = {"onto": "no-such-rev"} if case == "no_base" else {}
    kwargs.update({"old_ccache_remote": {"remote_cache": "redis://cache"},
                   "bad_sccache_remote": {"remote_cache": "ftp://cache"}}.get(case, {}))
    python = sys.executable
    if case == "dirty":
        (fake.path / "untracked.txt").write_text("x\n")
    if case == "submodule_not_initialised":
        subprocess.run(["git", "-C", str(fake.path), "submodule", "deinit", "--quiet", "--all"], check=True)
    if case == "old_python":
        python = str(tools / "python3")
        Path(python).write_text("#!/bin/sh\necho 3.9.18\n")
        Path(python).chmod(0o755)
    before = fake.snapshot()
    with pytest.raises(BadInput) as error:
        build.main(stack, build.Options(pytorch=fake.path, python=python, dist=tmp_path / "dist", **kwargs),
                   io.StringIO(), dry_run=False, host=host, progress=quiet)
    message = str(error.value)
    assert expected in message and "\n" not in message
    assert fake.snapshot() == before
    assert not (fake.path / ".git" / "ndv-build").exists() and not (tmp_path / "dist").exists()


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
    assert "// detach views too" in record["cpp"]  # the stack is in the tree that was built
    assert record["submodules"] == ["third_party/sub/deep/deep.txt", "third_party/sub/sub.txt"]
    assert record["env"]["CMAKE_CUDA_COMPILER_LAUNCHER"] == str(tmp_path / "tools" / "ccache")
    assert record["env"]["PYTORCH_BUILD_VERSION"].startswith("2.13.0+cu128.ndv5.")
    assert shown[-1].startswith("[4/4] 100%")
    assert wheel.parent == tmp_path / "dist" and wheel.name.startswith("torch-2.13.0+cu128.ndv5.")
    assert sorted(p.name for p in wheel.parent.iterdir()) == sorted([wheel.name, wheel.name + ".json", "other.txt"])
    data = json.loads(Path(f"{wheel}.json").read_text())
    assert data["built_from"] == "source" and data["wheel"]["file"] == wheel.name
    assert [p["name"] for p in data["patches"]] == stack.series() and data["origin"]["era"] == "setuptools"
    after = fake.snapshot()
    for key in ("HEAD", "head_sha", "status", "index", "worktree", "stash"):
        assert after[key] == before[key], key  # the user's branch and files are untouched
    assert "ndv-build/pytorch" in after["worktrees"]


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
    assert result.returncode == 2 and "no such directory" in result.stderr
