"""A long step is never silent: while it runs, a line every ten seconds with the time it has
taken (and, where the step can say, how far it is). Lines, not a redrawn bar, so that a log
file reads the same as the terminal; one per ten seconds does not flood it."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

EVERY = 10.0


def count(n: int, noun: str) -> str:
    """N and NOUN, plural unless N is 1: "1 shim", "3 hunks"."""
    return f"{n} {noun}" + ("" if n == 1 else "s")


@contextlib.contextmanager
def heartbeat(progress, what: str, status=lambda: ""):
    """While the block runs: PROGRESS("WHAT ... N s[, STATUS()]") every EVERY seconds."""
    every = EVERY
    done = threading.Event()
    start = time.monotonic()

    def beat():
        while not done.wait(every):
            extra = status()
            progress(f"{what} ... {time.monotonic() - start:.0f} s{f', {extra}' if extra else ''}")

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def written(folder: Path, of_about: int) -> str:
    """How much of an expected OF_ABOUT bytes the files in FOLDER hold so far."""
    try:
        size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    except OSError:  # the step has just ended and moved it away
        return ""
    return f"{size >> 20} of about {of_about >> 20} MB written"
