"""MongoDB away for a while loses nothing.

Real mongod processes, started privately by these tests (the shared testbed mongod on 27017 is
never stopped), and the real Slurm testbed:

- a standalone mongod stopped for 60 s in the middle of a task, the task finishing while it is
  down: the job retries the final save until the server is back, both experiments of the task
  end COMPLETED with their results and captured output, and the launcher, which said it waits
  for the database, exits 0;
- a job that starts while the mongod is down waits to connect and claim, then runs;
- a 3-member replica set whose primary is stepped down mid-run (and no member can be elected
  until the test allows it): nothing lost, nothing run twice (the app writes a marker per run).

The slow ones (a minute or more each) are marked ``outage``: ``pytest -m "not outage"`` leaves
them out. The pure parts of the retry helper are in tests/unit/test_db_retrying.py.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from conftest import start_app, statuses, wait_running, wait_until

MONGOD = "/usr/local/bin/mongod"
#: the scenario: how long the standalone mongod stays down
OUTAGE_S = 60.0
FAST = ["hydra.launcher.poll_interval_s=0.3"]
DB = "seml_outage_test"
APP = "tests/apps/outage_app.py"

# --------------------------------------------------------------------------- private mongod


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a forked mongod is reparented away from us)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


class PrivateMongod:
    """One mongod of this test: its own port, dbpath and log under ``base``; started and
    stopped (SIGTERM, waited for) by the test, restarted on the same port and dbpath."""

    def __init__(self, base: Path, repl_set: str | None = None) -> None:
        self.port = free_port()
        self.dir = base / f"mongod-{self.port}"
        self.dir.mkdir(parents=True)
        self.repl_set = repl_set
        self.pid: int | None = None

    def start(self) -> None:
        argv = [MONGOD, "--dbpath", str(self.dir / "data"), "--port", str(self.port)]
        argv += ["--bind_ip", "127.0.0.1", "--fork", "--logpath", str(self.dir / "mongod.log")]
        argv += ["--logappend", "--pidfilepath", str(self.dir / "mongod.pid")]
        argv += ["--wiredTigerCacheSizeGB", "0.25"]
        argv += ["--setParameter", "diagnosticDataCollectionEnabled=false"]
        if self.repl_set:
            argv += ["--replSet", self.repl_set]
        (self.dir / "data").mkdir(exist_ok=True)
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, (proc.stdout, proc.stderr)
        self.pid = int((self.dir / "mongod.pid").read_text())
        wait_until(f"mongod on {self.port} answers", self._answers, 60, 0.2)

    def _answers(self) -> bool:
        try:
            self.direct().admin.command("ping")
        except Exception:
            return False
        return True

    def direct(self):
        import pymongo

        return pymongo.MongoClient(
            "127.0.0.1", self.port, directConnection=True, serverSelectionTimeoutMS=2000
        )

    def stop(self) -> None:
        if self.pid is not None and alive(self.pid):
            os.kill(self.pid, signal.SIGTERM)
            wait_until(f"mongod {self.pid} is gone", lambda: not alive(self.pid), 120, 0.2)
        self.pid = None


@pytest.fixture
def private_mongod(tmp_path_factory, monkeypatch):
    """A standalone mongod of this test, the launch's database (``SEML_MONGODB_URI``)."""
    from seml_hydra.store.db.client import reset_client_cache

    base = tmp_path_factory.mktemp("mongod")
    server = PrivateMongod(base)
    server.start()
    monkeypatch.setenv("SEML_MONGODB_URI", f"mongodb://127.0.0.1:{server.port}/{DB}")
    reset_client_cache()
    try:
        yield server
    finally:
        reset_client_cache()
        server.stop()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def replica_set(tmp_path_factory, monkeypatch):
    """Three mongod of one replica set ``rs`` (elections after 2 s without a primary), the
    launch's database through a multi-host URI. Yields the members."""
    from seml_hydra.store.db.client import reset_client_cache

    base = tmp_path_factory.mktemp("rs")
    members = [PrivateMongod(base, repl_set="rs") for _ in range(3)]
    try:
        for member in members:
            member.start()
        config = {
            "_id": "rs",
            "members": [{"_id": i, "host": f"127.0.0.1:{m.port}"} for i, m in enumerate(members)],
            "settings": {"electionTimeoutMillis": 2000},
        }
        members[0].direct().admin.command("replSetInitiate", config)
        wait_until("the replica set has a primary", lambda: primary_of(members), 120)
        hosts = ",".join(f"127.0.0.1:{m.port}" for m in members)
        monkeypatch.setenv("SEML_MONGODB_URI", f"mongodb://{hosts}/{DB}?replicaSet=rs")
        reset_client_cache()
        yield members
    finally:
        reset_client_cache()
        for member in members:
            member.stop()
        shutil.rmtree(base, ignore_errors=True)


