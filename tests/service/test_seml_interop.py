"""Interoperability with SEML 0.5.7 and Sacred tools, on the real MongoDB and the
Slurm testbed, with SEML 0.5.7 itself installed in a virtualenv of its own
(``tools/seml057_venv.sh``; the tests fail, never skip, when it cannot be installed).

- a collection SEML 0.5.7 made (``add`` + ``start``) is listed, shown, reset, deleted, held,
  released, queued and cancelled by our ``seml``, checking MongoDB after each step;
- SEML 0.5.7's own CLI (``list``, ``status``, ``print-fail-trace``) reads a collection our
  launcher made (not ``download-sources``: the file list is in a manifest, once per launch);
- our runs are Sacred runs: queries written the way incense's ``ExperimentLoader`` queries
  find their config, result, status, times and captured output (incense itself reads only
  ``db.runs``/``db.metrics``); their metrics are where Omniboard and ``get_metrics`` read them.

SEML always authenticates: a session fixture creates the user seml/seml in the test database,
and SEML reads its ``mongodb.config`` from a temporary ``$XDG_CONFIG_HOME``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from support.machine import machine_lock
from support.mongo import MONGO_URL, TEST_DB, statuses
from support.paths import ROOT
from support.run import run_app, start_app
from support.slurm import squeue_tasks
from support.wait import wait_running, wait_until
from typer.testing import CliRunner

from seml_hydra.cli import app

pytestmark = [pytest.mark.slurm, pytest.mark.mongo]

FIXTURES = ROOT / "tests" / "seml_fixtures"
#: the venv is cached under the caller's cache directory (read before any test changes it)
SEML_VENV = os.environ.get("SEML057_VENV") or str(
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "seml-hydra" / "seml057-venv"
)
runner = CliRunner()


# ------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def seml057_bin() -> Path:
    """``bin/`` of a virtualenv with SEML 0.5.7 (installed once, then cached)."""
    script = ROOT / "tools" / "seml057_venv.sh"
    with machine_lock("seml057-venv"):  # another worker may be installing it right now
        proc = subprocess.run(
            ["bash", str(script)],
            env={**os.environ, "SEML057_VENV": SEML_VENV},
            capture_output=True,
            text=True,
            timeout=900,
        )
    if proc.returncode != 0:
        pytest.fail(
            f"SEML 0.5.7 could not be installed into {SEML_VENV} by {script} (exit "
            f"{proc.returncode}); the interoperability tests need it:\n{proc.stderr[-3000:]}"
        )
    return Path(proc.stdout.strip().splitlines()[-1]) / "bin"


@pytest.fixture(scope="session")
def seml_user(mongo_client):
    """The user seml/seml in the test database (SEML always authenticates); dropped at the
    end (dropping a database keeps its users)."""
    db = mongo_client[TEST_DB]
    if not db.command("usersInfo", "seml")["users"]:
        db.command("createUser", "seml", pwd="seml", roles=["dbOwner"])
    yield "seml"
    db.command("dropUser", "seml")


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    """Our CLI's completion cache goes to the test's own directory."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def seml057(seml057_bin, seml_user, test_db, tmp_path):
    """Run SEML 0.5.7's CLI (``seml057("col", "status")``) in ``tmp_path/project`` against the
    test database: returns the CompletedProcess, failing the test on a non-zero exit unless
    ``check=False``."""
    config_home = tmp_path / "seml_config"
    (config_home / "seml").mkdir(parents=True)
    host, port = MONGO_URL.split("//", 1)[1].rsplit(":", 1)
    (config_home / "seml" / "mongodb.config").write_text(
        f"username: seml\npassword: seml\nport: {port}\ndatabase: {TEST_DB}\nhost: {host}\n"
    )
    project = tmp_path / "project"
    project.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("SEML_MONGODB_URI", "VIRTUAL_ENV")}
    env.update(
        XDG_CONFIG_HOME=str(config_home),
        # the job script calls `seml` on the node: sbatch exports this PATH
        PATH=f"{seml057_bin}{os.pathsep}{env.get('PATH', '')}",
        COLUMNS="250",
        TERM="dumb",
    )

    def run(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            [str(seml057_bin / "seml"), *args],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )
        if check:
            assert proc.returncode == 0, f"seml {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
        return proc

    run.project = project  # type: ignore[attr-defined]
    return run


