"""``hydra/sweeper=seml``: Hydra's basic sweeper without the second composition of every point.
Same points, same order, same results as the basic sweeper; the same error for a bad override,
before anything is staged."""

from __future__ import annotations

from support.run import run_app

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
    basic = run_sweep("basic", "basic_bad", *bad, cwd=tmp_path)
    seml = run_sweep("seml", "seml_bad", *bad, cwd=tmp_path)
    assert basic.returncode == seml.returncode == 1
    assert "oops" in basic.stderr
    assert error_line(seml.stderr) == error_line(basic.stderr)
    assert test_db["basic_bad"].count_documents({}) == 0
    assert test_db["seml_bad"].count_documents({}) == 0


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
