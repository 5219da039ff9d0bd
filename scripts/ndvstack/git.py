"""The one place that runs git. Every call is logged at debug level with its duration."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from pathlib import Path

log = logging.getLogger("ndvstack.git")

# Settings that would change what git writes or applies, pinned for every call so a
# user's ~/.gitconfig cannot make an export differ or an apply fuzzier.
_PINNED_CONFIG = {
    "core.hooksPath": os.devnull,
    "core.quotePath": "true",
    "diff.algorithm": "default",
    "diff.context": "3",
    "diff.interHunkContext": "0",
    "diff.indentHeuristic": "true",
    "diff.mnemonicPrefix": "false",
    "diff.noprefix": "false",
    "diff.relative": "false",
    "diff.renames": "false",
    "diff.statGraphWidth": "20",
    "diff.suppressBlankEmpty": "false",
    "diff.orderFile": os.devnull,
    "format.headers": "",
    "format.signOff": "false",
    "format.coverLetter": "false",
    "format.thread": "false",
    "format.useAutoBase": "false",
    "am.keepcr": "false",
    "am.messageId": "false",
    "am.threeWay": "true",
    "apply.whitespace": "nowarn",
    "advice.detachedHead": "false",
    "commit.gpgSign": "false",
}


class GitError(Exception):
    def __init__(self, args: list[str], result: subprocess.CompletedProcess):
        self.result = result
        detail = (result.stderr or result.stdout or "").strip().splitlines()
        super().__init__(f"git {' '.join(args)} failed: {detail[-1] if detail else result.returncode}")


class Git:
    def __init__(self, cwd: Path | str):
        self.cwd = Path(cwd)

    def run(self, *args: str, check: bool = True, input: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        cmd = ["git"]
        for key, value in _PINNED_CONFIG.items():
            cmd += ["-c", f"{key}={value}"]
        cmd += list(args)
        start = time.monotonic()
        result = subprocess.run(cmd, cwd=self.cwd, input=input, capture_output=True, text=True,
                                env={**os.environ, **(env or {}), "LC_ALL": "C"})
        log.debug("git %s (in %s) -> %d in %.2fs", " ".join(args), self.cwd, result.returncode,
                  time.monotonic() - start)
        if check and result.returncode != 0:
            raise GitError(list(args), result)
        return result

    def out(self, *args: str, **kwargs) -> str:
        return self.run(*args, **kwargs).stdout.strip()

    def ok(self, *args: str) -> bool:
        return self.run(*args, check=False).returncode == 0

    def commit_of(self, rev: str) -> str | None:
        """The full sha of REV as a commit, or None if the repository lacks it."""
        result = self.run("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}", check=False)
        return result.stdout.strip() if result.returncode == 0 else None
