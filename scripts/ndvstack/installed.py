"""What torch the tool's interpreter has installed, read without importing it (fast)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata


@dataclass(frozen=True)
class InstalledTorch:
    version: str
    git_version: str
    location: str


def installed_torch() -> InstalledTorch | None:
    try:
        dist = metadata.distribution("torch")
    except metadata.PackageNotFoundError:
        return None
    # torch.__version__ (version.py) has the local label the wheel's metadata may lack: a
    # CUDA release wheel's metadata says 2.15.0, torch says 2.15.0+cu132.
    text = dist.locate_file("torch/version.py").read_text()
    version = re.search(r"^__version__ = '([^']+)'", text, re.M)
    git_version = re.search(r"^git_version = '([0-9a-f]+)'", text, re.M)
    return InstalledTorch(version[1] if version else dist.version,
                          git_version[1] if git_version else "unknown", str(dist.locate_file("torch")))
