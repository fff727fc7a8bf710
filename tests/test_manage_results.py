"""seml_hydra.results.get_results on the real MongoDB."""

from __future__ import annotations

import importlib.util

import pytest

from seml_hydra.results import get_results


@pytest.fixture
def filled(test_db):
    test_db["r"].insert_many(
        [
            {"_id": 2, "batch_id": 1, "status": "COMPLETED", "config": {"lr": 0.1}, "result": 0.8},
            {"_id": 1, "batch_id": 1, "status": "COMPLETED", "config": {"lr": 0.2}, "result": 0.7},
            {"_id": 3, "batch_id": 2, "status": "FAILED", "config": {"lr": 0.3}},
            # Sacred's serializer stores tuples like this; get_results restores them
            {
                "_id": 4,
                "batch_id": 2,
                "status": "COMPLETED",
                "config": {"lr": 0.4},
                "result": {"py/tuple": [1, 2]},
            },
        ]
    )
    return test_db


def test_get_results_returns_completed_experiments_sorted_with_restored_results(filled):
    rows = get_results("r", db=filled)
    assert [r["_id"] for r in rows] == [1, 2, 4]
    assert rows[0] == {
        "_id": 1,
        "batch_id": 1,
        "status": "COMPLETED",
        "config": {"lr": 0.2},
        "result": 0.7,
    }
    assert rows[2]["result"] == (1, 2)


def test_get_results_takes_a_filter_and_fields(filled):
    rows = get_results("r", filter={"batch_id": 2}, fields=["config.lr", "status"], db=filled)
    assert rows == [
        {"config": {"lr": 0.3}, "status": "FAILED"},
        {"config": {"lr": 0.4}, "status": "COMPLETED"},
    ]


def test_get_results_resolves_the_database_like_the_cli(filled):
    assert [r["_id"] for r in get_results("r", filter={})] == [1, 2, 3, 4]


def test_get_results_data_frame_or_a_clear_import_error(filled):
    if importlib.util.find_spec("pandas") is None:
        with pytest.raises(ImportError, match="pip install 'seml-hydra\\[pandas\\]'"):
            get_results("r", to_data_frame=True, db=filled)
        return
    df = get_results("r", fields=["config.lr", "result"], to_data_frame=True, db=filled)
    assert list(df.columns) == ["config.lr", "result"]  # only the fields asked for
    assert df["config.lr"].tolist() == [0.2, 0.1, 0.4]
