"""The life cycle of a launcher-made collection through the ``seml`` command, on the real
MongoDB and the Slurm testbed, checking both after every step:

launch (wait=false) -> hold -> queue -> release -> status -> cancel -> reset -> start ->
COMPLETED -> delete -> list -> drop; and delete of a RUNNING experiment cancels its job first.

The app (``tests/apps/gate.py``) keeps an experiment RUNNING until its gate file exists.
"""

from __future__ import annotations

import subprocess
import time

import pytest
from support.mongo import statuses
from support.run import launch_gate
from support.run import seml_ok as seml
from support.slurm import sacct
from support.slurm import squeue_tasks as squeue
from support.wait import wait_until

pytestmark = pytest.mark.slurm


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def launch(tmp_path, *overrides: str):
    return launch_gate(
        tmp_path, "hydra.launcher.experiments_per_job=1", f"gate={tmp_path / 'go'}", *overrides
    )


def test_life_cycle_of_a_launcher_made_collection(slurm, test_db, tmp_path):
    coll = test_db["gate"]
    # launch: two experiments, one array task at a time, the first stays RUNNING (gate closed)
    launch(tmp_path, "hydra.launcher.array_parallelism=1", "x=1,2")
    docs = {d["_id"]: d for d in coll.find()}
    assert set(docs) == {1, 2} and {d["status"] for d in docs.values()} == {"PENDING"}
    array = docs[1]["slurm"][0]["array_id"]
    assert {d["slurm"][0]["task_id"] for d in docs.values()} == {0, 1}
    wait_until("experiment 1 runs", lambda: statuses(coll)[1] == "RUNNING")
    assert statuses(coll)[2] == "PENDING"
    assert squeue(array)[f"{array}_1"][0] == "PENDING"

    # hold: the pending task of experiment 2 is held in Slurm, MongoDB unchanged
    out = seml("gate", "hold")
    assert f"Held 1 pending Slurm task(s): {array}_1" in out
    assert "Held" in squeue(array)[f"{array}_1"][1]
    assert statuses(coll) == {1: "RUNNING", 2: "PENDING"}
    assert "Already held" in seml("gate", "hold")

    # queue shows both tasks under the collection, with their experiments
    out = seml("queue")
    rows = {line.split("│")[2].strip(): line for line in out.splitlines() if "│ gate" in line}
    assert f"{array}_0" in rows and f"{array}_1" in rows, out
    assert "RUNNING" in rows[f"{array}_0"] and "│ 1 " in rows[f"{array}_0"]
    assert "JobHeld" in rows[f"{array}_1"] and "│ 2 " in rows[f"{array}_1"]
    assert f"{array}_1" in seml("queue", f"{array}_1", "-s", "PENDING")

    # release: no longer held
    assert f"Released 1 Slurm task(s): {array}_1" in seml("gate", "release")
    assert "Held" not in squeue(array)[f"{array}_1"][1]
    assert statuses(coll) == {1: "RUNNING", 2: "PENDING"}

    # status: counts and ids, nothing detected as killed
    out = seml("gate", "status")
    assert "killed" not in out.lower()
    assert any("RUNNING" in line and "│ 1 " in line for line in out.splitlines()), out
    assert statuses(coll) == {1: "RUNNING", 2: "PENDING"}

    # cancel: INTERRUPTED, both array tasks gone from Slurm, still INTERRUPTED afterwards
    out = seml("gate", "cancel")
    assert f"Slurm tasks cancelled: {array}_0, {array}_1" in out
    assert squeue(array) == {}
    assert statuses(coll) == {1: "INTERRUPTED", 2: "INTERRUPTED"}
    time.sleep(1)  # a late heartbeat of the killed run must not have brought RUNNING back
    assert statuses(coll) == {1: "INTERRUPTED", 2: "INTERRUPTED"}
    seml("gate", "status")
    assert statuses(coll) == {1: "INTERRUPTED", 2: "INTERRUPTED"}

    # reset: STAGED, run fields and the old job cleared
    assert "Reset 2 experiment(s) to STAGED: 1-2" in seml("gate", "reset")
    for d in coll.find():
        assert d["status"] == "STAGED"
        assert not {"execution", "start_time", "heartbeat", "captured_out"} & set(d)
        assert "array_id" not in d["slurm"][0]

    # start: from the database alone (another working directory), runs to COMPLETED
    (tmp_path / "go").touch()
    out = seml("gate", "start")
    assert "Started 2 experiment(s) (1-2) as slurm job" in out
    new_array = coll.find_one({"_id": 1})["slurm"][0]["array_id"]
    assert new_array != array
    wait_until(
        "both experiments complete",
        lambda: statuses(coll) == {1: "COMPLETED", 2: "COMPLETED"},
    )
    assert {d["_id"]: d["result"] for d in coll.find()} == {1: 10, 2: 20}
    assert all(d["execution"]["array_id"] == new_array for d in coll.find())

    # delete: every experiment and the batch payload go
    assert test_db["fs.files"].count_documents({"metadata.collection": "gate"}) == 1
    assert "Deleted 2 experiment(s): 1-2" in seml("gate", "delete", "-y")
    assert coll.count_documents({}) == 0
    assert test_db["fs.files"].count_documents({"metadata.collection": "gate"}) == 0

    # list, then drop
    assert "gate" in seml("list")
    assert "Dropped gate." in seml("drop", "gate", "-y")
    assert "gate" not in test_db.list_collection_names()
    assert "No experiment collections" in seml("list")


