"""run: a command with the overlay active (or, with --stock, on the unmodified torch), so
any check can be done A/B in one go: `run -- CMD` and `run --stock -- CMD`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ndvstack import overlay
from ndvstack.atomic import sigint_deferred
from ndvstack.errors import BadInput
from ndvstack.stack import Stack


def environment(stack: Stack, stock: bool, **overlay_options) -> dict[str, str]:
    """The environment CMD runs in: this venv's python first on PATH and, unless STOCK,
    the overlay first on PYTHONPATH. NDV_OVERLAY says which (a folder, or "stock")."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    if stock:
        env["NDV_OVERLAY"] = "stock"
        return env
    folder = overlay.ensure(stack, **overlay_options)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
    env["NDV_OVERLAY"] = str(folder)
    return env


def private_inductor_env(folder: str | Path) -> dict[str, str]:
    """The environment entries that give a process inductor caches of its own, all under
    FOLDER and removed with it: TORCHINDUCTOR_CACHE_DIR, and TMPDIR, where inductor writes
    its precompiled headers (150 MB for each torch location, so for each overlay) whatever
    the cache dir says."""
    tmp = Path(folder, "tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    return {"TORCHINDUCTOR_CACHE_DIR": str(folder), "TMPDIR": str(tmp)}


def main(stack: Stack, command: list[str], stock: bool = False, **overlay_options) -> int:
    """Runs COMMAND; returns its exit status."""
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise BadInput("run: give the command after --, e.g. run -- python -c 'import torch'")
    if stock and overlay_options.get("cpp_from"):
        raise BadInput("run: --cpp-from lays the C++ patch text over torch; --stock runs without the stack")
    env = environment(stack, stock, **overlay_options)
    try:
        # Ctrl-C reaches COMMAND too: it decides how to stop, and we say "interrupted" after it.
        with sigint_deferred():
            status = subprocess.run(command, env=env).returncode
    except FileNotFoundError:
        raise BadInput(f"run: {command[0]}: command not found") from None
    return status if status >= 0 else 128 - status  # killed by a signal: as a shell says it
