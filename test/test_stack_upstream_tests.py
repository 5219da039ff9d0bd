"""The real stack's own tests, A/B, on upstream's 2.15 test files with the series' test hunks
(../shared/upstream-2.15, or $NDV_SHARED_UPSTREAM_TESTS): every new test fails on stock and
passes with the stack, every changed one passes with it."""

import io
import os
from pathlib import Path

import pytest

from ndvstack import upstream_tests
from ndvstack.stack import DEFAULT_PATCHES, REPO_ROOT, Stack


def test_the_stacks_own_tests_fail_on_stock_and_pass_with_the_stack(tmp_path):
    stack = Stack(DEFAULT_PATCHES)
    shared = Path(os.environ.get("NDV_SHARED_UPSTREAM_TESTS") or REPO_ROOT.parent / "shared" / "upstream-2.15")
    if not stack.series():
        pytest.skip("the series is empty")
    if not (shared / "test").is_dir():
        pytest.skip(f"{shared} has no test/ (set NDV_SHARED_UPSTREAM_TESTS)")
    out = io.StringIO()
    table = upstream_tests.main(stack, out, tmp_path, progress=lambda _: None, upstream=shared, select="own")
    print(out.getvalue())
    assert table, "the stack adds or changes no test"
    assert all(row.stack == "passed" for row in table)  # main() also fails on a new test that passes on stock
