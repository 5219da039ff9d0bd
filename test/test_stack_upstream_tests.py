"""The real stack's own upstream test files, A/B: every test passes with the stack, and
each file has tests that fail on stock (the bug they pin is real there)."""

import io
from collections import defaultdict

from ndvstack import upstream_tests
from ndvstack.stack import DEFAULT_PATCHES, Stack


def test_the_stacks_upstream_tests_fail_on_stock_and_pass_with_the_stack(tmp_path):
    table = upstream_tests.main(Stack(DEFAULT_PATCHES), io.StringIO(), tmp_path, progress=lambda _: None)
    by_file = defaultdict(list)
    for row in table:
        by_file[row.test_id.split("::")[0].rsplit(".", 1)[0]].append(row)
    assert by_file, "the stack adds no upstream test files"
    for test_file, rows in by_file.items():
        assert all(row.stack == "passed" for row in rows), test_file
        assert any(row.stock in ("failed", "error") for row in rows), f"{test_file}: nothing fails on stock"
