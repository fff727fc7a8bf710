"""The streamed results table's pure parts (manage.results_table): the writers take the rows
from an iterator one at a time, and the one-pass scan finds what the in-memory functions
find."""

from __future__ import annotations

import json
import math

import pytest

from seml_hydra.manage.results_table import (
    TableScan,
    chunks,
    csv_lines,
    json_lines,
    markdown_lines,
    sort_order,
    sort_rows,
    table_columns,
    text_lines,
    to_json,
)
from seml_hydra.manage.selection import ManageError

COLUMNS = ["_id", "config.lr"]


class Rows:
    """An iterator of rows that counts how many were taken."""

    def __init__(self, n: int) -> None:
        self.taken = 0
        self.n = n

    def __iter__(self):
        return self

    def __next__(self):
        if self.taken == self.n:
            raise StopIteration
        self.taken += 1
        return {"_id": self.taken, "config.lr": 0.1 * self.taken}


@pytest.mark.parametrize(
    "writer, head",
    [
        (csv_lines, 1),
        (markdown_lines, 2),
        (lambda c, r: text_lines(c, r, [3, 9], title="t"), 4),
        (json_lines, 0),
    ],
    ids=["csv", "markdown", "text", "json"],
)
def test_writers_take_one_row_per_line_they_give(writer, head):
    rows = Rows(10**9)  # a table too large to hold: only what is written is taken
    lines = writer(COLUMNS, rows)
    for _ in range(head):
        next(lines)
    assert rows.taken == 0
    next(lines)
    assert rows.taken == 1
    next(lines)
    assert rows.taken == 2


def test_chunks_join_lines_lazily():
    rows = Rows(10**9)
    pieces = chunks(csv_lines(COLUMNS, rows), size=3)
    assert next(pieces) == "_id,config.lr\n1,0.1\n2,0.2\n"
    assert rows.taken == 2


def test_json_lines_are_json_dumps_of_the_list():
    rows = [{"_id": 1, "config.lr": {"a": [1, {}]}}, {"_id": 2, "x": "y\n"}, {"_id": 3}]
    expected = json.dumps([{c: r.get(c) for c in COLUMNS} for r in rows], indent=2, default=str)
    assert to_json(COLUMNS, rows) == expected
    assert to_json(COLUMNS, []) == "[]" == json.dumps([], indent=2)


def test_scan_in_order_tells_when_rows_need_sorting():
    def in_order(values, descending=False):
        scan = TableScan(sort="k", descending=descending)
        for value in values:
            scan.add({} if value is ... else {"k": value})
        # the one-pass check agrees with the sort itself
        order = sort_order([None if v is ... else v for v in values], descending)
        assert scan.in_order == (order == list(range(len(values))))
        return scan.in_order

    assert in_order([1, 2, 2, 3.5, "a", "b", [1], None, ..., math.nan])
    assert not in_order([2, 1])
    assert not in_order([None, 1])
    assert in_order([3, 2, 2], descending=True)
    assert not in_order([1, 2], descending=True)
    assert in_order([])


def test_scan_columns_are_table_columns_and_sort_column_must_exist():
    rows = [
        {"_id": 1, "status": "COMPLETED", "config.a": 1, "config.b": 1, "result": 2},
        {"_id": 2, "status": "FAILED", "config.a": 2, "config.b": 1, "pruned.step": 4},
        {"_id": 3, "status": "FAILED", "config.b": 1, "config.c": 0, "result.x": 1},
    ]
    scan = TableScan(sort="result.y")
    for row in rows:
        scan.add(row)
    assert scan.columns() == table_columns(rows)
    assert scan.columns() == [
        "_id",
        "status",
        "pruned.step",
        "config.a",
        "config.c",
        "result",
        "result.x",
    ]
    with pytest.raises(ManageError, match="No column 'result.y'") as scanned:
        scan.check_sort()
    with pytest.raises(ManageError) as in_memory:
        sort_rows(rows, "result.y")
    assert str(scanned.value) == str(in_memory.value)