def test_delete_of_a_running_experiment_cancels_its_job_first(slurm, test_db, tmp_path):
    coll = test_db["gate"]
    launch(tmp_path, "x=5")
    array = coll.find_one({"_id": 1})["slurm"][0]["array_id"]
    job = coll.find_one({"_id": 1})["slurm"][0]["job_id"]  # one task: a one-task array
    assert job == f"{array}_0"
    wait_until("the experiment runs", lambda: statuses(coll) == {1: "RUNNING"})
    assert squeue(array)[job][0] == "RUNNING"
    out = seml("gate", "delete", "-id", "1")
    assert "Deleted 1 experiment(s): 1" in out
    assert coll.count_documents({}) == 0
    assert squeue(array) == {}


def test_delete_no_cancel_leaves_the_job_which_then_finds_nothing_to_run(slurm, test_db, tmp_path):
    coll = test_db["gate"]
    launch(tmp_path, "x=6", "+hydra.launcher.additional_parameters.hold=true")
    array = coll.find_one({"_id": 1})["slurm"][0]["array_id"]
    assert "Held" in squeue(array)[f"{array}_0"][1]  # sbatch --hold through submitit
    assert "Already held" in seml("gate", "hold")
    seml("gate", "delete", "--no-cancel", "-y")
    assert coll.count_documents({}) == 0
    assert f"{array}_0" in squeue(array)
    subprocess.run(["scontrol", "release", str(array)], check=True)
    wait_until("the job ends", lambda: squeue(array) == {})
    assert coll.count_documents({}) == 0  # the job claimed nothing and re-created nothing


def test_delete_selected_by_state_running_deletes_the_running_experiment_and_its_job(
    slurm, test_db, tmp_path
):
    """``delete -s RUNNING`` selects once: cancelling turns the experiment INTERRUPTED, and a
    second selection by state would find none ("No experiments to delete.")."""
    coll = test_db["gate"]
    launch(tmp_path, "x=1")
    array = coll.find_one({"_id": 1})["slurm"][0]["array_id"]
    try:
        wait_until("the experiment runs", lambda: statuses(coll) == {1: "RUNNING"})
        assert set(squeue(array)) == {f"{array}_0"}  # a one-task array
        out = seml("gate", "delete", "-s", "RUNNING", "-y")
        assert "Deleted 1 experiment(s): 1" in out, out
        assert f"Cancelled 1 Slurm task(s) first: {array}_0" in out, out
        assert coll.count_documents({}) == 0
        assert squeue(array) == {}
    finally:
        subprocess.run(["scancel", str(array)], check=True)


