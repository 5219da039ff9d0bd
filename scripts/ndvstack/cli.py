"""Command line: parses arguments and calls each verb's main(). Nothing else lives here."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from ndvstack import (apply, basetree, build, checkout, each_prefix, export, lint, lint_code, overlay, own_tests,
                      rebase, run, status, submit, upstream_tests, verify_cpp, wheel)
from ndvstack.repo import DEFAULT_BRANCH
from ndvstack.atomic import Watch
from ndvstack.errors import BadInput, StackError, WorkFailed
from ndvstack.git import GitError
from ndvstack.layers import DEFAULT_OVERLAY_SRC
from ndvstack.stack import DEFAULT_PATCHES, Stack


CPP_FROM_HELP = ("the C++ patches' own text, compiled, in place of their shims: PATH is a pytorch "
                 "checkout or a folder holding the touched files (see verify-cpp)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stack.sh", description="Keep the stack in patches/ and move it in and out of pytorch checkouts.",
        epilog="Exit status: 0 success, 1 the work failed, 2 bad usage or input, 130 interrupted (Ctrl-C).")
    parser.add_argument("--patches", type=Path, default=DEFAULT_PATCHES,
                        help="the stack's folder (default: %(default)s)")
    parser.add_argument("--overlay-src", type=Path, default=DEFAULT_OVERLAY_SRC,
                        help="the shims and loader to lay over torch (default: %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every git command")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    verbs.add_parser("status", help="the base, the patches and their files, the installed torch",
                     description="Show the pinned base, the patches in order with the files each "
                                 "touches, and whether the installed torch is the base.")
    p = verbs.add_parser("lint", help="check the stack without any checkout",
                         description="Check patches/ without any checkout and report every problem at once, one "
                                     "line each naming the patch: the stack's form (series, paths, coverage map) "
                                     "and upstream's (no new test file without a line `New test file: <reason>`, "
                                     "a `Test Plan:` with a command, every author the one in patches/author and "
                                     "no placeholder, no process text of ours, well-formed `Fixes` lines). With "
                                     "--upstream-tests DIR, also upstream's linters on the lines each patch adds: "
                                     "clang-format on C++, ruff format, ruff check and flake8 on Python, and "
                                     "upstream's NOQA, TYPEIGNORE, SPACES, TABS and INCLUDE checks, with "
                                     "upstream's settings from DIR (a pytorch tree) or DIR/lint/.")
    p.add_argument("--upstream-tests", type=Path, metavar="DIR",
                   help="an upstream tree at the base (a pytorch checkout at the base tag): the C++ and test texts "
                        "the patches apply to, and upstream's linter settings (its own, or DIR/lint/; default: "
                        "$NDV_UPSTREAM_TESTS; without either, the code is not linted)")

    p = verbs.add_parser("apply", help="create a branch with the stack on a pytorch checkout",
                         description="On a clean pytorch checkout, create a branch at the base (or REV), "
                                     "apply every patch with `git am --3way` and check it out. On a "
                                     "conflict the checkout is left exactly as it was.")
    p.add_argument("--pytorch", type=Path, required=True, metavar="DIR", help="a pytorch git checkout")
    p.add_argument("--onto", metavar="REV", help="apply onto REV instead of the pinned base")
    p.add_argument("--branch", default=DEFAULT_BRANCH, help="the branch to create (default: %(default)s)")

    p = verbs.add_parser("export", help="write the commits base..branch back as patches/",
                         description="Write the commits base..BRANCH of a pytorch checkout back as "
                                     "patches/ and series, deterministically, each patch by the stack's one "
                                     "author (patches/author, whoever made the commit); patches/ is replaced "
                                     "only when the whole export succeeded.")
    p.add_argument("--pytorch", type=Path, required=True, metavar="DIR", help="a pytorch git checkout")
    p.add_argument("--branch", default=DEFAULT_BRANCH, help="the branch to export (default: %(default)s)")

    p = verbs.add_parser("rebase", help="move the stack to another release, or say what conflicts",
                         description="Move the stack to torch RELEASE in one run: its release wheel (from the "
                                     "wheelhouse, fetched there with pip if missing), `git am -3` of every "
                                     "patch onto the release's texts of the files the stack touches (torch/** "
                                     "from the wheel, C++ and test files from --release-tree), a report per "
                                     "patch (applies, applies with a 3-way merge, or conflicts: the rejected "
                                     "hunks and the release's lines in each conflict). Only when every patch "
                                     "applies whole are patches/ and base.toml rewritten, in one swap; "
                                     "otherwise exit 1 and patches/ is untouched.")
    p.add_argument("--release", required=True, metavar="X.Y.Z", help="the release to move to, e.g. 2.16.0")
    p.add_argument("--release-wheel", type=Path, metavar="WHL",
                   help="that release's torch wheel, instead of the wheelhouse's or pip's")
    p.add_argument("--release-tree", type=Path, metavar="DIR",
                   help="an upstream tree at that release: the C++ and test texts (without it, those files "
                        "are left out of the check and named)")
    p.add_argument("--upstream-tests", type=Path, metavar="DIR",
                   help="an upstream tree at the current base (default: $NDV_UPSTREAM_TESTS): the C++ and "
                        "test texts the patches were made on, so that git can merge them three ways")

    p = verbs.add_parser("base-tree", help="a partial git tree of the wheel's torch/**/*.py at the base",
                         description="Make a git repository whose first commit is the installed "
                                     "wheel's torch/**/*.py laid out as upstream's tree at the base "
                                     "commit (a PARTIAL tree: no C++, test/ or docs/). Check and "
                                     "develop Python hunks there; apply and export work on it.")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="a new folder")

    p = verbs.add_parser("overlay", help="build (or reuse) the overlay over the installed torch",
                         description="Lay the stack over the installed stock torch: patched Python "
                                     "files and compiled native shims in a cached folder; prints what "
                                     "was overlaid, what was skipped and why, and the folder.")
    p.add_argument("--allow-unshimmed", action="store_true",
                   help="overlay a C++ patch that has no shim (its C++ is then NOT in effect)")

    p = verbs.add_parser("run", help="run a command with the overlay active, or --stock",
                         description="Run CMD with the overlay first on PYTHONPATH and this venv's "
                                     "python first on PATH; with --stock, on the unmodified torch. "
                                     "Exits with CMD's status.")
    p.add_argument("--stock", action="store_true", help="run on the unmodified torch")
    p.add_argument("--allow-unshimmed", action="store_true",
                   help="overlay a C++ patch that has no shim (its C++ is then NOT in effect)")
    p.add_argument("--cpp-from", type=Path, metavar="PATH", help=CPP_FROM_HELP)
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="-- CMD ...", help="the command, after --")

    p = verbs.add_parser("test", help="the stack's own tests, and the upstream tests that cover it, stock vs patched",
                         description="The stack's own tests are the test functions its patches add or change "
                                     "in upstream's test files, found by applying its test hunks (git apply, no "
                                     "fuzz) to a copy of an upstream test tree: --upstream-tests DIR (default "
                                     "$NDV_UPSTREAM_TESTS), a folder holding test/... (e.g. ../shared/upstream-2.15) "
                                     "or a checkout's tree; DIR is never written. Without --select they run alone; "
                                     "--select quick/all/full adds the upstream files patches/upstream-tests.toml "
                                     "maps the stack's files to (the regression gate), with the test hunks in them. "
                                     "Both sides at the same time, each with its own inductor cache: stock (this "
                                     "venv's torch) and the stack (the overlay, or --patched-python); a per-file "
                                     "table, and summary.json beside the JUnit files. With --pytorch: the mapped "
                                     "tests and the stack's own, from that checkout with the stack applied. Exit 1 "
                                     "if a new test of the stack does not fail on stock or does not pass with it, "
                                     "a changed one does not pass with it, or a test that passed on stock fails, "
                                     "errors, is skipped or is missing with the stack (a regression).")
    p.add_argument("--upstream-tests", type=Path, metavar="DIR",
                   help="the folder holding upstream's test/... files the test hunks apply to "
                        "(default: $NDV_UPSTREAM_TESTS)")
    p.add_argument("--select", choices=upstream_tests.SELECTIONS,
                   help="own: the stack's own tests only (the default); quick: also each upstream-tests.toml "
                        "entry's quick part (the CI gate); all: also the whole mapped files but the "
                        "OpInfo/ModuleInfo sweeps; full: with them")
    p.add_argument("--pytorch", type=Path, metavar="DIR",
                   help="instead: a pytorch git checkout to take the tests from, the stack applied")
    p.add_argument("--onto", metavar="REV", help="with --pytorch: the stack onto REV instead of the base")
    p.add_argument("--stock-python", metavar="PY", help="the stock side's python (default: this venv's torch)")
    p.add_argument("--patched-python", metavar="PY",
                   help="the patched side's python, e.g. a venv with the built wheel (default: the overlay)")
    p.add_argument("--junit-dir", type=Path, help="write the reports here: stock/ and stack/, one JUnit XML and "
                                                  "log per run, and summary.json (with --pytorch: stock.xml and "
                                                  "stack.xml; with --each-prefix: prefix-NN/; default: a new folder "
                                                  "under $TMPDIR, kept, but with --each-prefix none)")
    p.add_argument("--cpp-from", type=Path, metavar="PATH", help=CPP_FROM_HELP)
    p.add_argument("--each-prefix", action="store_true",
                   help="instead: for each k, the first k patches overlaid and patch k's own tests run on the "
                        "test tree as the first k patches leave it (patched side only); exit 1 if a prefix "
                        "fails its own tests")

    p = verbs.add_parser("verify-cpp", help="verify the C++ patch text by compiling it, not only its shim",
                         description="Apply each C++ patch's hunks to the base text from --source (no "
                                     "fuzz), compile each touched file against the installed wheel with "
                                     "the shims' flags, check it defines the symbols overlay/shims.toml "
                                     "names and is safe to load beside libtorch, then run the stack's "
                                     "tests with the shims and with the compiled text in their place. "
                                     "Exit 1 if a hunk does not apply, a check fails or a test's "
                                     "outcome differs.")
    p.add_argument("--source", type=Path, metavar="PATH",
                   help="a pytorch checkout (its files at the base) or a folder holding the touched "
                        "files at their repo paths")
    p.add_argument("--tests", action="append", metavar="TEST",
                   help="compare on this test file or pytest id (repeatable; default: the stack's tests: "
                        "with a --source that has upstream's test/, the test functions the stack's test "
                        "hunks add or change there; else the test files it adds)")
    p.add_argument("--junit-dir", type=Path, help="write shim.xml and text.xml here")

    p = verbs.add_parser("submit", help="submit the stack upstream with ghstack, one PR per patch",
                         description="Preflight (lint with upstream's form, a clean checkout, every patch "
                                     "by the submitter's git identity there, a remote that is the upstream "
                                     "repository, ghstack configured, the base on the target branch, "
                                     "the scoreboard green with the stack), then apply the stack on a "
                                     "new branch, run ghstack submit, and write the trailers it adds "
                                     "(ghstack-source-id:, Pull-Request:) back into patches/.")
    p.add_argument("--dry-run", action="store_true",
                   help="every check but the scoreboard, then print the pull requests it would open; "
                        "push and write nothing")
    p.add_argument("--pytorch", type=Path, required=True, metavar="DIR", help="a pytorch git checkout")
    p.add_argument("--onto", metavar="REV", help="submit the stack applied onto REV (default: the base)")
    p.add_argument("--base-branch", metavar="NAME", help="the upstream branch the PRs target "
                                                          "(default: the remote's HEAD)")
    p.add_argument("--remote", default="origin", help="the upstream remote (default: %(default)s)")
    p.add_argument("--branch", help="the local branch to create (default: ndv/submit-<time>)")

    p = verbs.add_parser("checkout", help="a reviewer's copy: from patches/, or from a PR with ghstack",
                         description="From patches/: the stack applied at the base on a new branch (or "
                                     "--worktree), then the next commands. With --pr URL: ghstack "
                                     "checkout of the pull request, then its stack compared with "
                                     "patches/, patch by patch (exit 1 if they differ).")
    p.add_argument("--pytorch", type=Path, required=True, metavar="DIR", help="a pytorch git checkout")
    p.add_argument("--pr", metavar="URL", help="a pull request of the submitted stack (its top one)")
    p.add_argument("--onto", metavar="REV", help="with --pr: the branch the stack was submitted onto "
                                                 "(submit's --onto, e.g. origin/main); default: the base")
    p.add_argument("--worktree", type=Path, metavar="PATH", help="put the stack in a new worktree here")
    p.add_argument("--branch", default=DEFAULT_BRANCH, help="the branch to create (default: %(default)s)")
    p.add_argument("--remote", default="origin", help="the upstream remote (default: %(default)s)")

    p = verbs.add_parser("wheel", help="the patched wheel in dist/, from the release wheel",
                         description="Make dist/torch-<release>+<label>-<tags>.whl: the base's release "
                                     "wheel with the stack laid in (patched Python files, compiled "
                                     "shims and their loader), and beside it <wheel>.json. dist/ "
                                     "changes in one atomic step or not at all.")
    p.add_argument("--dist", type=Path, default=wheel.DEFAULT_DIST, metavar="DIR",
                   help="the folder for the wheel and its <wheel>.json (default: dist/ in this repository)")
    p.add_argument("--release-wheel", type=Path, metavar="WHL",
                   help="the base's release wheel (default: fetched with pip, checked by sha256)")
    p.add_argument("--allow-unshimmed", action="store_true",
                   help="ship a C++ patch that has no shim (its C++ is then NOT in effect)")
    source = p.add_argument_group(
        "from source", "With --from-source: upstream's own wheel build (python -m build --wheel "
        "--no-isolation) of a pytorch checkout with the stack applied in a dedicated worktree, "
        "CUDA unless --cpu, with ccache or sccache; the same dist/ and <wheel>.json.")
    source.add_argument("--from-source", action="store_true", help="build from a pytorch checkout")
    source.add_argument("--pytorch", type=Path, metavar="DIR", default=os.environ.get("PYTORCH_SRC") or None,
                        help="the pytorch git checkout (default: $PYTORCH_SRC)")
    source.add_argument("--onto", metavar="REV", help="apply the stack onto REV instead of the pinned base")
    source.add_argument("--cpu", action="store_true", help="a CPU-only build (no nvcc needed)")
    source.add_argument("--python", default="python3",
                        help="the python the wheel is for; if it lacks any of pytorch's build requirements, "
                             "they are pinned into a build venv made from it (default: %(default)s)")
    source.add_argument("--build-root", type=Path, metavar="DIR",
                        help="the build worktree and log (default: <checkout's git dir>/ndv-build)")
    source.add_argument("--compiler-cache", choices=("ccache", "sccache"),
                        help="the compiler launcher (default: ccache if on PATH, else sccache: on PATH or pinned)")
    source.add_argument("--remote-cache", metavar="URL",
                        help="a cache shared between machines: ccache remote storage (e.g. "
                             "redis://host, http://host/cache) or, for sccache, s3://, gs://, redis://")
    source.add_argument("--dry-run", action="store_true",
                        help="every check, then print each problem and the plan (the tools, the environment "
                             "and the commands); run and install nothing; exit 2 if a problem remains")
    return parser


_SOURCE_ONLY = ("pytorch", "onto", "cpu", "build_root", "compiler_cache", "remote_cache", "dry_run")


def _build_from_source(stack: Stack, args) -> None:
    if args.pytorch is None:
        raise BadInput("--from-source needs --pytorch DIR (or PYTORCH_SRC=DIR): a pytorch git checkout")
    if args.release_wheel or args.allow_unshimmed:
        raise BadInput("--release-wheel and --allow-unshimmed are for the wheel made from the release wheel, "
                       "not --from-source")
    options = build.Options(pytorch=args.pytorch, onto=args.onto, cpu=args.cpu, python=args.python,
                            build_root=args.build_root, compiler_cache=args.compiler_cache,
                            remote_cache=args.remote_cache, dist=args.dist)
    build.main(stack, options, sys.stdout, dry_run=args.dry_run)


# The folder each verb replaces in one atomic step, and what it then holds: what Ctrl-C left.
_OUTPUTS = {"wheel": ("dist", "the new wheel"), "export": ("patches", "the exported stack"),
            "rebase": ("patches", "the rebased stack"), "base-tree": ("out", "the new tree")}


def _interrupted(watch: Watch | None, what: str) -> str:
    """The one line a command ends with on Ctrl-C: what it left."""
    if watch is None:
        return "interrupted"
    folder = watch.folder.absolute()
    shown = f"{os.path.relpath(folder)}/" if folder.is_relative_to(Path.cwd()) else f"{folder}/"
    if watch.replaced():
        return f"interrupted: {shown} already holds {what} (complete: it was swapped in just before)"
    return f"interrupted: {shown} unchanged"


def _verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """The arguments. build.sh, test.sh, submit.sh and checkout.sh run one verb (`ndvstack wheel
    ...`) with NDV_ENTRY set to their name: that verb's usage, help and errors name the script."""
    parser = _parser()
    argv = sys.argv[1:] if argv is None else argv
    entry = os.environ.pop("NDV_ENTRY", None)  # popped: not for the commands we run
    if entry and argv[:1] and argv[0] in _verbs(parser):
        _verbs(parser)[argv[0]].prog = entry
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # said by the verb's parser: its usage, not stack.sh's
        _verbs(parser)[args.verb].error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def _lint(stack: Stack, given: Path | None) -> None:
    """The stack's and its messages' form; with an upstream tree, the code too (all reported at once)."""
    folder = own_tests.given_or_env(given)
    failed = None
    try:
        lint.main(stack, sys.stdout)
    except WorkFailed as e:
        failed = e
    if folder is None:
        if not failed:
            print("lint: the code was not linted: upstream's linters need --upstream-tests DIR", file=sys.stderr)
    elif not lint.findings(stack):
        if lint_code.main(stack, folder, basetree.base_torch_dir(stack.base), sys.stdout,
                          progress=lambda msg: print(msg, file=sys.stderr)):
            failed = failed or WorkFailed("lint: upstream's linters found problems in the patches' code")
    if failed:
        raise failed


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s")
    stack = Stack(args.patches)
    output, what = _OUTPUTS.get(args.verb, (None, ""))
    watch = Watch(getattr(args, output)) if output else None
    try:
        if args.verb == "status":
            status.main(stack, sys.stdout)
        elif args.verb == "lint":
            _lint(stack, args.upstream_tests)
        elif args.verb == "apply":
            apply.main(stack, args.pytorch, onto=args.onto, branch=args.branch)
        elif args.verb == "export":
            export.main(stack, args.pytorch, branch=args.branch)
        elif args.verb == "rebase":
            rebase.main(stack, args.release, sys.stdout, given_wheel=args.release_wheel,
                        upstream=own_tests.given_or_env(args.upstream_tests),
                        release_tree=args.release_tree)
        elif args.verb == "base-tree":
            basetree.main(stack, args.out)
        elif args.verb == "overlay":
            overlay.main(stack, sys.stdout, args.overlay_src, args.allow_unshimmed)
        elif args.verb == "test" and args.each_prefix:
            given = [f"--{name.replace('_', '-')}" for name in ("pytorch", "select", "onto",
                                                                "stock_python", "patched_python", "cpp_from")
                     if getattr(args, name)]
            if given:
                raise BadInput(f"--each-prefix runs each patch's own tests on the overlay; not with {given[0]}")
            each_prefix.main(stack, sys.stdout, args.junit_dir, overlay_src=args.overlay_src,
                             upstream=args.upstream_tests)
        elif args.verb == "test":
            upstream_tests.main(stack, sys.stdout, args.junit_dir, pytorch=args.pytorch, onto=args.onto,
                                stock_python=args.stock_python, patched_python=args.patched_python,
                                upstream=args.upstream_tests, select=args.select,
                                command=["stack.sh", *(argv if argv is not None else sys.argv[1:])],
                                overlay_src=args.overlay_src, cpp_from=args.cpp_from)
        elif args.verb == "verify-cpp":
            verify_cpp.main(stack, args.source, sys.stdout, args.overlay_src, tests=args.tests,
                            junit_dir=args.junit_dir)
        elif args.verb == "submit":
            submit.main(stack, args.pytorch, onto=args.onto, base_branch=args.base_branch,
                        remote=args.remote, branch=args.branch, dry_run=args.dry_run)
        elif args.verb == "checkout":
            checkout.main(stack, args.pytorch, pr=args.pr, worktree=args.worktree, branch=args.branch,
                          remote=args.remote, onto=args.onto)
        elif args.verb == "wheel" and args.from_source:
            _build_from_source(stack, args)
        elif args.verb == "wheel":
            given = [name for name in _SOURCE_ONLY if getattr(args, name) not in (None, False)
                     and not (name == "pytorch" and os.environ.get("PYTORCH_SRC"))]
            if given:
                raise BadInput(f"--{given[0].replace('_', '-')} needs --from-source")
            wheel.main(stack, args.dist, args.release_wheel, args.overlay_src,
                       allow_unshimmed=args.allow_unshimmed)
        elif args.verb == "run":
            return run.main(stack, args.command, stock=args.stock, overlay_src=args.overlay_src,
                            allow_unshimmed=args.allow_unshimmed, cpp_from=args.cpp_from)
    except StackError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except GitError as e:  # a git call we did not expect to fail: the work failed
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:  # Ctrl-C: one line, no traceback; temporary folders are gone by now
        print(_interrupted(watch, what), file=sys.stderr)
        return 130
    return 0
