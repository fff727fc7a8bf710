"""``seml <collection> results`` and get_results(states=, progress=) on the real MongoDB."""

from __future__ import annotations

import importlib.util
import json

import pytest
from typer.testing import CliRunner

from seml_hydra.cli import app
from seml_hydra.manage.results_table import results_table
from seml_hydra.store.results import get_results

runner = CliRunner()


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def seml(*args: str):
    return runner.invoke(app, list(args), prog_name="seml")


def exp(exp_id, lr, acc, status="COMPLETED", seed=7):
    return {
        "_id": exp_id,
        "batch_id": 1,
        "status": status,
        "config": {"opt": {"lr": lr}, "seed": seed, "data": "mnist"},
        **({"result": {"acc": acc, "loss": 1 - acc}} if acc is not None else {}),
    }


@pytest.fixture
def filled(test_db):
    test_db["res"].insert_many(
        [
            exp(1, 0.1, 0.5),
            exp(2, 0.2, 0.9),
            exp(3, 0.3, 0.7),
            exp(4, 0.4, None, status="FAILED", seed=8),
            exp(5, 0.5, None, status="STAGED"),
        ]
    )
    return test_db


def test_results_prints_varying_config_and_results_sorted_descending(filled):
    out = seml("res", "results", "--sort", "result.acc", "--desc", "--format", "csv")
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == [
        "_id,config.opt.lr,result.acc,result.loss",  # seed and data are the same: left out
        "2,0.2,0.9,0.09999999999999998",
        "3,0.3,0.7,0.30000000000000004",
        "1,0.1,0.5,0.5",
    ]


def test_results_selectors_states_and_formats(filled):
    out = seml("res", "results", "-s", "COMPLETED,FAILED", "--format", "json")
    assert out.exit_code == 0, out.output
    rows = json.loads(out.output)
    assert [r["_id"] for r in rows] == [1, 2, 3, 4]
    assert list(rows[0]) == [
        "_id",
        "status",
        "config.opt.lr",
        "config.seed",
        "result.acc",
        "result.loss",
    ]
    assert rows[3]["result.acc"] is None and rows[3]["status"] == "FAILED"
    md = seml("res", "results", "-fd", '{"config.opt.lr": {"$lt": 0.25}}', "--format", "markdown")
    assert md.exit_code == 0, md.output
    assert md.output.splitlines()[0] == "| _id | config.opt.lr | result.acc | result.loss |"
    assert len(md.output.splitlines()) == 4
    table = seml("res", "results", "-b", "1")
    assert table.exit_code == 0, table.output
    assert "config.opt.lr" in table.output and "0.9" in table.output and "mnist" not in table.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["-id", "99"],
            "No COMPLETED experiments in res match (-s picks other states).",
        ),
        (["-s", "RUNNING"], "No RUNNING experiments in res match."),
        (["-s", "DONE"], "Unknown state 'DONE'"),
        (["--sort", "result.f1"], "No column 'result.f1' to sort by; there are:"),
    ],
)
def test_results_bad_input_is_one_line_and_exit_1(filled, args, message):
    out = seml("res", "results", *args)
    assert out.exit_code == 1, out.output
    assert message in out.output
    assert len(out.output.strip().splitlines()) == 1, out.output


def test_results_of_an_unknown_collection_is_one_line(filled):
    out = seml("nosuch", "results")
    assert out.exit_code == 1 and len(out.output.strip().splitlines()) == 1, out.output


def test_get_results_states_replace_the_filter_status_and_progress_reads_all(filled, capsys):
    rows = get_results(
        "res", filter_dict={"status": "COMPLETED"}, states=["FAILED", "STAGED"], db=filled
    )
    assert [r["_id"] for r in rows] == [4, 5]
    rows = get_results("res", ["config.seed"], states=["FAILED"], progress=True, db=filled)
    assert rows == [{"config": {"seed": 8}}]  # SEML's order: a list second is the fields
    assert "Reading" in capsys.readouterr().err


def test_results_table_data_frame_has_the_cli_columns(filled):
    both = ["COMPLETED", "FAILED"]
    if importlib.util.find_spec("pandas") is None:  # the extra is not installed
        with pytest.raises(ImportError, match="pip install 'seml-hydra\\[pandas\\]'"):
            results_table("res", states=both, to_data_frame=True, db=filled)
        return
    df = results_table(
        "res", states=both, sort="config.opt.lr", descending=True, to_data_frame=True, db=filled
    )
    assert list(df.columns) == results_table("res", states=both, db=filled).columns
    assert df["_id"].tolist() == [4, 3, 2, 1]


def test_results_leave_out_the_seed_staging_added_to_an_app_without_one(test_db, tmp_path):
    """``examples/fail.py`` has no ``seed``: staging adds a drawn one per experiment to
    ``config`` (Sacred's place for it), which the task never sees; the table does not show
    it as a varying config column. An app's own seed stays a column."""
    from support.run import run_app

    proc = run_app(
        "fail.py", "-m", "hydra/launcher=seml_local", "fail_on=-1", "x=1,2", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    assert {d["hydra"].get("added_seed") for d in test_db["fail"].find()} == {True}
    out = seml("fail", "results", "--format", "csv")
    assert out.exit_code == 0, out.output
    assert out.output.splitlines() == ["_id,config.x,result", "1,1,10", "2,2,20"]
    test_db["own"].insert_many([exp(1, 0.1, 0.5, seed=1), exp(2, 0.1, 0.6, seed=2)])
    assert seml("own", "results", "--format", "csv").output.splitlines()[0] == (
        "_id,config.seed,result.acc,result.loss"
    )