def primary_of(members: list[PrivateMongod]) -> PrivateMongod | None:
    for member in members:
        try:
            if member.direct().admin.command("hello").get("isWritablePrimary"):
                return member
        except Exception:
            continue
    return None


def collection():
    """The app's collection, through the launch's own URI (a client of the test)."""
    import pymongo

    client = pymongo.MongoClient(os.environ["SEML_MONGODB_URI"], serverSelectionTimeoutMS=5000)
    return client[DB]["outage_app"]


def job_output(doc: dict) -> str:
    """The job's stdout and stderr (submitit's files, named in ``execution``)."""
    text = ""
    for key in ("slurm_output_file", "slurm_error_file"):
        path = doc.get("execution", {}).get(key)
        if path and Path(path).exists():
            text += Path(path).read_text(errors="replace")
    return text


def launch(tmp_path: Path, *overrides: str):
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = start_app(APP, "-m", "hydra/launcher=seml", f"gate={tmp_path / 'go'}",
                     f"marker_dir={markers}", "x=1,2", *FAST, *overrides, cwd=tmp_path)  # fmt: skip
    return proc, markers


def runs_of(markers: Path) -> dict[str, int]:
    """``{marker file: number of runs}`` (one line per run)."""
    return {p.name: len(p.read_text().splitlines()) for p in sorted(markers.iterdir())}


# --------------------------------------------------------------------------- the scenarios


@pytest.mark.slurm
@pytest.mark.mongo
@pytest.mark.outage
def test_mongod_stopped_for_60_s_mid_task_loses_no_result_and_the_launcher_waits(
    slurm, private_mongod, tmp_path
):
    coll = collection()
    # both points in one array task: the second one runs after the outage
    proc, markers = launch(tmp_path, "hydra.launcher.experiments_per_job=2")
    try:
        wait_running(coll, proc, count=1, timeout=120)
        wait_until("the task runs", lambda: (markers / "run_1").exists(), 60, 0.2)
        doc = coll.find_one({"_id": 1})
        private_mongod.stop()
        stopped = time.monotonic()
        # released while the database is down: the task returns and its final save must wait
        (tmp_path / "go").touch()

        def task_returned() -> bool:
            assert proc.poll() is None, proc.communicate()  # the launcher keeps waiting
            return "gate open, x=1" in job_output(doc)

        wait_until("the task returns during the outage", task_returned, OUTAGE_S)
        # the scenario's definition, not a wait for a state: the server stays down 60 s
        time.sleep(max(0.0, stopped + OUTAGE_S - time.monotonic()))
        assert proc.poll() is None, proc.communicate()
        private_mongod.start()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (out, err)
    assert "waiting for the database" in out + err, (out, err)
    docs = {d["_id"]: d for d in coll.find()}
    assert statuses(coll) == {1: "COMPLETED", 2: "COMPLETED"}, job_output(doc)
    assert {i: d["result"] for i, d in docs.items()} == {1: 10, 2: 20}
    assert "gate open, x=1" in docs[1]["captured_out"]
    assert "gate open, x=2" in docs[2]["captured_out"]
    assert docs[1]["hydra"]["working_dir"]  # the post-run update got through too
    assert runs_of(markers) == {"run_1": 1, "run_2": 1}
    log = job_output(doc)
    assert "saving to MongoDB failed" not in log  # no Sacred failure pickle
    assert "MongoDB unreachable while saving the outcome of experiment 1 (COMPLETED)" in log
    assert "MongoDB reachable again" in log


