"""The main job end to end on real services: Hydra sweep -> MongoDB -> Slurm (or submitit's local
executor) -> results, as a user runs it (the example apps in subprocesses)."""

from __future__ import annotations

import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from support.paths import ROOT
from support.run import run_app, start_app
from support.slurm import sacct
from support.wait import wait_running

FAST = ["hydra.launcher.poll_interval_s=0.3"]


def sacct_states(array_id: int, tasks: int) -> dict[str, str]:
    """``{job id: state}`` of an array's ``tasks`` tasks, from Slurm accounting (polled until
    slurmdbd has recorded all of them in a terminal state, at most 60 s)."""
    deadline = time.monotonic() + 60
    while True:
        out = sacct(array_id, "JobID,State")
        rows = dict(line.split("|", 1) for line in out.split())
        terminal = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"}
        if len(rows) >= tasks and all(state.split()[0] in terminal for state in rows.values()):
            return rows
        if time.monotonic() > deadline:
            return rows
        time.sleep(0.5)


def test_sweep_on_slurm_gives_completed_documents_and_one_array_job(slurm, test_db, tmp_path):
    proc = run_app(
        "train.py",
        "-m",
        "hydra/launcher=seml",
        "optimizer.lr=0.1,0.01",
        "model=small,large",
        *FAST,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Staged 4 new experiment(s)" in proc.stdout
    docs = list(test_db["train"].find())
    assert len(docs) == 4
    assert {d["status"] for d in docs} == {"COMPLETED"}
    assert all(isinstance(d["result"], float) and 0 < d["result"] <= 1 for d in docs)
    assert all(d["captured_out"] and d["start_time"] and d["stop_time"] for d in docs)
    assert all(d["host"]["hostname"] in {"node1", "node2"} for d in docs)
    assert len({d["batch_id"] for d in docs}) == 1
    array_ids = {d["slurm"][0]["array_id"] for d in docs}
    assert len(array_ids) == 1
    assert {d["slurm"][0]["sbatch_options"]["comment"] for d in docs} == {"train"}
    overrides = sorted(tuple(d["hydra"]["overrides"]) for d in docs)
    assert overrides == sorted(
        (f"optimizer.lr={lr}", f"model={m}") for lr in ("0.1", "0.01") for m in ("small", "large")
    )
    states = sacct_states(array_ids.pop(), 4)
    assert len(states) == 4 and set(states.values()) == {"COMPLETED"}, states


def test_failing_task_is_failed_in_mongodb_and_slurm_and_the_multirun_exits_non_zero(
    slurm, test_db, tmp_path
):
    proc = run_app("fail.py", "-m", "hydra/launcher=seml", "x=1,2,3", *FAST, cwd=tmp_path)
    assert proc.returncode != 0
    docs = {d["config"]["x"]: d for d in test_db["fail"].find()}
    assert docs[2]["status"] == "FAILED"
    assert "ValueError: x == 2" in "".join(docs[2]["fail_trace"])
    assert docs[1]["status"] == docs[3]["status"] == "COMPLETED"
    assert docs[3]["result"] == 30
    array_id = docs[2]["slurm"][0]["array_id"]
    states = sacct_states(array_id, 3)
    assert states[f"{array_id}_{docs[2]['slurm'][0]['task_id']}"] == "FAILED"
    assert states[f"{array_id}_{docs[1]['slurm'][0]['task_id']}"] == "COMPLETED"
    # Hydra reports the failed point as its own launcher would: its trace, not Hydra's frames
    assert proc.returncode == 1 and "ValueError: x == 2" in proc.stderr
    assert "seml fail print-fail-trace` shows the trace of every failed point" in proc.stderr
    assert "basic_sweeper.py" not in proc.stderr, proc.stderr


def _train_sweep(hydra_sweep_runner, tmp_path, *overrides):
    import importlib.util

    spec = importlib.util.spec_from_file_location("train_example", ROOT / "examples/train.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return hydra_sweep_runner(
        calling_file=str(ROOT / "examples/train.py"),
        calling_module=None,
        task_function=module.main.__wrapped__,
        config_path="conf",
        config_name="config",
        overrides=["hydra/launcher=seml_local", "hydra.job.chdir=True", *FAST, *overrides],
        temp_dir=tmp_path,
    )


def test_same_sweep_twice_stages_nothing_and_returns_stored_results(
    hydra_sweep_runner, test_db, tmp_path, capsys
):
    points = ["optimizer.lr=0.1,0.01", "model=small,large"]
    with _train_sweep(hydra_sweep_runner, tmp_path / "a", *points) as sweep:
        first = [r.return_value for r in sweep.returns[0]]
    with _train_sweep(hydra_sweep_runner, tmp_path / "b", *points) as sweep:
        second = [r.return_value for r in sweep.returns[0]]
    out = capsys.readouterr().out
    assert "Skipped 4 point(s) already in the collection as COMPLETED" in out
    assert second == first and all(isinstance(v, float) for v in first)
    assert test_db["train"].count_documents({}) == 4


def test_failed_experiment_is_rerun_by_the_next_launch_and_force_stages_a_copy(test_db, tmp_path):
    proc = run_app("fail.py", "-m", "hydra/launcher=seml_local", "x=2", *FAST, cwd=tmp_path)
    assert proc.returncode != 0
    assert test_db["fail"].find_one()["status"] == "FAILED"
    proc = run_app(
        "fail.py", "-m", "hydra/launcher=seml_local", "x=2", "fail_on=5", *FAST, cwd=tmp_path
    )
    # a different config (fail_on changed) is a new experiment
    assert proc.returncode == 0, proc.stderr
    assert test_db["fail"].count_documents({}) == 2
    proc = run_app("fail.py", "-m", "hydra/launcher=seml_local", "x=2", *FAST, cwd=tmp_path)
    assert "Re-running 1 earlier failed" in proc.stdout
    assert test_db["fail"].count_documents({}) == 2
    for _ in range(2):  # force: the same config is staged again, as a new experiment
        proc = run_app(
            "fail.py",
            "-m",
            "hydra/launcher=seml_local",
            "x=3",
            "hydra.launcher.force=true",
            *FAST,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr
    assert test_db["fail"].count_documents({"config.x": 3}) == 2


def test_two_launches_at_once_get_distinct_ids_and_lose_nothing(test_db, tmp_path):
    def launch(values: str):
        return run_app(
            "fail.py",
            "-m",
            "hydra/launcher=seml_local",
            f"x={values}",
            "fail_on=-1",
            *FAST,
            cwd=tmp_path,
        )

    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(launch, ["1,2,3", "4,5,6"]))
    assert all(p.returncode == 0 for p in procs), [p.stderr for p in procs]
    docs = list(test_db["fail"].find())
    assert sorted(d["_id"] for d in docs) == [1, 2, 3, 4, 5, 6]
    assert sorted(d["config"]["x"] for d in docs) == [1, 2, 3, 4, 5, 6]
    assert len({d["batch_id"] for d in docs}) == 2
    assert {d["status"] for d in docs} == {"COMPLETED"}


def test_unreachable_mongodb_is_a_clear_error_after_5_s_and_nothing_is_submitted(slurm, tmp_path):
    """The launcher waits 5 s for the server (``store.db.client.connect``'s ``timeout_s``, named in
    the message), not pymongo's 30 s. The wall-clock bound is only a guard: on a loaded machine
    Python's start-up alone can take seconds (speed lives in benchmarks/, not in asserts)."""
    proc = run_app(
        "train.py",
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.collection=unreachable_probe",
        "optimizer.lr=0.1,0.01",
        cwd=tmp_path,
        env={"SEML_MONGODB_URI": "mongodb://127.0.0.1:1/nothing"},
        timeout=120,
    )
    assert proc.returncode == 1
    assert "Cannot reach MongoDB at 127.0.0.1:1" in proc.stderr
    assert "within 5 s" in proc.stderr
    assert "Traceback" not in proc.stderr
    queued = subprocess.run(
        ["squeue", "-h", "-o", "%k"], capture_output=True, text=True, check=True
    ).stdout
    assert "unreachable_probe" not in queued
    assert not (tmp_path / "multirun").exists() or not list(tmp_path.rglob("*.submission_file*"))


def test_unknown_partition_is_a_clear_error_and_leaves_documents_staged(slurm, test_db, tmp_path):
    proc = run_app(
        "train.py",
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.partition=no_such_partition",
        "optimizer.lr=0.1,0.01",
        *FAST,
        cwd=tmp_path,
    )
    assert proc.returncode == 1
    assert "invalid partition" in proc.stderr.lower()
    assert "hydra.launcher.partition" in proc.stderr
    assert "Traceback" not in proc.stderr
    docs = list(test_db["train"].find())
    assert len(docs) == 2 and {d["status"] for d in docs} == {"STAGED"}


def test_wait_false_returns_submission_handles_not_results(hydra_sweep_runner, test_db, tmp_path):
    from seml_hydra.launch.wait import Submission

    with _train_sweep(
        hydra_sweep_runner, tmp_path, "hydra.launcher.wait=false", "model=small,large"
    ) as sweep:  # (leaving the block deletes the sweep dir: wait inside)
        handles = [r.return_value for r in sweep.returns[0]]
        assert all(isinstance(h, Submission) for h in handles)
        assert [h.collection for h in handles] == ["train", "train"]
        ids = [h.exp_id for h in handles]
        assert {d["_id"] for d in test_db["train"].find()} == set(ids)
        deadline = time.monotonic() + 120
        while test_db["train"].count_documents({"status": "COMPLETED"}) < 2:
            assert time.monotonic() < deadline, list(test_db["train"].find({}, {"status": 1}))
            time.sleep(0.3)


def test_wait_false_with_a_sweeper_that_needs_results_is_refused(test_db, tmp_path):
    proc = run_app(
        "train.py",
        "-m",
        "hydra/launcher=seml_local",
        "hydra.launcher.wait=false",
        "hydra.sweeper._target_=some.other.Sweeper",
        cwd=tmp_path,
    )
    assert proc.returncode != 0
    assert test_db["train"].count_documents({}) == 0


def test_ctrl_c_detaches_without_cancelling_anything(slurm, test_db, tmp_path, monkeypatch):
    import signal

    monkeypatch.setenv("PYTHONFAULTHANDLER", "1")  # SIGABRT prints every thread's stack
    proc = start_app(
        "tests/apps/sleep_app.py", "-m", "hydra/launcher=seml", "seconds=60", *FAST, cwd=tmp_path
    )
    try:
        wait_running(test_db["sleep_app"], proc)
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            out, err = proc.communicate(timeout=30)
            pytest.fail(f"the launcher did not exit after SIGINT; where it was:\n{err}")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Detached. Nothing was cancelled" in out
    assert "seml sleep_app status" in out
    doc = test_db["sleep_app"].find_one()
    assert doc["status"] == "RUNNING"
    job = f"{doc['slurm'][0]['array_id']}"
    queue = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True)
    assert queue.stdout.split() == ["RUNNING"]
    subprocess.run(["scancel", job], check=True)


