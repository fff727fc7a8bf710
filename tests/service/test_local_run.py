"""Experiments run outside a Slurm job, on the real MongoDB: resource
statistics of every run (``stats``, SEML's ``collect_stats``); ``seml <col> start --debug -id N``
(one STAGED experiment in the foreground, ``--post-mortem``); ``start --local`` /
``launch-worker`` (a worker claiming STAGED experiments atomically, ``-n``, ``--worker-gpus``,
``--steal-slurm``);
and each refusal one line with exit code 1.

Experiments are staged for real by a launch whose ``sbatch`` Slurm refuses (more memory than any
node has): the documents stay STAGED, with their payload, as after a ``reset``.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from support.mongo import statuses
from support.run import run_app
from support.slurm import squeue_tasks as squeue
from support.wait import wait_until

SEML = str(Path(sys.executable).parent / "seml")
pytestmark = pytest.mark.slurm


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def stage(app: str, *overrides: str, cwd: Path) -> None:
    """Stage the sweep of ``app`` (under examples/ or, with a ``../tests/apps/`` path, a test
    app) without running it: Slurm refuses the job, the documents stay STAGED."""
    proc = run_app(
        app, "-m", "hydra/launcher=seml", "hydra.launcher.mem_gb=64", *overrides, cwd=cwd
    )
    assert proc.returncode == 1 and "stay STAGED" in proc.stderr, proc.stderr


def seml(*args: str, cwd: Path, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [SEML, *args], cwd=cwd, capture_output=True, text=True, input=stdin, timeout=300
    )


def assert_refused(proc: subprocess.CompletedProcess, phrase: str) -> None:
    """One clear line on stderr, no traceback, exit code 1."""
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and phrase in lines[0], proc.stderr


def test_a_job_stores_its_resource_statistics_also_when_it_fails(test_db, tmp_path):
    proc = run_app("fail.py", "-m", "hydra/launcher=seml_local", "x=1,2", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr  # x=2 fails
    coll = test_db["fail"]
    docs = wait_until(
        "both experiments have stats",
        lambda: (d := list(coll.find({"stats": {"$exists": True}}))) and len(d) == 2 and d,
    )
    for doc in docs:
        stats = doc["stats"]
        assert stats["real_time"] > 0
        assert set(stats["self"]) == {"user_time", "system_time", "max_memory_bytes"}
        assert set(stats["children"]) == set(stats["self"])
        assert stats["self"]["user_time"] + stats["self"]["system_time"] > 0
        assert stats["self"]["max_memory_bytes"] > 10 * 2**20  # a Python process with Hydra
        assert stats["max_rss_mb"] >= stats["self"]["max_memory_bytes"] / 2**20 - 0.1
        assert "pytorch" not in stats  # the app never imports torch
    assert {d["status"] for d in docs} == {"COMPLETED", "FAILED"}


def test_debug_runs_the_one_staged_experiment_here_and_records_it(slurm, test_db, tmp_path):
    stage("../tests/apps/gate.py", "x=1,2", cwd=tmp_path)
    coll = test_db["gate"]
    proc = seml("gate", "start", "--debug", "-id", "1", cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "gate open, x=1" in proc.stdout  # the task's output reaches the terminal
    assert "Experiment 1: COMPLETED" in proc.stdout
    doc = coll.find_one({"_id": 1})
    assert doc["status"] == "COMPLETED" and doc["result"] == 10
    assert doc["execution"]["cluster"] == "local" and doc["execution"]["task_id"] == 0
    assert "gate open, x=1" in doc["captured_out"]
    assert doc["stats"]["max_rss_mb"] > 0 and doc["start_time"] and doc["stop_time"]
    assert coll.find_one({"_id": 2})["status"] == "STAGED"  # only the one asked for

    assert_refused(
        seml("gate", "start", "--debug", "-id", "1", cwd=tmp_path),
        "Experiment 1 is COMPLETED, not STAGED",
    )
    assert_refused(seml("gate", "start", "--debug", "-id", "99", cwd=tmp_path), "No experiment")
    assert_refused(seml("gate", "start", "--debug", cwd=tmp_path), "name it with -id N")
    assert_refused(seml("nosuchcol", "start", "--debug", "-id", "1", cwd=tmp_path), "nosuchcol")
    assert coll.find_one({"_id": 2})["status"] == "STAGED"


def test_debug_post_mortem_opens_pdb_in_the_failing_task_then_records_failed(
    slurm, test_db, tmp_path
):
    stage("fail.py", "x=2", cwd=tmp_path)
    proc = seml(
        "fail",
        "start",
        "--debug",
        "--post-mortem",
        "-id",
        "1",
        cwd=tmp_path,
        stdin="p cfg.x * 100\nq\n",
    )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert "(Pdb) 200" in proc.stdout  # pdb stopped in the task's frame: cfg is its argument
    doc = test_db["fail"].find_one({"_id": 1})
    assert doc["status"] == "FAILED" and "ValueError: x == 2" in "".join(doc["fail_trace"])
    assert "stats" in doc


def test_two_workers_run_six_experiments_each_exactly_once(slurm, test_db, tmp_path):
    gate, marker = tmp_path / "go", tmp_path / "starts"
    stage(
        "../tests/apps/gate.py", "x=1,2,3,4,5,6", f"gate={gate}", f"+marker={marker}", cwd=tmp_path
    )
    coll = test_db["gate"]
    workers = [
        subprocess.Popen(
            [SEML, "gate", *cmd],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for cmd in (["launch-worker"], ["start", "--local"])
    ]
    try:
        # the gate holds each worker in its first experiment: both claimed one, not the same
        running = wait_until(
            "each worker runs one experiment",
            lambda: len(d := list(coll.find({"status": "RUNNING"}))) == 2 and d,
            timeout=120,
        )
        assert {d["execution"]["array_id"] for d in running} == {w.pid for w in workers}
        gate.touch()
        outputs = [w.communicate(timeout=300)[0] for w in workers]
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
    assert [w.returncode for w in workers] == [0, 0], outputs
    docs = list(coll.find().sort("_id", 1))
    assert [(d["status"], d["result"]) for d in docs] == [
        ("COMPLETED", 10 * x) for x in range(1, 7)
    ]
    assert {d["execution"]["array_id"] for d in docs} == {w.pid for w in workers}
    assert len(marker.read_text().splitlines()) == 6  # six task starts: none ran twice


def test_worker_stops_after_n_and_sets_the_worker_gpus(slurm, test_db, tmp_path):
    stage("../tests/apps/env_app.py", "x=1,2,3", cwd=tmp_path)
    coll = test_db["env_app"]
    proc = seml("env_app", "start", "--local", "-n", "2", "--worker-gpus", "3,5", cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    assert "ran 2 experiment(s) (1-2)" in proc.stdout
    docs = {d["_id"]: d for d in coll.find()}
    assert [docs[i]["status"] for i in (1, 2, 3)] == ["COMPLETED", "COMPLETED", "STAGED"]
    assert docs[1]["result"] == docs[2]["result"] == "3,5"
    assert os.environ.get("CUDA_VISIBLE_DEVICES") != "3,5"  # only the worker's

    assert_refused(
        seml("env_app", "launch-worker", "-fd", '{"config.x": 9}', cwd=tmp_path),
        "No STAGED experiments in env_app match",
    )
    assert_refused(
        seml("env_app", "start", "--worker-gpus", "1", cwd=tmp_path), "--worker-gpus only works"
    )
    assert_refused(
        seml("env_app", "start", "--post-mortem", cwd=tmp_path), "--post-mortem only works"
    )
    assert_refused(
        seml("env_app", "start", "--debug", "--local", "-id", "3", cwd=tmp_path), "use one of them"
    )
    assert coll.find_one({"_id": 3})["status"] == "STAGED"


def test_oc_env_in_the_app_config_is_resolved_at_staging_not_in_the_job(
    slurm, test_db, tmp_path, monkeypatch
):
    """As SEML (``seml add`` resolves interpolations into the stored ``config``), unlike
    hydra-submitit-launcher (which composes the config again in the job): the job runs the
    document's ``config``, so ``${oc.env:VAR}`` has the value VAR had where the sweep was
    staged, and the document says what ran (README, "Where the documents go")."""
    monkeypatch.setenv("SEML_HYDRA_TEST_WHERE", "login node")
    stage("../tests/apps/env_app.py", "pair=true", "var=SEML_HYDRA_TEST_WHERE", cwd=tmp_path)
    coll = test_db["env_app"]
    assert coll.find_one({"_id": 1})["config"]["where"] == "login node"
    monkeypatch.setenv("SEML_HYDRA_TEST_WHERE", "in the job")
    proc = seml("env_app", "launch-worker", cwd=tmp_path)
    assert proc.returncode == 0, (proc.stdout, proc.stderr)
    doc = coll.find_one({"_id": 1})
    assert doc["status"] == "COMPLETED"
    assert doc["result"] == ["in the job", "login node"]  # the job's variable, the staged value
    assert doc["config"]["where"] == "login node"


def test_steal_slurm_takes_pending_experiments_whose_task_has_not_started(slurm, test_db, tmp_path):
    proc = run_app(
        "../tests/apps/gate.py",
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.wait=false",
        "+hydra.launcher.additional_parameters.begin=now+1hour",  # the tasks wait: never start
        "x=1,2,3",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    coll = test_db["gate"]
    array = str(coll.find_one({"_id": 1})["slurm"][0]["array_id"])
    try:
        # without --steal-slurm a worker has nothing to take
        assert_refused(seml("gate", "start", "--local", cwd=tmp_path), "No STAGED experiments")
        worker = seml("gate", "launch-worker", "--steal-slurm", "-n", "2", cwd=tmp_path)
        assert worker.returncode == 0, (worker.stdout, worker.stderr)
        assert f"Removed 2 Slurm task(s) from their array: {array}_0, {array}_1" in worker.stdout
        docs = {d["_id"]: d for d in coll.find()}
        assert [docs[i]["status"] for i in (1, 2, 3)] == ["COMPLETED", "COMPLETED", "PENDING"]
        assert {docs[i]["execution"]["cluster"] for i in (1, 2)} == {"local"}
        assert set(squeue(array)) == {f"{array}_2"}  # only the task not stolen is left
    finally:
        subprocess.run(["scancel", array], check=False)


def test_a_sigkilled_worker_leaves_its_experiment_killed_not_running(slurm, test_db, tmp_path):
    """A ``launch-worker`` SIGKILLed mid-experiment: once its heartbeat is stale, ``status``
    marks the experiment KILLED (its process on this host is gone), the others stay STAGED.
    The claim records the worker's host and process start time (``job.worker.local_execution``),
    so this holds also when it dies before Sacred has recorded ``host`` (the cause of the
    earlier time-outs: killed between the claim and Sacred's start, the document named no host
    and no status could judge it)."""
    import signal

    from seml_hydra.core.processes import process_start

    gate = tmp_path / "go"
    stage("../tests/apps/gate.py", "x=1,2", f"gate={gate}", cwd=tmp_path)
    coll = test_db["gate"]
    worker = subprocess.Popen(
        [SEML, "gate", "launch-worker", "-n", "1"],
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        claimed = wait_until(
            "the worker runs experiment 1",
            lambda: (d := coll.find_one({"_id": 1, "status": "RUNNING"})) and d,
        )
        execution = claimed["execution"]
        assert execution["array_id"] == worker.pid
        assert execution["hostname"] == socket.gethostname()
        assert execution["process_start"] == process_start(worker.pid)
        wait_until(
            "Sacred started the run", lambda: coll.find_one({"_id": 1, "host": {"$ne": None}})
        )
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(timeout=60)

        def status_marks_it_killed():
            proc = seml("gate", "status", cwd=tmp_path)
            assert proc.returncode == 0, proc.stderr
            return statuses(coll)[1] == "KILLED" and proc

        # RUNNING until Sacred's last sign of life is HEARTBEAT_STALE_S (60 s) old
        proc = wait_until("status marks experiment 1 KILLED", status_marks_it_killed, timeout=240)
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        gate.touch()
    assert "Detected 1 killed experiment(s)" in proc.stdout
    assert statuses(coll) == {1: "KILLED", 2: "STAGED"}
    trace = "".join(coll.find_one({"_id": 1})["fail_trace"])
    assert f"local process {worker.pid}" in trace and "is gone" in trace