@pytest.mark.slurm
@pytest.mark.mongo
@pytest.mark.outage
def test_an_outage_longer_than_the_retry_budget_keeps_the_outcome_until_mongodb_is_back(
    slurm, private_mongod, tmp_path, monkeypatch
):
    """Past ``SEML_MONGODB_RETRY_S`` the job keeps the experiment's outcome (status, result,
    the whole captured output) in memory and writes it once MongoDB answers again before the
    job ends: COMPLETED with every line the task printed, nothing marked incomplete."""
    monkeypatch.setenv("SEML_MONGODB_RETRY_S", "8")
    coll = collection()
    markers = tmp_path / "markers"
    markers.mkdir()
    proc = start_app(APP, "-m", "hydra/launcher=seml", f"gate={tmp_path / 'go'}",
                     f"marker_dir={markers}", "x=1", "hydra.launcher.wait=false", *FAST,
                     cwd=tmp_path)  # fmt: skip
    assert proc.wait(timeout=120) == 0, proc.communicate()
    wait_until("the task runs", lambda: (markers / "run_1").exists(), 120, 0.2)
    doc = wait_until("the run is recorded", lambda: coll.find_one({"execution": {"$exists": 1}}))
    private_mongod.stop()
    (tmp_path / "go").touch()  # the task prints its last line and returns during the outage

    def outcome_not_saved() -> bool:
        log = job_output(doc)
        # without the keeping: Sacred's own final save gives up and pickles the run
        return "is kept in memory" in log or "saving to MongoDB failed" in log

    wait_until("the final save gives up on its budget", outcome_not_saved, 180)
    private_mongod.start()
    wait_until("the outcome is written", lambda: statuses(coll) == {1: "COMPLETED"}, 120)
    final = coll.find_one({"_id": 1})
    assert final["result"] == 10
    assert "started, x=1" in final["captured_out"]
    assert "gate open, x=1" in final["captured_out"]
    assert "captured_out_incomplete" not in final
    log = job_output(doc)
    assert "saving the outcome of experiment 1 (COMPLETED), kept until now, is written" in log
    wait_until(
        "the working directory is written",
        lambda: coll.find_one({"hydra.working_dir": {"$exists": 1}}),
    )


@pytest.mark.slurm
@pytest.mark.mongo
@pytest.mark.outage
def test_a_job_starting_while_mongod_is_down_waits_to_connect_and_claim_then_runs(
    slurm, private_mongod, tmp_path
):
    import subprocess

    from conftest import squeue_tasks

    coll = collection()
    (tmp_path / "go").touch()  # the tasks do not wait: the outage is at the job's start
    proc, markers = launch(
        tmp_path,
        "hydra.launcher.experiments_per_job=2",
        "+hydra.launcher.additional_parameters.hold=true",
    )
    try:

        def submitted():
            assert proc.poll() is None, proc.communicate()
            doc = coll.find_one({"_id": 1, "slurm.0.array_id": {"$exists": True}})
            return doc and doc["slurm"][0]["array_id"]

        array = wait_until("the held job is submitted", submitted, 120)
        private_mongod.stop()
        subprocess.run(["scontrol", "release", str(array)], check=True)

        def job_waits() -> bool:
            assert proc.poll() is None, proc.communicate()  # the launcher keeps waiting
            logs = tmp_path.glob("multirun/*/*/.submitit/*/*_log.*")
            return any("while connecting to" in p.read_text(errors="replace") for p in logs)

        wait_until("the job waits for MongoDB", job_waits, 120)
        assert squeue_tasks(array), "the job gave up"
        private_mongod.start()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (out, err)
    assert statuses(coll) == {1: "COMPLETED", 2: "COMPLETED"}
    assert {d["_id"]: d["result"] for d in coll.find()} == {1: 10, 2: 20}
    assert runs_of(markers) == {"run_1": 1, "run_2": 1}


