"""Building things beside their destination and moving them in with one rename, so that
an interrupted build (SIGKILL included) leaves what was there as it was."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path


def build_dir(parent: Path, prefix: str) -> Path:
    """A new temporary folder in PARENT (same filesystem as the destination), named with
    our pid so that a later run can tell an abandoned one; abandoned ones are removed."""
    parent.mkdir(parents=True, exist_ok=True)
    for old in parent.glob(f".{prefix}-*"):
        pid = old.name[len(prefix) + 2:].split("-")[0]
        if not pid.isdigit() or not Path(f"/proc/{pid}").exists():
            shutil.rmtree(old, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f".{prefix}-{os.getpid()}-", dir=parent))


@contextlib.contextmanager
def sigint_deferred():
    """Ctrl-C (SIGINT) waits until the block is done, then raises KeyboardInterrupt as usual:
    for cleanup that a second Ctrl-C must not cut short. Only the main thread gets signals."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught = []
    old = signal.signal(signal.SIGINT, lambda *_: caught.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)
        if caught and callable(old):
            old(signal.SIGINT, None)


def remove(folder: Path) -> None:
    """Removes FOLDER (a build_dir), wholly even if Ctrl-C comes meanwhile."""
    with sigint_deferred():
        shutil.rmtree(folder, ignore_errors=True)
        if folder.exists():  # a killed child process was still writing into it: once more
            time.sleep(0.5)
            shutil.rmtree(folder, ignore_errors=True)


class Watch:
    """Whether FOLDER was replaced (exchanged or renamed into place) since the watch began:
    what an interrupted command left there."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.before = self._inode()

    def _inode(self) -> int | None:
        try:
            return os.stat(self.folder).st_ino
        except OSError:
            return None

    def replaced(self) -> bool:
        return self._inode() != self.before


def exchange(a: Path, b: Path) -> None:
    """Atomically swaps the paths A and B (Linux renameat2 with RENAME_EXCHANGE)."""
    libc = ctypes.CDLL(None, use_errno=True)
    at_fdcwd, rename_exchange = -100, 2
    if libc.renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"renameat2 exchange of {a} and {b}: {os.strerror(errno)}")


def pause_point(name: str) -> None:
    """For tests only: with NDV_TEST_PAUSE_AT=NAME, say so on stderr and wait here until
    killed, so that a test can SIGKILL the process inside a publish window and see what a
    crash there leaves. Without it, nothing."""
    if os.environ.get("NDV_TEST_PAUSE_AT") == name:
        print(f"{name} (paused for a test)", file=sys.stderr, flush=True)
        while True:
            signal.pause()
