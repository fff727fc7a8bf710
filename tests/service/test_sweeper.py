"""``hydra/sweeper=seml``, and Hydra's default sweeper driving our launcher (which adopts it):
Hydra's basic sweeper without the second composition of every point. Same points, same order,
same batches, same results as the basic sweeper with Hydra's basic launcher; the same error for
a bad override, before anything is staged."""

from __future__ import annotations

import json
from pathlib import Path

from support.paths import ROOT
from support.run import run_app, run_python

#: runs an app in-process and writes what its sweeper got back (tests/apps/sweep_returns.py)
SWEEP_RETURNS = Path(__file__).resolve().parents[1] / "apps" / "sweep_returns.py"

SWEEP = ["model=small,large", "optimizer.lr=0.1,0.01", "epochs=2"]
FAST = ["hydra.launcher.poll_interval_s=0.3", "hydra.launcher.snapshot=false"]


def run_sweep(sweeper: str, collection: str, *args: str, cwd):
    return run_app(
        "train.py",
        "-m",
        "hydra/launcher=seml_local",
        f"hydra/sweeper={sweeper}",
        f"hydra.launcher.collection={collection}",
        *FAST,
        *args,
        cwd=cwd,
    )


def points_of(collection) -> list[tuple]:
    return [
        (d["hydra"]["job_num"], d["hydra"]["overrides"], d["status"], d["result"], d["config"])
        for d in collection.find().sort("hydra.job_num", 1)
    ]


def test_seml_sweeper_gives_the_basic_sweepers_points_order_and_results(test_db, tmp_path):
    (tmp_path / "basic").mkdir()
    (tmp_path / "seml").mkdir()
    basic = run_sweep("basic", "basic_sweep", *SWEEP, cwd=tmp_path / "basic")
    assert basic.returncode == 0, basic.stderr
    seml = run_sweep("seml", "seml_sweep", *SWEEP, cwd=tmp_path / "seml")
    assert seml.returncode == 0, seml.stderr
    expected = points_of(test_db["basic_sweep"])
    assert len(expected) == 4
    assert points_of(test_db["seml_sweep"]) == expected
    assert all(status == "COMPLETED" for _, _, status, _, _ in expected)
    # the multirun.yaml Hydra writes names the sweeper
    (multirun,) = (tmp_path / "seml").glob("multirun/*/*/multirun.yaml")
    assert "seml_sweeper.SemlSweeper" in multirun.read_text()


def error_line(stderr: str) -> str:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return "\n".join(lines[-3:])


def test_bad_override_gives_the_basic_sweepers_error_and_stages_nothing(test_db, tmp_path):
    bad = ["optimizer.lr=0.1,0.2", "optimizer.oops=1,2", "epochs=2"]
    hydras = run_app("train.py", "-m", "hydra/launcher=basic", *bad, cwd=tmp_path)
    basic = run_sweep("basic", "basic_bad", *bad, cwd=tmp_path)
    seml = run_sweep("seml", "seml_bad", *bad, cwd=tmp_path)
    assert hydras.returncode == basic.returncode == seml.returncode == 1
    assert "oops" in hydras.stderr
    assert error_line(basic.stderr) == error_line(hydras.stderr)
    assert error_line(seml.stderr) == error_line(hydras.stderr)
    assert "val_acc=" not in hydras.stdout + basic.stdout + seml.stdout
    assert test_db["basic_bad"].count_documents({}) == 0
    assert test_db["seml_bad"].count_documents({}) == 0


def sweep_returns(tmp_path: Path, name: str, *args: str) -> dict:
    """``examples/train.py -m *args`` run by :data:`SWEEP_RETURNS` in ``tmp_path/name``: the
    sweeper's class, its batches of returns and the count of Hydra's full compositions."""
    cwd = tmp_path / name
    cwd.mkdir()
    out = cwd / "returns.json"
    run_python(
        str(SWEEP_RETURNS),
        str(out),
        str(ROOT / "examples" / "train.py"),
        "-m",
        *args,
        cwd=cwd,
        check=True,
    )
    return json.loads(out.read_text())


def test_default_sweeper_is_adopted_and_keeps_the_basic_launchers_batches_and_returns(
    test_db, tmp_path
):
    # 6 points in batches of 4 and 2: order, job numbers, configs and returns as Hydra's own
    sweep = ["hydra.sweeper.max_batch_size=4", "optimizer.lr=0.1,0.01,0.001", "seed=1,2"]
    sweep += ["epochs=2"]
    hydras = sweep_returns(tmp_path, "hydra", *sweep)
    ours = sweep_returns(
        tmp_path,
        "ours",
        "hydra/launcher=seml_local",
        "hydra.launcher.collection=adopted",
        *FAST,
        *sweep,
    )
    assert hydras["sweeper"].endswith("basic_sweeper.BasicSweeper")
    assert [len(batch) for batch in hydras["batches"]] == [4, 2]
    assert ours["batches"] == hydras["batches"]
    assert [r["job_num"] for batch in ours["batches"] for r in batch] == list(range(6))
    # adopted: each point composed once, by the launcher (one Hydra composition per batch's
    # combination of config groups here), not a second time by the sweeper's validation
    assert ours["sweeper"] == "seml_hydra.launch.sweeper.BasicSweeper"
    assert hydras["compositions"] == 12  # validation + the basic launcher: twice a point
    assert ours["compositions"] < 6
    assert test_db["adopted"].count_documents({"status": "COMPLETED"}) == 6


def test_seml_sweeper_with_hydras_basic_launcher_validates_with_the_same_error(tmp_path):
    ok = run_app("train.py", "-m", "hydra/sweeper=seml", "epochs=1", "seed=1,2", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.count("val_acc=") == 2
    bad = ["model=small,large", "model.hidden=1,2", "model.oops=1,2", "epochs=1"]
    basic = run_app("train.py", "-m", "hydra/sweeper=basic", *bad, cwd=tmp_path)
    seml = run_app("train.py", "-m", "hydra/sweeper=seml", *bad, cwd=tmp_path)
    assert basic.returncode == seml.returncode == 1
    assert error_line(seml.stderr) == error_line(basic.stderr)
    assert "val_acc=" not in seml.stdout  # validated before any job ran
