"""A small collection whose ``seml <collection> results`` output is kept byte for byte in
``data/results_golden.json`` (written by the in-memory table before the output was streamed):
the streamed table must print the very same bytes. Run this file to rewrite the JSON (only
when the output is meant to change)."""

from __future__ import annotations

import json
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "data" / "results_golden.json"
COLLECTION = "golden"


def documents() -> list[dict]:
    """Experiments exercising every rule of the table: varying and constant config keys, keys
    missing from some, a seed staging added, mixed states, early-stopped ones, plain and nested
    results, floats, NaN, unicode, wide characters, escape sequences, lists and dicts."""
    nan = float("nan")
    docs = [
        {
            "_id": 1,
            "status": "COMPLETED",
            "config": {"lr": 0.1, "m": "a", "k": 1},
            "result": {"acc": 0.5, "loss": 1.25},
        },
        {
            "_id": 2,
            "status": "COMPLETED",
            "config": {"lr": 0.01, "m": "b", "k": 1},
            "result": {"acc": 0.75, "loss": nan},
        },
        {"_id": 3, "status": "FAILED", "config": {"lr": 1e-5, "m": "ü wide 漢字", "k": 1}},
        {
            "_id": 4,
            "status": "COMPLETED",
            "config": {"lr": 0.3, "m": "x|y\nz", "k": 1, "extra": [1, 2]},
            "result": {"acc": None, "loss": 0.1},
        },
        {
            "_id": 5,
            "status": "COMPLETED",
            "config": {"lr": 0.2, "m": "\x1b[2Jevil\rz", "k": 1},
            "result": {"acc": 0.625, "loss": 2.0, "nested": {"a": 1}},
            "pruned": {"step": 3},
        },
        {
            "_id": 6,
            "status": "KILLED",
            "config": {"lr": 0.2, "m": "t\tab", "k": 1, "d": {"x": 1}},
            "result": 7,
        },
        {
            "_id": 7,
            "status": "COMPLETED",
            "config": {"lr": 0.2, "m": "s", "k": 1, "seed": 5},
            "hydra": {"added_seed": True},
            "result": {"acc": 1, "loss": -0.0},
        },
        {
            "_id": 8,
            "status": "COMPLETED",
            "config": {"lr": "high", "m": "q", "k": 1},
            "result": {"acc": "n/a", "loss": [0.5, 0.25]},
        },
    ]
    return docs


#: command lines (after ``seml golden``) whose output is kept
CASES = [
    ["results"],
    ["results", "-f", "csv"],
    ["results", "-f", "json"],
    ["results", "-f", "markdown"],
    ["results", "-s", "COMPLETED,FAILED,KILLED"],
    ["results", "-s", "COMPLETED,FAILED,KILLED", "-f", "csv"],
    ["results", "-s", "COMPLETED,FAILED,KILLED", "-f", "json"],
    ["results", "-s", "COMPLETED,FAILED,KILLED", "-f", "markdown"],
    ["results", "--sort", "result.acc"],
    ["results", "--sort", "result.acc", "--desc", "-f", "csv"],
    ["results", "--sort", "config.lr", "-s", "COMPLETED,FAILED,KILLED", "-f", "json"],
    ["results", "--sort", "config.m", "--desc", "-s", "COMPLETED,FAILED,KILLED"],
    ["results", "--desc", "-f", "markdown"],
    ["results", "-fd", '{"config.lr": 0.2}', "-s", "COMPLETED,KILLED"],
    ["results", "-id", "1"],
]


def outputs(seml) -> dict[str, str]:
    """``{" ".join(case): what seml prints}`` for every case (``seml`` runs a command line)."""
    out = {}
    for case in CASES:
        result = seml(COLLECTION, *case)
        assert result.exit_code == 0, (case, result.output)
        out[" ".join(case)] = result.stdout
    return out


if __name__ == "__main__":  # write the golden file from the running code, against a test db
    import os

    import pymongo
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    url = os.environ["SEML_MONGODB_URI"]
    db = pymongo.MongoClient(url).get_default_database()
    db.drop_collection(COLLECTION)
    db[COLLECTION].insert_many(documents())
    runner = CliRunner()
    found = outputs(lambda *a: runner.invoke(app, list(a), prog_name="seml"))
    db.drop_collection(COLLECTION)
    GOLDEN.write_text(json.dumps(found, indent=1, ensure_ascii=False) + "\n")
