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
    version_py = dist.locate_file("torch/version.py")
    match = re.search(r"^git_version = '([0-9a-f]+)'", version_py.read_text(), re.M)
    return InstalledTorch(dist.version, match[1] if match else "unknown",
                          str(dist.locate_file("torch")))
