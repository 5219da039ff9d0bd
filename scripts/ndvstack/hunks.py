"""Which hunks of a diff do not apply, for error messages that name them."""

from __future__ import annotations

import re
from pathlib import Path

from ndvstack.git import Git
from ndvstack.stack import FileChange


def apply_to_tree(tree: Path, changes: list[FileChange], diff: Path):
    """`git apply` of CHANGES (written to DIFF, outside TREE) onto the plain folder TREE,
    never with fuzz; returns git's result. Git is kept from finding a repository above."""
    diff.write_text("".join(change.text for change in changes), errors="surrogateescape")
    return Git(tree).run("apply", "--whitespace=nowarn", str(diff), check=False,
                         env={"GIT_CEILING_DIRECTORIES": str(diff.parent)})


def rejected_hunks(git: Git, diff: Path, changes: list[FileChange]) -> list[str]:
    """Runs `git apply --reject` of DIFF where GIT runs (a scratch tree: it is changed) and
    names each file and hunk that failed."""
    result = git.run("apply", "--reject", "--verbose", str(diff), check=False)
    hunks_of = {change.path: change.hunks for change in changes}
    failed: list[str] = []
    current = None
    for line in (result.stderr + result.stdout).splitlines():
        if m := re.match(r"(?:Applying|Checking) patch (.+?)(?: with \d+ rejects?)?\.\.\.$", line):
            current = m[1]
        elif (m := re.match(r"Rejected hunk #(\d+)\.", line)) and current:
            number, hunks = int(m[1]), hunks_of.get(current, [])
            header = hunks[number - 1].header if number <= len(hunks) else "?"
            failed.append(f"{current} hunk #{number} ({header})")
        elif m := re.match(r"error: (.+?): (does not exist in index|No such file or directory|"
                           r"already exists in working directory)", line):
            failed.append(f"{m[1]} ({m[2]})")
    return failed
