"""README.md and docs/: the README is a front page whose first screen gets a user from a clone
to the patched wheel, its before/after snippet is docs/before_after.py, every link between the
pages resolves, and no page names this project's tracker or a path outside the repository."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
FIRST_SCREEN = 4000


def test_the_readme_is_a_front_page_whose_first_screen_has_the_commands():
    text = README.read_text()
    assert len(text) <= 20000
    first = text[:FIRST_SCREEN]
    for needed in ("./scripts/build.sh", "pip install dist/torch-*.whl", "python docs/before_after.py",
                   "./scripts/selftest.sh", "selftest.sh --quick", "stack.sh run --stock --",
                   "torch 2.13.0", "docs/stack.md", "docs/verification.md", "docs/tool.md"):
        assert needed in first, f"{needed!r} is not in the README's first {FIRST_SCREEN} characters"


def test_the_readmes_snippet_is_the_example_file():
    snippet = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    assert snippet == (ROOT / "docs" / "before_after.py").read_text()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    found, seen = set(), {}
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            name = slug(line.lstrip("#"))
            found.add(f"{name}-{seen[name]}" if name in seen else name)
            seen[name] = seen.get(name, 0) + 1
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_resolves(page):
    for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.is_file(), f"{page.name}: {target}: no such file"
        if anchor:
            assert anchor in anchors(linked), f"{page.name}: {target}: no such heading"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_tracker_numbers_and_no_paths_outside_the_repository(page):
    text = page.read_text()
    assert not re.search(r"\bissues? \d+|(?<![\w/])#\d+\b", text, re.I), page.name
    assert "../shared" not in text and "/work/" not in text and "SOURCES.md" not in text, page.name
