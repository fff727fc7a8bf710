"""``seml <collection> results`` streamed: the very bytes the in-memory table printed
(``results_golden_cases``), whichever path the rows take (``_id`` order, or sorted by
another column and read back in batches of ``_id`` s), on the real MongoDB."""

from __future__ import annotations

import json

import pytest
from results_golden_cases import COLLECTION, GOLDEN, documents, outputs
from typer.testing import CliRunner

from seml_hydra.cli import app
from seml_hydra.manage import results_table
from seml_hydra.manage.results_table import results_stream

runner = CliRunner()


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def golden(test_db):
    test_db[COLLECTION].insert_many(documents())
    return test_db


def seml(*args: str):
    return runner.invoke(app, list(args), prog_name="seml")


@pytest.mark.parametrize("per_query", [results_table.IDS_PER_QUERY, 3])
@pytest.mark.parametrize("per_write", [results_table.LINES_PER_WRITE, 2])
def test_streamed_results_print_the_bytes_the_in_memory_table_printed(
    golden, monkeypatch, per_query, per_write
):
    monkeypatch.setattr(results_table, "IDS_PER_QUERY", per_query)
    monkeypatch.setattr(results_table, "LINES_PER_WRITE", per_write)
    expected = json.loads(GOLDEN.read_text())
    assert outputs(seml) == expected


def test_rows_are_read_from_the_cursor_as_they_are_written(golden):
    """The second read hands over one row at a time: the first row is there before the
    cursor is exhausted, and a new experiment stored meanwhile (after the rows read so far)
    is still printed: nothing was read ahead into memory beyond the cursor's batch."""
    table = results_stream(COLLECTION, states=["COMPLETED"], db=golden)
    rows = table.rows()
    first = next(rows)
    assert first["_id"] == 1
    assert not isinstance(rows, list)
    ids = [first["_id"], *(row["_id"] for row in rows)]
    assert ids == [1, 2, 4, 5, 7, 8]


def test_sorted_stream_holds_the_order_and_reads_the_rows_in_batches(golden, monkeypatch):
    monkeypatch.setattr(results_table, "IDS_PER_QUERY", 2)
    table = results_stream(
        COLLECTION, states=["COMPLETED", "FAILED", "KILLED"], sort="result.acc", db=golden
    )
    # numbers by value, then strings, then the rows without one (None, or no such key) by _id
    assert [row["_id"] for row in table.rows()] == [1, 5, 2, 7, 8, 3, 4, 6]


def test_a_sorted_stream_reads_the_collection_once_before_its_rows(golden, monkeypatch):
    """The scan keeps each row's ``_id`` and sort value: no second read to sort them."""
    from pymongo.collection import Collection

    reads = []
    real_find = Collection.find

    def find(self, *args, **kwargs):
        reads.append(args)
        return real_find(self, *args, **kwargs)

    monkeypatch.setattr(Collection, "find", find)
    table = results_stream(
        COLLECTION, states=["COMPLETED", "FAILED", "KILLED"], sort="result.acc", db=golden
    )
    assert len(reads) == 1
    assert [row["_id"] for row in table.rows()] == [1, 5, 2, 7, 8, 3, 4, 6]