def test_a_launch_records_the_clusters_real_name(slurm, test_db, tmp_path):
    """``slurm[0].cluster`` is the ClusterName of ``scontrol show config`` (as the job's
    ``SLURM_CLUSTER_NAME``), not "slurm": another cluster's status can tell it is not its own."""
    coll = test_db["gate"]
    launch(tmp_path, "x=1,2", "+hydra.launcher.additional_parameters.hold=true")
    docs = list(coll.find())
    try:
        assert [d["slurm"][0]["cluster"] for d in docs] == ["semltest", "semltest"]
    finally:
        subprocess.run(["scancel", str(docs[0]["slurm"][0]["array_id"])], check=True)


def test_delete_selected_by_state_pending_cancels_the_held_job_and_deletes(
    slurm, test_db, tmp_path
):
    coll = test_db["gate"]
    launch(tmp_path, "x=3", "+hydra.launcher.additional_parameters.hold=true")
    array = coll.find_one({"_id": 1})["slurm"][0]["array_id"]
    assert f"{array}_0" in squeue(array)
    out = seml("gate", "delete", "-s", "PENDING", "-y")
    assert "Deleted 1 experiment(s): 1" in out, out
    assert f"Cancelled 1 Slurm task(s) first: {array}_0" in out, out
    assert coll.count_documents({}) == 0
    assert squeue(array) == {}


def test_delete_does_not_claim_to_cancel_tasks_that_were_already_gone(slurm, test_db, tmp_path):
    coll = test_db["gate"]
    launch(tmp_path, "x=4", "+hydra.launcher.additional_parameters.hold=true")
    array = coll.find_one({"_id": 1})["slurm"][0]["array_id"]
    subprocess.run(["scancel", str(array)], check=True)
    wait_until("the held job is gone", lambda: squeue(array) == {})
    assert statuses(coll) == {1: "PENDING"}  # nobody told the database
    out = seml("gate", "delete", "-y")  # (no -s: the state selection is another test's)
    assert "Deleted 1 experiment(s): 1" in out, out
    assert "Cancelled" not in out, out
    assert coll.count_documents({}) == 0


def _sacct_states(array) -> list[str]:
    return sacct(array, "JobID,State").split()


def test_a_held_array_cancelled_with_scancel_is_killed_with_the_cancelled_state(
    slurm, test_db, tmp_path
):
    """Tasks that never started are in sacct only as the array's record (``<array>_[0-1%2]``
    CANCELLED), not under ``<array>_0``: the trace says CANCELLED, not "unknown to Slurm"."""
    coll = test_db["gate"]
    launch(tmp_path, "x=1,2", "+hydra.launcher.additional_parameters.hold=true")
    array = coll.find_one({"_id": 1})["slurm"][0]["array_id"]
    assert set(squeue(array)) == {f"{array}_0", f"{array}_1"}
    subprocess.run(["scancel", str(array)], check=True)
    wait_until("the array is gone", lambda: squeue(array) == {})
    wait_until(  # slurmdbd records the array's end a moment later
        "sacct has the array's record",
        lambda: any(  # e.g. 12_[0-1%2]|CANCELLED by 0 (submitit throttles arrays)
            r.startswith(f"{array}_[0-1") and "|CANCELLED" in r for r in _sacct_states(array)
        ),
        60,
    )
    out = seml("gate", "status")
    assert "Detected 2 killed experiment(s): 1-2" in out, out
    for doc in coll.find():
        assert doc["status"] == "KILLED"
        head = doc["fail_trace"][0]
        assert f"Slurm job {array}_{doc['_id'] - 1} ended (CANCELLED" in head, head
        assert "unknown to Slurm" not in head
