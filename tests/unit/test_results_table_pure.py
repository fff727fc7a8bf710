"""The pure middle of ``seml <collection> results`` (manage.results_table) and of get_results'
filter (store.results.results_filter): no services."""

from __future__ import annotations

import json

import pytest

from seml_hydra.manage.results_table import (
    build_table,
    cell,
    sort_rows,
    table_columns,
    to_csv,
    to_json,
    to_markdown,
    varying_keys,
)
from seml_hydra.manage.selection import ManageError
from seml_hydra.store.results import flatten, results_filter


def test_varying_keys_keeps_only_keys_that_differ_or_are_missing_somewhere():
    rows = [
        {"config.lr": 0.1, "config.seed": 1, "config.layers": [1, 2], "config.opt": "adam"},
        {"config.lr": 0.2, "config.seed": 1, "config.layers": [1, 2], "config.extra": 5},
        {"config.lr": 0.1, "config.seed": 1, "config.layers": [1, 3], "result": 1},
    ]
    assert varying_keys(rows) == ["config.lr", "config.layers", "config.opt", "config.extra"]


def test_varying_keys_of_one_row_or_none_is_empty():
    assert varying_keys([{"config.lr": 0.1}]) == []
    assert varying_keys([]) == []


def test_varying_keys_treats_equal_numbers_and_dict_orders_as_same():
    rows = [{"config.a": {"x": 1, "y": 2}}, {"config.a": {"y": 2, "x": 1}}]
    assert varying_keys(rows) == []


def test_table_columns_id_status_when_mixed_varying_config_and_all_result_fields():
    rows = [
        flatten(
            {"_id": 1, "status": "COMPLETED", "config": {"lr": 0.1, "s": 1}, "result": {"acc": 0.5}}
        ),
        flatten(
            {
                "_id": 2,
                "status": "COMPLETED",
                "config": {"lr": 0.2, "s": 1},
                "result": {"acc": 0.6, "loss": {"val": 1.0}},
            }
        ),
    ]
    assert table_columns(rows) == ["_id", "config.lr", "result.acc", "result.loss.val"]
    rows[1]["status"] = "FAILED"
    assert table_columns(rows)[:2] == ["_id", "status"]


def test_table_columns_a_plain_result_is_the_column_result():
    rows = [
        flatten({"_id": 1, "result": 0.5, "config": {"a": 1}}),
        flatten({"_id": 2, "result": 0.7, "config": {"a": 1}}),
    ]
    assert table_columns(rows) == ["_id", "result"]


def test_sort_rows_ascending_descending_missing_last_and_unknown_key():
    rows = [
        {"_id": 1, "r": 0.5},
        {"_id": 2},
        {"_id": 3, "r": 0.9},
        {"_id": 4, "r": float("nan")},
        {"_id": 5, "r": 0.1},
    ]
    assert [r["_id"] for r in sort_rows(rows, "r")] == [5, 1, 3, 2, 4]
    assert [r["_id"] for r in sort_rows(rows, "r", descending=True)] == [3, 1, 5, 2, 4]
    assert [r["_id"] for r in sort_rows(rows[::-1])] == [1, 2, 3, 4, 5]
    with pytest.raises(ManageError, match="No column 'result.acc' to sort by; there are: _id, r"):
        sort_rows(rows, "result.acc")


def test_sort_rows_mixed_types_numbers_then_strings():
    rows = [{"k": "b"}, {"k": 2}, {"k": [1]}, {"k": "a"}, {"k": 1.5}]
    assert [r["k"] for r in sort_rows(rows, "k")] == [1.5, 2, "a", "b", [1]]


def test_formats_csv_markdown_json_and_cells():
    table = build_table(
        [
            {"_id": 2, "config": {"lr": 0.1, "name": "a|b"}, "result": {"acc": 0.123456789}},
            {"_id": 1, "config": {"lr": 0.2, "name": "c"}, "result": {"acc": None}},
        ],
        sort="_id",
    )
    assert table.columns == ["_id", "config.lr", "config.name", "result.acc"]
    assert to_csv(table.columns, table.rows) == (
        "_id,config.lr,config.name,result.acc\n1,0.2,c,\n2,0.1,a|b,0.123456789\n"
    )
    md = to_markdown(table.columns, table.rows).splitlines()
    assert md[0] == "| _id | config.lr | config.name | result.acc |"
    assert md[1] == "| --- | --- | --- | --- |"
    assert md[3] == "| 2 | 0.1 | a\\|b | 0.123457 |"
    assert json.loads(to_json(table.columns, table.rows)) == [
        {"_id": 1, "config.lr": 0.2, "config.name": "c", "result.acc": None},
        {"_id": 2, "config.lr": 0.1, "config.name": "a|b", "result.acc": 0.123456789},
    ]
    assert cell([1, 2]) == "[1, 2]" and cell(None) == "" and cell(True) == "True"


def test_results_filter_defaults_states_replace_status_and_aliases():
    assert results_filter(None, None) == {"status": "COMPLETED"}
    assert results_filter({}, None) == {}
    assert results_filter({"status": "FAILED", "x": 1}, None) == {"status": "FAILED", "x": 1}
    assert results_filter({"status": "FAILED"}, ["completed", "queued"]) == {
        "status": {"$in": ["COMPLETED", "STAGED", "QUEUED"]}
    }
    assert results_filter(None, []) == {}
    with pytest.raises(ValueError, match="Unknown state 'DONE'"):
        results_filter(None, ["DONE"])


def test_markdown_cells_carry_no_escape_sequence_or_control_character():
    """A forged config value cannot clear the screen or retitle the terminal through the
    Markdown table (the README: escape sequences are removed from what documents hold)."""
    rows = [{"_id": 1, "config.y": "\x1b[2J\x1b]0;title\x07v\rw"}]
    text = to_markdown(["_id", "config.y"], rows)
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text
    assert "| 1 | v w |" in text
