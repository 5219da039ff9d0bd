"""What the from-source build asks of the machine: tools on PATH and their versions, cores,
memory and free disk. One object, so tests can hand the build a machine of their own (a
PATH of fake tools, fixed cores and memory) instead of patching."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

GIB = 1 << 30


def _memory_bytes() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


@dataclass
class Host:
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    cpus: int = field(default_factory=lambda: len(os.sched_getaffinity(0)))
    memory_bytes: int = field(default_factory=_memory_bytes)
    free_bytes: callable = lambda path: shutil.disk_usage(path).free

    def which(self, name: str) -> str | None:
        return shutil.which(name, path=self.env.get("PATH", ""))

    def output(self, argv: list[str]) -> str | None:
        """ARGV's stdout (stderr appended), or None if it cannot run or fails."""
        try:
            result = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return result.stdout + result.stderr if result.returncode == 0 else None


def version_in(text: str | None) -> tuple[int, ...] | None:
    """The first dotted version number in TEXT: 'cmake version 3.28.3' -> (3, 28, 3)."""
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text or "")
    return tuple(int(part) for part in match.groups() if part is not None) if match else None


def dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


def free_at(host: Host, path: Path) -> int:
    """Free bytes on the filesystem that PATH is or will be on."""
    while not path.exists():
        path = path.parent
    return host.free_bytes(path)
