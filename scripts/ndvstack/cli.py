"""Command line: parses arguments and calls each verb's main(). Nothing else lives here."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ndvstack import apply, export, lint, status
from ndvstack.checkout import DEFAULT_BRANCH
from ndvstack.errors import StackError
from ndvstack.git import GitError
from ndvstack.stack import DEFAULT_PATCHES, Stack


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="stack.sh", description="Keep the stack in patches/ and move it in and out of pytorch checkouts.",
        epilog="Exit status: 0 success, 1 the work failed, 2 bad usage or input.")
    parser.add_argument("--patches", type=Path, default=DEFAULT_PATCHES,
                        help="the stack's folder (default: %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true", help="log every git command")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    verbs.add_parser("status", help="the base, the patches and their files, the installed torch",
                     description="Show the pinned base, the patches in order with the files each "
                                 "touches, and whether the installed torch is the base.")
    verbs.add_parser("lint", help="check the stack without any checkout",
                     description="Check patches/ without any checkout and report every problem at once.")

    p = verbs.add_parser("apply", help="create a branch with the stack on a pytorch checkout",
                         description="On a clean pytorch checkout, create a branch at the base (or REV), "
                                     "apply every patch with `git am --3way` and check it out. On a "
                                     "conflict the checkout is left exactly as it was.")
    p.add_argument("--pytorch", type=Path, required=True, metavar="DIR", help="a pytorch git checkout")
    p.add_argument("--onto", metavar="REV", help="apply onto REV instead of the pinned base")
    p.add_argument("--branch", default=DEFAULT_BRANCH, help="the branch to create (default: %(default)s)")

    p = verbs.add_parser("export", help="write the commits base..branch back as patches/",
                         description="Write the commits base..BRANCH of a pytorch checkout back as "
                                     "patches/ and series, deterministically; patches/ is replaced "
                                     "only when the whole export succeeded.")
    p.add_argument("--pytorch", type=Path, required=True, metavar="DIR", help="a pytorch git checkout")
    p.add_argument("--branch", default=DEFAULT_BRANCH, help="the branch to export (default: %(default)s)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(name)s: %(message)s")
    stack = Stack(args.patches)
    try:
        if args.verb == "status":
            status.main(stack, sys.stdout)
        elif args.verb == "lint":
            lint.main(stack, sys.stdout)
        elif args.verb == "apply":
            apply.main(stack, args.pytorch, onto=args.onto, branch=args.branch)
        elif args.verb == "export":
            export.main(stack, args.pytorch, branch=args.branch)
    except StackError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except GitError as e:  # a git call we did not expect to fail: the work failed
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0