def ours(*args: str, exit_code: int = 0) -> str:
    """Our ``seml`` (in-process; the test database through ``SEML_MONGODB_URI``)."""
    result = runner.invoke(app, list(args), prog_name="seml")
    assert result.exit_code == exit_code, (args, result.output, result.exception)
    return result.output


def copy_fixtures(project: Path, *names: str) -> None:
    for name in names:
        shutil.copy(FIXTURES / name, project / name)


def collection_rows(output: str, name: str) -> list[str]:
    return [line for line in output.splitlines() if f" {name} " in f" {line} "]


# ------------------------------------------------------------------------------- 1. SEML's collections


def test_seml_made_collection_is_listed_shown_reset_and_deleted_by_our_cli(seml057, test_db):
    copy_fixtures(seml057.project, "seml_grid.yaml", "seml_experiment.py")
    seml057("semlmade", "add", "seml_grid.yaml")
    coll = test_db["semlmade"]
    assert statuses(coll) == {1: "STAGED", 2: "STAGED", 3: "STAGED"}
    assert coll.find_one({"_id": 1})["seml"]["executable"] == "seml_experiment.py"

    # our list/status count SEML's STAGED experiments
    (row,) = collection_rows(ours("list"), "semlmade")
    assert "3" in row
    assert "STAGED" in ours("semlmade", "status")

    # our start refuses clearly and submits nothing
    out = ours("semlmade", "start", exit_code=1)
    assert (
        "staged by SEML" in out and "seml_experiment.py" in out and "Nothing was submitted" in out
    )
    assert statuses(coll) == {1: "STAGED", 2: "STAGED", 3: "STAGED"}
    assert coll.count_documents({"slurm.array_id": {"$exists": True}}) == 0

    # SEML runs them on the testbed
    seml057("semlmade", "start")
    wait_until(
        "SEML's experiments end",
        lambda: statuses(coll) == {1: "COMPLETED", 2: "FAILED", 3: "COMPLETED"},
    )
    array_id = coll.find_one({"_id": 1})["slurm"][0]["array_id"]

    (row,) = collection_rows(ours("list"), "semlmade")
    # our columns here: COMPLETED FAILED Total
    assert row.replace("│", " ").split() == ["semlmade", "2", "1", "3"], row
    status = ours("semlmade", "status")
    assert "COMPLETED" in status and "1, 3" in status and "FAILED" in status
    assert "ValueError: x == 2" in ours("semlmade", "print-fail-trace")
    assert "running x=1" in ours("semlmade", "print-output", "-id", "1")
    restored = seml057.project / "restored"
    ours("semlmade", "restore-sources", str(restored), "-b", "1")
    assert (restored / "seml_experiment.py").read_bytes() == (
        FIXTURES / "seml_experiment.py"
    ).read_bytes()

    # reset puts the FAILED one back to STAGED the way SEML's reset does, its run kept
    failed = coll.find_one({"_id": 2})
    out = ours("semlmade", "reset")
    assert "Reset 1 experiment(s) to STAGED: 2" in out
    assert "Moved 1 attempt(s) into the history" in out
    doc = coll.find_one({"_id": 2})
    (kept,) = doc["attempts"]
    assert kept["status"] == "FAILED" and kept["start_time"] == failed["start_time"]
    assert kept["host"] == failed["host"]["hostname"]
    assert kept["fail_trace_tail"][-1] == failed["fail_trace"][-1]
    assert doc["status"] == "STAGED"
    for gone in ("execution", "fail_trace", "start_time", "stop_time", "captured_out", "host"):
        assert gone not in doc, gone
    slurm = doc["slurm"][0]
    assert "array_id" not in slurm and "num_tasks" not in slurm and "reschedule_file" not in slurm
    assert not {"array", "comment", "job-name", "output"} & set(slurm["sbatch_options"])
    assert slurm["sbatch_options"]["partition"] == "debug"
    assert doc["config"]["x"] == 2 and doc["seml"]["source_files"]
    assert statuses(coll) == {1: "COMPLETED", 2: "STAGED", 3: "COMPLETED"}
    assert coll.find_one({"_id": 1})["result"] == {"value": 10}

    # ... so SEML itself can start it again
    seml057("semlmade", "start")
    wait_until("SEML re-ran experiment 2", lambda: statuses(coll)[2] == "FAILED")
    assert coll.find_one({"_id": 2})["slurm"][0]["array_id"] != array_id
    # SEML's run wrote its document back whole: the history is still there
    assert coll.find_one({"_id": 2})["attempts"] == doc["attempts"]

    # delete: one experiment, then the rest with its files
    files = test_db["fs.files"]
    source_ids = [f for _, f in coll.find_one({"_id": 1})["seml"]["source_files"]]
    sacred_ids = [f for _, f in coll.find_one({"_id": 1})["experiment"]["sources"]]
    assert "Deleted 1 experiment(s): 2" in ours("semlmade", "delete", "-id", "2", "-y")
    assert statuses(coll) == {1: "COMPLETED", 3: "COMPLETED"}
    assert files.count_documents({"_id": {"$in": source_ids}}) == len(source_ids)
    # Sacred shares its stored sources between runs: experiment 1's are still there
    assert files.count_documents({"_id": {"$in": sacred_ids}}) == len(sacred_ids)
    ours("semlmade", "delete", "-y")
    assert coll.count_documents({}) == 0
    assert files.count_documents({"_id": {"$in": source_ids + sacred_ids}}) == 0
    assert files.count_documents({"metadata.collection_name": "semlmade"}) == 0