@pytest.mark.mongo  # starts an embedded mongod
def test_without_configured_database_the_embedded_mongod_is_used(tmp_path):
    import os

    from seml_hydra.store.server import embedded as embedded_db

    env = {
        k: v for k, v in os.environ.items() if k not in ("SEML_MONGODB_URI", "SEML_MONGODB_CONFIG")
    }
    env.update(
        SEML_HYDRA_DATA_DIR=str(tmp_path / "data"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),  # no ~/.config/seml/mongodb.config
    )
    try:
        proc = subprocess.run(
            [
                sys.executable,
                str(ROOT / "examples/fail.py"),
                "-m",
                "hydra/launcher=seml_local",
                "x=1,3",
                *FAST,
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stderr
        assert "Using the embedded MongoDB" in proc.stdout
        server = embedded_db.find_running_embedded(tmp_path / "data" / "mongodb")
        assert server is not None
        import pymongo

        # the jobs wrote their results with the credentials of the 0600 file; without them
        # the server refuses to list anything
        user, password = embedded_db.credentials(server.data_dir)
        client = pymongo.MongoClient(
            server.host, server.port, username=user, password=password, authSource="seml"
        )
        docs = list(client["seml"]["fail"].find())
        assert sorted(d["result"] for d in docs) == [10, 30]
        assert all(password not in repr(d) for d in docs)
        anonymous = pymongo.MongoClient(server.host, server.port, serverSelectionTimeoutMS=5000)
        with pytest.raises(pymongo.errors.OperationFailure, match="requires authentication"):
            anonymous["seml"].list_collection_names()
    finally:
        embedded_db.stop_embedded_mongod(tmp_path / "data" / "mongodb")


def test_an_experiment_deleted_while_the_launcher_waits_is_reported_with_its_overrides(
    slurm, test_db, tmp_path
):
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    gate = tmp_path / "open"
    proc = start_app("tests/apps/gate.py", "-m", "hydra/launcher=seml", f"gate={gate}", "x=1,2",
                     *FAST, cwd=tmp_path)  # fmt: skip
    try:
        wait_running(test_db["gate"], proc, count=2, timeout=240)  # a busy shared cluster
        result = CliRunner().invoke(app, ["gate", "delete", "-id", "1", "-y"])
        assert result.exit_code == 0, result.output
        gate.touch()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert "Error executing job with overrides: ['gate=" in err and "'x=1']" in err, err
    assert "deleted from the collection while the launcher waited" in err
    assert test_db["gate"].find_one({"_id": 2})["status"] == "COMPLETED"
