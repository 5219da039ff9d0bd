"""A long build's output: every line to a log file, one progress line on the terminal read
from ninja's `[N/M]` status, with an estimate of the time left."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

_NINJA_STATUS = re.compile(r"^\[(\d+)/(\d+)\]")
# What names a build failure: ninja's failed edge, a compiler's error, CMake's.
_ERROR = re.compile(r"^FAILED: |\berror:|CMake Error")


def _clock(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class NinjaProgress:
    """Turns build output lines into progress text. Ninja runs more than once in a build
    (CMake re-runs, sub-builds): a new total, or a count going back, starts a new phase."""

    def __init__(self, now=time.monotonic):
        self.now = now
        self.total = None
        self.started = None
        self.shown = None

    def feed(self, line: str) -> str | None:
        """The progress text if LINE moves it on by a whole percent, else None."""
        match = _NINJA_STATUS.match(line)
        if not match:
            return None
        done, total = int(match[1]), int(match[2])
        if total != self.total or (self.shown and done < self.shown[0]):
            self.total, self.started, self.shown = total, self.now(), None
        percent = 100 * done // total if total else 100
        if self.shown and percent == self.shown[1] and done != total:
            return None
        self.shown = (done, percent)
        elapsed = self.now() - self.started
        eta = elapsed * (total - done) / done if done else 0
        return f"[{done}/{total}] {percent}% elapsed {_clock(elapsed)} eta {_clock(eta)}"


def stream(argv: list[str], cwd: Path, env: dict[str, str], log: Path, show) -> tuple[int, str | None]:
    """Runs ARGV with stdout and stderr into LOG, line by line, calling SHOW(text) with
    each progress step. Returns (exit status, the first line that names an error, or
    the last line if none does)."""
    progress = NinjaProgress()
    first_error = last = None
    with open(log, "w") as out:
        process = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, errors="replace", bufsize=1)
        for line in process.stdout:
            out.write(line)
            last = line.strip() or last
            if first_error is None and _ERROR.search(line):
                first_error = line.strip()
            text = progress.feed(line)
            if text:
                show(text)
        return process.wait(), first_error or last