@pytest.mark.slurm
@pytest.mark.mongo
@pytest.mark.outage
def test_mongod_down_when_sbatch_returns_the_launcher_records_the_job_once_it_is_back(
    slurm, private_mongod, tmp_path, monkeypatch
):
    """The launcher's write of the submitted job ids rides out an outage (``retrying``): the
    job sbatch made is recorded once MongoDB is back, never left unrecorded (an orphan)."""
    import threading

    from conftest import squeue_tasks
    from test_retry import Blocker

    sbatch = Blocker("sbatch", tmp_path)
    monkeypatch.setenv("PATH", f"{sbatch.bin}:{os.environ['PATH']}")
    coll = collection()
    proc, _ = launch(
        tmp_path,
        "hydra.launcher.wait=false",
        "+hydra.launcher.additional_parameters.hold=true",
    )
    output: list[str] = []
    readers = [
        threading.Thread(target=lambda s=stream: output.extend(s), daemon=True)
        for stream in (proc.stdout, proc.stderr)
    ]
    for reader in readers:
        reader.start()

    def our_array() -> str | None:
        out = subprocess.run(["squeue", "-h", "-o", "%F|%Z"], capture_output=True, text=True)
        rows = [line.split("|") for line in out.stdout.splitlines()]
        return next((job for job, workdir in rows if workdir == str(tmp_path)), None)

    array = None
    try:
        wait_until("the launcher runs sbatch", sbatch.called.exists, 120)
        private_mongod.stop()
        sbatch.open()
        array = wait_until("sbatch made the job", our_array, 60)

        def retries() -> bool:
            assert proc.poll() is None, "".join(output)  # the launcher must not give up
            return any("recording the submitted job(s)" in line for line in output)

        wait_until("the launcher retries recording the job", retries, 60)
        private_mongod.start()
        assert proc.wait(timeout=300) == 0, "".join(output)
        docs = list(coll.find())
        assert {d["status"] for d in docs} == {"PENDING"} and len(docs) == 2
        assert {str(d["slurm"][0]["array_id"]) for d in docs} == {array}
        assert all("submitting" not in d["slurm"][0] for d in docs)
        assert squeue_tasks(array)
    finally:
        if proc.poll() is None:
            proc.kill()
        if array:
            subprocess.run(["scancel", array], check=False)


@pytest.mark.slurm
@pytest.mark.mongo
@pytest.mark.outage
def test_replica_set_primary_stepped_down_mid_run_loses_nothing_and_runs_nothing_twice(
    slurm, replica_set, tmp_path
):
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    coll = collection()
    proc, markers = launch(tmp_path)  # two array tasks, both running at once
    try:
        wait_running(coll, proc, count=2, timeout=180)
        wait_until("both tasks run", lambda: len(list(markers.iterdir())) == 2, 60, 0.2)
        docs = {d["_id"]: d for d in coll.find()}
        primary = primary_of(replica_set)
        assert primary is not None
        # no member may take over until the test says so: an election that takes a while
        for member in replica_set:
            if member is not primary:
                member.direct().admin.command("replSetFreeze", 600)
        from pymongo.errors import AutoReconnect

        try:
            primary.direct().admin.command("replSetStepDown", 600, force=True)
        except AutoReconnect:  # the server may drop the connection while stepping down
            pass
        wait_until("the replica set has no primary", lambda: primary_of(replica_set) is None)
        (tmp_path / "go").touch()

        def both_saves_wait() -> bool:
            assert proc.poll() is None, proc.communicate()  # the launcher keeps waiting
            return all(
                f"while saving the outcome of experiment {i} (COMPLETED)" in job_output(d)
                for i, d in docs.items()
            )

        wait_until("both jobs retry their final save", both_saves_wait, 120)
        for member in replica_set:
            if member is not primary:
                member.direct().admin.command("replSetFreeze", 0)
        wait_until("a new primary", lambda: primary_of(replica_set), 120)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (out, err)
    assert "waiting for the database" in out + err, (out, err)
    assert statuses(coll) == {1: "COMPLETED", 2: "COMPLETED"}
    assert {d["_id"]: d["result"] for d in coll.find()} == {1: 10, 2: 20}
    assert runs_of(markers) == {"run_1": 1, "run_2": 1}  # nothing ran twice
    # the seml command works on the replica set's multi-host URI too
    result = CliRunner().invoke(app, ["outage_app", "status"], prog_name="seml")
    assert result.exit_code == 0, result.output
    assert "COMPLETED" in result.output


@pytest.mark.mongo
def test_a_rank_failure_pushed_again_by_a_retry_is_recorded_once(test_db, monkeypatch):
    """The retry of a ``$push`` that reached the server before the connection dropped (same
    failure, same id) adds nothing."""
    import uuid

    from seml_hydra.job.failures import record_rank_failure

    coll = test_db["ranks"]
    coll.insert_one({"_id": 1, "status": "RUNNING"})
    same = uuid.uuid4()
    monkeypatch.setattr(uuid, "uuid4", lambda: same)
    record_rank_failure(coll, 1, 1, "trace\n")
    record_rank_failure(coll, 1, 1, "trace\n")  # what a retry sends
    failures = coll.find_one({"_id": 1})["rank_failures"]
    assert [(f["rank"], f["trace"]) for f in failures] == [(1, "trace\n")]
