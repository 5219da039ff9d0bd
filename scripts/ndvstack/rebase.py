"""rebase --release X.Y.Z: move the stack to another release in one run, or say what conflicts.

1. The release wheel: the wheelhouse's, or fetched there with pip from the package index (as
   build.sh gets the base's); its sha256 is pinned, and its torch/version.py gives the commit.
2. A scratch git repository with two commits of the files the stack touches: the current base's
   texts (the installed base wheel's torch/**, the C++ and test texts from --upstream-tests: they
   hold the preimage blobs the patches name, so `git am -3` can merge), and the release's texts
   (its wheel's torch/**, the C++ and test texts from --release-tree).
3. `git am -3` of each patch onto the release's commit, in order. A patch that does not apply is
   reported per file, with the hunks git rejected or the conflicting regions and upstream's lines
   in them, and left out so the patches after it are checked too. A path with no text at the
   release (a C++ or test file, without --release-tree) is left out of every patch and named.
4. Only when every patch applies whole: patches/ is rewritten in one swap (the rebased commits,
   format-patch as export writes them, and base.toml pinning the release). Otherwise exit 1 and
   patches/ is untouched.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ndvstack import export, lint
from ndvstack.errors import BadInput, WorkFailed
from ndvstack.git import Git
from ndvstack.basetree import SCRATCH_IDENTITY, base_torch_dir, text_at
from ndvstack.stack import Patch, Stack
from ndvstack.wheel import wheelhouse as default_wheelhouse



@dataclass
class Release:
    version: str  # X.Y.Z
    wheel: Path
    sha256: str
    commit: str
    local_version: str  # torch.__version__, e.g. 2.14.1+cu130


@dataclass
class Outcome:
    patch: str
    how: str = "applies"  # "applies", "applies with a 3-way merge", "conflicts"
    left_out: list[str] = field(default_factory=list)  # touched paths with no text at the release
    details: list[str] = field(default_factory=list)


def release_wheel(version: str, given: Path | None, wheelhouse: Path, progress) -> Path:
    """The release's torch wheel for this python: GIVEN, the wheelhouse's, or fetched into it."""
    if not re.fullmatch(r"\d+\.\d+\.\d+", version):
        raise BadInput(f"--release {version}: not a release X.Y.Z")
    if given is not None:
        if not given.is_file():
            raise BadInput(f"--release-wheel {given}: no such file")
        return given
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    found = sorted(wheelhouse.glob(f"torch-{version}-{tag}-{tag}-*.whl"))
    if found:
        return found[0]
    progress(f"rebase: fetching torch {version} with pip into {wheelhouse} ...")
    wheelhouse.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=wheelhouse, prefix=".fetch-") as tmp:
        result = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                                 "--only-binary=:all:", "--dest", tmp, f"torch=={version}"],
                                capture_output=True, text=True)
        fetched = sorted(Path(tmp).glob("torch-*.whl"))
        if result.returncode != 0 or not fetched:
            last = (result.stderr.strip().splitlines() or ["no wheel"])[-1]
            raise BadInput(f"--release {version}: pip found no torch {version} wheel for {tag}: {last}")
        target = wheelhouse / fetched[0].name
        fetched[0].rename(target)
    return target


def read_release(version: str, wheel: Path) -> Release:
    digest = hashlib.sha256()
    with open(wheel, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    try:
        with zipfile.ZipFile(wheel) as z:
            text = z.read("torch/version.py").decode()
    except (zipfile.BadZipFile, KeyError) as e:
        raise BadInput(f"{wheel}: not a torch wheel ({e})") from None
    local = re.search(r"^__version__ = '([^']+)'", text, re.M)
    commit = re.search(r"^git_version = '([0-9a-f]{40})'", text, re.M)
    if not local or not commit or local[1].split("+")[0] != version:
        raise BadInput(f"{wheel}: its torch/version.py says {local[1] if local else 'no version'}, "
                       f"not release {version}")
    return Release(version, wheel, digest.hexdigest(), commit[1], local[1])


def _texts(paths: list[str], tree: Path | None, wheel_text) -> dict[str, bytes]:
    """The texts of PATHS that TREE or (for torch/**) the wheel has."""
    texts = {}
    for path in paths:
        if tree is not None and (tree / path).is_file():
            texts[path] = (tree / path).read_bytes()
        elif path.startswith("torch/"):
            text = wheel_text(path)
            if text is not None:
                texts[path] = text
    return texts


def _commit(git: Git, texts: dict[str, bytes], message: str) -> str:
    """A commit of exactly TEXTS (on top of HEAD, if any); its sha."""
    git.run("rm", "-r", "--quiet", "--ignore-unmatch", "--cached", ".")
    for path, text in texts.items():
        (git.cwd / path).parent.mkdir(parents=True, exist_ok=True)
        (git.cwd / path).write_bytes(text)
    if texts:
        git.run("add", "--force", *texts)
    git.run("commit", "--quiet", "--allow-empty", "-m", message, env=SCRATCH_IDENTITY)
    git.run("clean", "-fdxq")
    return git.out("rev-parse", "HEAD")


def _conflicts(git: Git, stderr: str) -> list[str]:
    """What git reported: the rejected hunks, and each conflicted file's regions with upstream's lines."""
    details = [line.strip() for line in stderr.splitlines()
               if line.startswith(("error: patch failed", "error: ", "CONFLICT"))]
    for path in git.out("diff", "--name-only", "--diff-filter=U").splitlines():
        lines = (git.cwd / path).read_text(errors="replace").splitlines()
        i = 0
        while i < len(lines):
            if lines[i].startswith("<<<<<<< "):
                start, ours = i + 1, []
                i += 1
                while i < len(lines) and not lines[i].startswith(("=======", "|||||||")):
                    ours.append(lines[i])
                    i += 1
                shown = "; ".join(line.strip() for line in ours[:4] if line.strip()) or "(nothing)"
                more = f" (+{len(ours) - 4} lines)" if len(ours) > 4 else ""
                details.append(f"{path}:{start}: conflict; the release has: {shown[:200]}{more}")
            i += 1
    return list(dict.fromkeys(details))


def apply_all(git: Git, patches: list[Patch], onto: str, missing: set[str], progress) -> tuple[list[Outcome], str]:
    """`git am -3` of each patch onto ONTO, leaving out the paths in MISSING; returns the
    outcomes and the last commit."""
    git.run("checkout", "--quiet", "--detach", onto)
    outcomes = []
    for k, patch in enumerate(patches, 1):
        progress(f"rebase: {patch.path.name} ({k}/{len(patches)})")
        outcome = Outcome(patch.path.name, left_out=sorted(set(patch.touched) & missing))
        excludes = [f"--exclude={path}" for path in outcome.left_out]
        result = git.run("am", "--3way", "--keep-non-patch", *excludes, str(patch.path), check=False,
                         env=SCRATCH_IDENTITY)
        if result.returncode == 0:
            if "Falling back to patching base and 3-way merge" in result.stdout + result.stderr:
                outcome.how = "applies with a 3-way merge"
        else:
            outcome.how = "conflicts"
            outcome.details = _conflicts(git, result.stdout + result.stderr)
            git.run("am", "--abort", check=False)
        outcomes.append(outcome)
    return outcomes, git.out("rev-parse", "HEAD")


def report(outcomes: list[Outcome], release: Release, out) -> bool:
    """Prints the per-patch report; True when every patch applies whole."""
    print(f"rebase: {len(outcomes)} patches onto torch {release.local_version} ({release.commit[:12]}, "
          f"{release.wheel.name}, sha256 {release.sha256[:16]}...)", file=out)
    for o in outcomes:
        print(f"{o.patch}: {o.how}" + (f"; not checked, no text at the release: {', '.join(o.left_out)}"
                                       if o.left_out else ""), file=out)
        for line in o.details:
            print(f"  {line}", file=out)
    return all(o.how != "conflicts" and not o.left_out for o in outcomes)


def base_toml(release: Release, repo: str) -> str:
    return (f"# The upstream commit the stack applies to, the release it is, and the release wheel\n"
            f"# built from it (whose torch/ Python files are exactly upstream's at this commit).\n"
            f'repo = "{repo}"\ncommit = "{release.commit}"\nrelease = "{release.version}"\n\n'
            f'[wheel]\nfile = "{release.wheel.name}"\nsha256 = "{release.sha256}"\n')


def main(stack: Stack, version: str, out, given_wheel: Path | None = None, upstream: Path | None = None,
         release_tree: Path | None = None, wheelhouse: Path | None = None,
         progress=lambda msg: print(msg, file=sys.stderr)) -> None:
    lint.check(stack)
    for name, tree in (("--upstream-tests", upstream), ("--release-tree", release_tree)):
        if tree is not None and not tree.is_dir():
            raise BadInput(f"{name} {tree}: no such folder")
    base = stack.base
    if version == base.release:
        raise BadInput(f"--release {version}: the stack is already on {version}")
    release = read_release(version, release_wheel(version, given_wheel, wheelhouse or default_wheelhouse(),
                                                  progress))
    torch_dir = base_torch_dir(base)
    patches = stack.patches()
    paths = sorted({path for p in patches for path in p.touched})
    current = {path: text for path in paths if (text := text_at(path, upstream, torch_dir)) is not None}
    with zipfile.ZipFile(release.wheel) as z:
        names = set(z.namelist())
        target = _texts(paths, release_tree, lambda path: z.read(path) if path in names else None)
    created = {c.new_path for p in patches for c in p.files if c.old_path is None and c.new_path}
    missing = {path for path in paths if path not in target and path not in created}

    with tempfile.TemporaryDirectory(prefix="ndv-rebase-") as tmp:
        git = Git(tmp)
        git.run("init", "--quiet")
        _commit(git, current, f"torch {base.release} ({base.commit[:12]}): the touched files")
        new = _commit(git, target, f"torch {release.version} ({release.commit[:12]}): the touched files")
        outcomes, head = apply_all(git, patches, new, missing, progress)
        if not report(outcomes, release, out):
            raise WorkFailed(f"rebase: the stack does not move to {version} whole; patches/ unchanged")
        export.write_stack(stack, git, new, head, f"the stack on {version}", upstream_commit=release.commit,
                           data={"base.toml": base_toml(release, base.repo)})
    print(f"rebase: patches/ now on torch {release.version} ({release.commit[:12]}); base.toml pins "
          f"{release.wheel.name}", file=out)
