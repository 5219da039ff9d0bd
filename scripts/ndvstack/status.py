"""status: the base, the patches in order with the files each touches, the installed torch."""

from __future__ import annotations

from ndvstack import lint
from ndvstack.errors import BadInput
from ndvstack.installed import installed_torch
from ndvstack.stack import Patch, Stack


def main(stack: Stack, out) -> None:
    base = stack.base
    print(f"base: {base.repo} @ {base.commit} (v{base.release}; wheel {base.wheel})", file=out)
    names = stack.series()
    print(f"patches: {len(names)}", file=out)
    for number, name in enumerate(names, 1):
        try:
            patch = Patch.load(stack.dir / name)
        except (BadInput, OSError) as e:
            print(f"  {number}. {name}: unreadable ({e})", file=out)
            continue
        print(f"  {number}. {name}\n     {patch.subject}", file=out)
        for touched in patch.touched:
            print(f"       {touched}", file=out)
    problems = lint.findings(stack)
    print(f"lint: {f'{len(problems)} problems (run lint)' if problems else 'clean'}", file=out)
    torch = installed_torch()
    if torch is None:
        print("installed torch: none", file=out)
    else:
        verdict = "the base" if torch.git_version == base.commit else f"NOT the base ({base.commit[:12]})"
        print(f"installed torch: {torch.version} at {torch.git_version[:12]} ({torch.location}), "
              f"{verdict}", file=out)