def test_seml_made_pending_collection_is_queued_held_released_and_cancelled(seml057, test_db):
    copy_fixtures(seml057.project, "seml_grid_pending.yaml", "seml_experiment.py")
    seml057("semlwait", "add", "seml_grid_pending.yaml")
    seml057("semlwait", "start")
    coll = test_db["semlwait"]
    assert statuses(coll) == {1: "PENDING", 2: "PENDING"}
    array_id = coll.find_one({"_id": 1})["slurm"][0]["array_id"]
    try:
        tasks = wait_until(
            "Slurm lists the array", lambda: squeue_tasks(array_id, alive_only=False)
        )
        assert sorted(tasks) == [f"{array_id}_0", f"{array_id}_1"]

        # queue: the array's pending tasks with the experiments waiting for them
        out = ours("queue")
        (line,) = [x for x in out.splitlines() if "semlwait" in x]
        assert "PENDING" in line and f"{array_id}_[0-1]" in line and "1-2" in line, out

        assert "Held 2 pending Slurm task(s)" in ours("semlwait", "hold")
        held = wait_until(
            "the tasks are held",
            lambda: (
                (rows := squeue_tasks(array_id, alive_only=False))
                and all("held" in r.lower() for _, r in rows.values())
                and rows
            ),
        )
        assert len(held) == 2
        assert "Already held" in ours("semlwait", "hold")
        assert "Released 2 Slurm task(s)" in ours("semlwait", "release")
        wait_until(
            "the tasks are released",
            lambda: all(
                "held" not in r.lower()
                for _, r in squeue_tasks(array_id, alive_only=False).values()
            ),
        )
        assert statuses(coll) == {1: "PENDING", 2: "PENDING"}

        # cancel one: the other still waits, so the array stays
        out = ours("semlwait", "cancel", "-id", "1", "-y")
        assert "Cancelled 1 experiment(s) (1)" in out
        assert statuses(coll) == {1: "INTERRUPTED", 2: "PENDING"}
        assert len(squeue_tasks(array_id, alive_only=False)) == 2
        # cancel the last one: the array has nothing left to run and is cancelled
        out = ours("semlwait", "cancel", "-y")
        assert "Cancelled 1 experiment(s) (2)" in out
        assert statuses(coll) == {1: "INTERRUPTED", 2: "INTERRUPTED"}
        wait_until(
            "the array is gone", lambda: not squeue_tasks(array_id, alive_only=False), timeout=60
        )

        assert "Reset 2 experiment(s) to STAGED" in ours("semlwait", "reset")
        assert statuses(coll) == {1: "STAGED", 2: "STAGED"}
        assert coll.count_documents({"slurm.array_id": {"$exists": True}}) == 0

        # an array cancelled behind SEML's back: our status finds its experiments KILLED
        seml057("semlwait", "start")
        array_id = coll.find_one({"_id": 1})["slurm"][0]["array_id"]
        assert statuses(coll) == {1: "PENDING", 2: "PENDING"}
        assert "KILLED" not in ours("semlwait", "status")
        subprocess.run(["scancel", str(array_id)], check=True)
        wait_until(
            "the array is gone", lambda: not squeue_tasks(array_id, alive_only=False), timeout=60
        )
        out = wait_until(
            "status detects it",
            lambda: "Detected 2 killed" in (o := ours("semlwait", "status")) and o,
            timeout=60,
        )
        assert statuses(coll) == {1: "KILLED", 2: "KILLED"}, out
        ours("semlwait", "delete", "-y")
        assert coll.count_documents({}) == 0
    finally:
        subprocess.run(["scancel", str(array_id)], capture_output=True)


def test_seml_made_running_experiment_is_cancelled_by_our_cli(seml057, test_db):
    copy_fixtures(seml057.project, "seml_grid_running.yaml", "seml_experiment.py")
    seml057("semlrun", "add", "seml_grid_running.yaml")
    seml057("semlrun", "start")
    coll = test_db["semlrun"]
    array_id = coll.find_one({"_id": 1})["slurm"][0]["array_id"]
    try:
        wait_until("SEML's experiment runs", lambda: statuses(coll) == {1: "RUNNING"})
        wait_until("Sacred started it", lambda: coll.find_one({"_id": 1}).get("start_time"))
        out = ours("semlrun", "cancel", "-y")
        assert (
            f"Cancelled 1 experiment(s) (1), now INTERRUPTED; Slurm tasks cancelled: {array_id}"
            in (out)
        )
        # cancel waited until Slurm no longer lists the task alive (COMPLETING is its end)
        assert {state for state, _ in squeue_tasks(array_id, alive_only=False).values()} <= {
            "COMPLETING"
        }
        time.sleep(2)  # a late heartbeat of SEML's observer would show here
        assert statuses(coll) == {1: "INTERRUPTED"}
        assert "INTERRUPTED" in ours("semlrun", "status")
    finally:
        subprocess.run(["scancel", str(array_id)], capture_output=True)


# ------------------------------------------------------------------------------- 2. SEML reads ours


def test_seml057_reads_a_collection_our_launcher_made(seml057, test_db, tmp_path):
    proc = run_app(
        "fail.py",
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.collection=oursfail",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "x=1,2,3",
        cwd=tmp_path,
    )
    assert proc.returncode != 0  # one point failed
    coll = test_db["oursfail"]
    assert sorted(statuses(coll).values()) == ["COMPLETED", "COMPLETED", "FAILED"]
    (failed,) = [i for i, s in statuses(coll).items() if s == "FAILED"]

    # SEML's columns: Staged Pending Running Failed Killed Interrupted Completed Rescheduled Total
    out = seml057("list").stdout
    (row,) = [line.split() for line in out.splitlines() if "oursfail" in line.split()]
    assert row[1:] == ["0", "0", "0", "1", "0", "0", "2", "0", "3"], out

    # SEML's columns: Status Count Experiment-IDs Batch-IDs Duplicates
    status = seml057("oursfail", "status").stdout
    rows = {line.split()[0]: line.split()[1:] for line in status.splitlines() if line.split()}
    ids = sorted(i for i, s in statuses(coll).items() if s == "COMPLETED")
    assert rows["FAILED"] == ["1", str(failed), "1", "0"], status
    assert rows["COMPLETED"] == ["2", f"{ids[0]},", str(ids[1]), "1", "0"], status

    trace = seml057("oursfail", "print-fail-trace").stdout
    assert f'Experiment ID {failed}, Batch ID 1, Status: "FAILED"' in trace, trace
    assert "ValueError: x == 2" in trace, trace

    # SEML 0.5.7's download-sources reads the file list in each document (seml.source_files);
    # ours are named once per launch (seml.source_manifest): it cannot, our restore-sources does
    target = tmp_path / "seml_sources"
    seml057("oursfail", "download-sources", str(target), "-id", "1", check=False)
    assert not (target / "examples" / "fail.py").exists()
    ours("oursfail", "restore-sources", str(target), "-id", "1", "-y")
    assert (target / "examples" / "fail.py").read_bytes() == (
        ROOT / "examples/fail.py"
    ).read_bytes()


def test_seml057_commands_leave_our_documents_unchanged(seml057, test_db, tmp_path):
    proc = run_app(
        "fail.py",
        "-m",
        "hydra/launcher=seml_local",
        "hydra.launcher.collection=oursread",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "x=1",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    coll = test_db["oursread"]
    before = list(coll.find().sort("_id", 1))
    seml057("oursread", "status")
    seml057("oursread", "print-fail-trace")
    assert list(coll.find().sort("_id", 1)) == before


def test_seml057_reads_and_resets_our_documents_with_an_attempt_history(seml057, test_db, tmp_path):
    def launch():
        return run_app(
            "fail.py",
            "-m",
            "hydra/launcher=seml_local",
            "hydra.launcher.collection=oursagain",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            "x=2",
            cwd=tmp_path,
        )

    assert launch().returncode != 0
    assert launch().returncode != 0  # the same point again: the first run kept in attempts
    coll = test_db["oursagain"]
    doc = coll.find_one({"_id": 1})
    assert doc["status"] == "FAILED" and doc["attempts"][0]["moved_by"] == "launch"
    out = seml057("list").stdout
    (row,) = [line.split() for line in out.splitlines() if "oursagain" in line.split()]
    assert row[1:] == ["0", "0", "0", "1", "0", "0", "0", "0", "1"], out
    assert "ValueError: x == 2" in seml057("oursagain", "print-fail-trace").stdout
    after = coll.find_one({"_id": 1})  # (SEML's migration may add seml.version)
    assert after["attempts"] == doc["attempts"] and after["status"] == "FAILED"
    # SEML's own reset rewrites the document with the fields it knows: the history goes, as
    # our other fields do (docs: Coming from SEML)
    seml057("oursagain", "reset", "-y")
    doc = coll.find_one({"_id": 1})
    assert doc["status"] == "STAGED" and "attempts" not in doc


# ------------------------------------------------------------------------------- 3. Sacred readers


@pytest.mark.filterwarnings("ignore:keys will default to True:DeprecationWarning")
def test_our_runs_hold_what_sacred_tools_read(test_db, tmp_path):
    """Our runs are Sacred runs: the queries incense 0.0.15's ``ExperimentLoader`` makes
    (``experiment_loader.py``: ``db.runs`` by ``_id`` / ``{"config.<key>": value}`` / a regex,
    sorted by ``start_time``; ``Experiment.from_db_object`` needs ``info`` (jsonpickle) and
    ``artifacts``) find them, here on our collection instead of ``runs``. This imitates those
    queries, it does not run incense: incense itself (which needs jupyterlab) hard-codes
    ``db.runs`` and ``db.metrics`` (``experiment.py``: ``self._database.metrics.find({"run_id":
    ...})``), so it reads our configs and results only in a collection named ``runs`` and never
    our metrics; what does read them is checked here: the per-collection metrics collection
    (Omniboard's ``metricsCollectionName``) by ``run_id``, as ``get_metrics`` reads it."""
    import json

    import jsonpickle
    from pymongo import DESCENDING

    proc = run_app(
        "../tests/seml_fixtures/metrics_app.py",
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.collection=incensed",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        "lr=0.1,0.2",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = test_db["incensed"]

    # find_by_config_key("lr", 0.2) and find_by_id
    (run,) = list(runs.find({"config.lr": 0.2}))
    assert run == runs.find_one({"_id": run["_id"]})
    # find_latest(): sort by start_time
    latest = list(runs.find().sort("start_time", DESCENDING).limit(2))
    assert {r["_id"] for r in latest} == {1, 2}
    # Experiment.from_db_object
    info = jsonpickle.loads(json.dumps(run["info"]))
    assert isinstance(run["artifacts"], list)
    assert run["config"]["lr"] == 0.2 and run["config"]["steps"] == 3
    assert run["result"] == {"final_loss": pytest.approx(0.2 / 3), "logged": True}
    assert run["status"] == "COMPLETED"
    assert run["start_time"] <= run["stop_time"]
    assert "training with lr=0.2" in run["captured_out"]
    assert run["host"]["hostname"]
    assert run["format"].startswith("MongoObserver")
    # metrics: in the collection's own metrics collection (Omniboard's metricsCollectionName),
    # by run_id, in Sacred's format; none in the shared `metrics` incense would read
    assert test_db["metrics"].count_documents({}) == 0
    metrics = test_db["seml_hydra_metrics.incensed"]
    (metric,) = list(metrics.find({"run_id": run["_id"]}))
    assert metric["name"] == "loss"
    assert metric["steps"] == [0, 1, 2]
    assert metric["values"] == pytest.approx([0.2, 0.1, 0.2 / 3])
    assert [m["name"] for m in info["metrics"]] == ["loss"]
    assert info["metrics"][0]["id"] == str(metric["_id"])
    from seml_hydra.store.results import get_metrics

    assert get_metrics("incensed", ids=[run["_id"]], db=test_db)[run["_id"]]["loss"]["steps"] == [
        0,
        1,
        2,
    ]

    # incense's find_by_key("status", "COMPLETED") style regex query
    assert runs.count_documents({"status": {"$regex": "COMPLETED"}}) == 2

    # deleting the experiments deletes their metrics too
    ours("incensed", "delete", "-y")
    assert metrics.count_documents({}) == 0


def _launch_gated(tmp_path, collection: str, xs: str) -> None:
    proc = run_app(
        "../tests/apps/gate.py",
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.wait=false",
        f"hydra.launcher.collection={collection}",
        f"hydra.sweep.dir={tmp_path / collection}",
        f"gate={tmp_path / 'go'}",
        f"x={xs}",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.mark.parametrize("xs", ["1,2", "1"], ids=["array", "single-job"])
def test_seml057_status_leaves_our_running_experiments_running(seml057, test_db, tmp_path, xs):
    """SEML's ``status`` runs its ``detect_killed`` first: it must not take our RUNNING
    experiments for killed ones."""
    _launch_gated(tmp_path, "oursgated", xs)
    coll = test_db["oursgated"]
    n = len(xs.split(","))
    try:
        wait_until("our experiments run", lambda: list(statuses(coll).values()) == ["RUNNING"] * n)
        # SEML's own table (printed right after its detect_killed) is the verdict: the document
        # itself may be put back to RUNNING by our next heartbeat at any moment after it
        table = seml057("oursgated", "status").stdout
        assert "KILLED" not in table and "RUNNING" in table, table
    finally:
        (tmp_path / "go").touch()
    wait_until("they complete", lambda: list(statuses(coll).values()) == ["COMPLETED"] * n)


def test_array_of_tells_seml_pending_experiments_from_ours():
    from seml_hydra.track.jobs import array_of, task_of

    seml_pending = {"status": "PENDING", "slurm": [{"sbatch_options": {}}, {"array_id": 626}]}
    assert task_of(seml_pending) is None and array_of(seml_pending) == "626"
    seml_running = {**seml_pending, "execution": {"cluster": "c", "array_id": 626, "task_id": 1}}
    assert array_of(seml_running) is None and task_of(seml_running) == ("c", "626_1")
    ours_pending = {"slurm": [{"array_id": 7, "task_id": 2, "num_tasks": 3}]}
    assert array_of(ours_pending) is None and task_of(ours_pending)[1] == "7_2"
    assert array_of({"slurm": [{"sbatch_options": {}}]}) is None
    assert array_of({"slurm": [{"array_id": "x"}]}) is None


def test_seml057_delete_of_one_batch_leaves_the_next_batch_runnable(seml057, test_db, tmp_path):
    """SEML 0.5.7's ``delete -b 1`` removes the GridFS files whose ``metadata.batch_id`` is 1
    (``delete_orphaned_sources``): batch 2, same code, must not name any of them."""

    def launch(x: str, *extra: str) -> None:
        proc = run_app(
            "fail.py",
            "-m",
            "hydra/launcher=seml",
            "hydra.launcher.collection=s57del",
            f"hydra.sweep.dir={tmp_path / ('sweep' + x)}",
            f"x={x}",
            *extra,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]

    coll = test_db["s57del"]
    launch("1")
    launch("3", "hydra.launcher.wait=false", "+hydra.launcher.additional_parameters.hold=true")
    assert sorted(coll.distinct("batch_id")) == [1, 2]
    out = seml057("s57del", "delete", "-b", "1", "-s", "COMPLETED", "-y")
    assert coll.distinct("batch_id") == [2], (out.stdout, out.stderr)
    ours("s57del", "release")
    wait_until("batch 2 completes", lambda: list(statuses(coll).values()) == ["COMPLETED"])


def test_a_waiting_launcher_keeps_waiting_through_another_tools_killed(
    test_db, tmp_path, monkeypatch
):
    """Another tool marks our running experiment KILLED (as SEML 0.5.7's ``detect_killed``
    does: ``{"$set": {"status": "KILLED"}}``, no trace) while its Slurm job runs on: the
    waiting launcher asks squeue, finds the task alive and waits on; the experiment completes
    and the launcher exits 0."""
    calls = tmp_path / "squeue.calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    squeue = bin_dir / "squeue"
    squeue.write_text(
        f"#!/bin/sh\necho \"$@\" >> '{calls}'\nexec '{shutil.which('squeue')}' \"$@\"\n"
    )
    squeue.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    coll = test_db["killedbyother"]
    proc = start_app(
        "tests/apps/gate.py",
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.collection=killedbyother",
        "hydra.launcher.poll_interval_s=0.3",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"gate={tmp_path / 'go'}",
        "x=1",
        cwd=tmp_path,
    )
    try:
        wait_running(coll, proc, count=1, timeout=120)
        calls.unlink(missing_ok=True)
        coll.update_one({"_id": 1}, {"$set": {"status": "KILLED"}})

        def asked_slurm_again_and_again() -> bool:
            assert proc.poll() is None, proc.communicate()  # it must not end on that KILLED
            return calls.exists() and len(calls.read_text().splitlines()) >= 3

        wait_until("the launcher checks the KILLED with squeue", asked_slurm_again_and_again)
        (tmp_path / "go").touch()
        out, err = proc.communicate(timeout=300)
    finally:
        (tmp_path / "go").touch()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, (out, err)
    assert statuses(coll) == {1: "COMPLETED"}
    assert coll.find_one({"_id": 1})["result"] == 10
