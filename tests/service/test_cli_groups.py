"""The ``seml`` commands work on groups, not documents, on the real MongoDB and the
Slurm testbed: a held array of 2 tasks x 6 experiments is judged, cancelled, listed and deleted
with a MongoDB traffic that does not grow with the number of experiments (one row per Slurm
task from the server, one ``update_many`` per task), and with the same outcome as before.

The traffic is watched with pymongo's command monitoring on a client of its own."""

from __future__ import annotations

import subprocess

import pymongo
import pytest
from bson import ObjectId
from pymongo import monitoring
from support.mongo import MONGO_URL, TEST_DB, statuses
from support.run import run_app
from support.slurm import squeue_tasks as squeue
from support.wait import wait_until
from typer.testing import CliRunner

from seml_hydra.cli import app

runner = CliRunner()
GATE_APP = "../tests/apps/gate.py"
pytestmark = pytest.mark.slurm


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


class Traffic(monitoring.CommandListener):
    """The commands on collection ``gate`` and the documents their replies carried (not the
    index definitions ``listIndexes`` returns: ``store.db.collections.ensure_job_indexes`` looks
    for an index to drop)."""

    def __init__(self) -> None:
        self.commands: list[dict] = []
        self.docs: list[tuple[str, dict]] = []  # (command name, a document its reply carried)
        self._names: dict[int, str] = {}

    @property
    def returned(self) -> int:
        """How many documents the replies carried (aggregate rows included)."""
        return len(self.docs)

    def started(self, event) -> None:
        if event.command_name == "listIndexes":
            return
        if event.command.get(event.command_name) == "gate":
            self.commands.append(dict(event.command))
            self._names[event.request_id] = event.command_name
        elif event.command_name == "getMore" and event.command.get("collection") == "gate":
            self._names[event.request_id] = "getMore"

    def succeeded(self, event) -> None:
        name = self._names.pop(event.request_id, None)
        if name is not None:
            cursor = event.reply.get("cursor") or {}
            batch = cursor.get("firstBatch") or cursor.get("nextBatch") or []
            self.docs += [(name, dict(doc)) for doc in batch]

    def failed(self, event) -> None:
        self._names.pop(event.request_id, None)

    def updates(self) -> list[dict]:
        """Every update statement sent (a bulk of n UpdateOne is n statements)."""
        return [u for c in self.commands if "update" in c for u in c["updates"]]

    def reset(self) -> None:
        self.commands.clear()
        self.docs.clear()


@pytest.fixture
def watched(test_db):
    """``(the collection "gate" through a monitored client, its Traffic)``."""
    traffic = Traffic()
    client = pymongo.MongoClient(MONGO_URL, event_listeners=[traffic])
    yield client[TEST_DB]["gate"], traffic
    client.close()


def launch_held(tmp_path, points: int = 12, per_job: int = 6) -> int:
    """Stage ``points`` experiments of the gate app as one held array of ``points / per_job``
    tasks; returns the array id."""
    proc = run_app(
        GATE_APP,
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.wait=false",
        f"hydra.launcher.experiments_per_job={per_job}",
        "+hydra.launcher.additional_parameters.hold=true",
        f"gate={tmp_path / 'go'}",
        f"x=range({points})",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    return int(pymongo.MongoClient(MONGO_URL)[TEST_DB]["gate"].find_one()["slurm"][0]["array_id"])


def test_killed_detection_reads_one_row_per_task_and_marks_each_task_with_one_update(
    slurm, test_db, tmp_path, watched
):
    from seml_hydra.launch.recovery import recover_interrupted_submissions
    from seml_hydra.track.killed import detect_killed

    coll, traffic = watched
    array = launch_held(tmp_path)
    result = detect_killed(coll, recover=recover_interrupted_submissions)
    assert (result.killed, result.interrupted, result.unsure) == ([], [], [])
    assert traffic.returned <= 2, traffic.commands  # two task groups, not 12 documents
    assert traffic.updates() == []
    subprocess.run(["scancel", str(array)], check=True)
    wait_until("the held array is gone", lambda: squeue(array) == {})
    traffic.reset()
    result = detect_killed(coll, recover=recover_interrupted_submissions)
    assert result.killed == list(range(1, 13))
    updates = traffic.updates()
    assert len(updates) == 2 and all(u.get("multi") for u in updates), updates
    # each task's experiments named by one _id range, not a list of their ids
    assert [ids for u in updates for ids in _id_lists(u["q"])] == [], updates
    assert traffic.returned <= 2
    for doc in test_db["gate"].find():
        assert doc["status"] == "KILLED"
        task = (doc["_id"] - 1) // 6
        assert f"Slurm job {array}_{task} ended" in doc["fail_trace"][0], doc["fail_trace"]


def test_status_and_queue_show_every_experiment_of_a_held_array_from_one_row_per_task(
    slurm, test_db, tmp_path, watched
):
    from seml_hydra.manage.describe import group_rows, status_groups
    from seml_hydra.manage.inspection import queue
    from seml_hydra.manage.status_view import pending_arrays, stuck_messages

    coll, traffic = watched
    array = launch_held(tmp_path)
    groups = status_groups(coll, {})
    assert [(r.state, r.ids) for r in group_rows(groups)] == [("PENDING", list(range(1, 13)))]
    assert traffic.returned == 1  # one row: one state, no description, one array
    assert pending_arrays(doc for doc, _ in groups) == [str(array)]
    stuck = stuck_messages([str(array)], "gate")
    assert len(stuck) == 1 and f"{array}_[0-1" in stuck[0] and "held" in stuck[0], stuck
    traffic.reset()
    found = [r for r in queue(coll.database) if r.job_id.startswith(f"{array}_")]
    assert sorted((r.job_id, tuple(r.exp_ids)) for r in found) == [
        (f"{array}_0", tuple(range(1, 7))),
        (f"{array}_1", tuple(range(7, 13))),
    ] or [(r.job_id, tuple(r.exp_ids)) for r in found] == [
        (f"{array}_[0-1%2]", tuple(range(1, 13)))
    ], found
    # the census index's entries (first and last of each task's key) and one count, not the
    # 12 experiments (track.census.array_groups)
    assert traffic.returned <= 5
    result = runner.invoke(app, ["gate", "status"], prog_name="seml")
    assert result.exit_code == 0, result.output
    assert "PENDING" in result.output and "1-12" in result.output
    assert f"Slurm will not start job {array}_[0-1" in result.output
    subprocess.run(["scancel", str(array)], check=False)


def test_cancel_marks_a_held_array_s_experiments_once_by_task_and_cancels_both_tasks(
    slurm, test_db, tmp_path, watched
):
    from seml_hydra.manage.cancel import cancel

    coll, traffic = watched
    array = launch_held(tmp_path)
    result = cancel(coll, {})
    assert result.interrupted == list(range(1, 13))
    assert result.cancelled_tasks == [f"{array}_0", f"{array}_1"]
    assert squeue(array) == {}
    assert set(statuses(test_db["gate"]).values()) == {"INTERRUPTED"}
    assert traffic.returned <= 2  # the active groups; no task is shared with other experiments
    # the mark, and no INTERRUPTED again after the wait: squeue listed both tasks held, so no
    # process ran an experiment whose observer could have written RUNNING over the mark
    assert len(traffic.updates()) == 1


def test_delete_reads_the_experiments_only_for_their_ids_and_removes_what_they_left(
    slurm, test_db, tmp_path, watched
):
    from seml_hydra.manage.lifecycle import delete

    coll, traffic = watched
    array = launch_held(tmp_path)
    payload = ObjectId(test_db["gate"].find_one()["seml"]["payload_file"])
    assert test_db["fs.files"].count_documents({"_id": payload}) == 1
    result = delete(coll, {})
    assert result.ids == list(range(1, 13))
    assert result.cancel.cancelled_tasks == [f"{array}_0", f"{array}_1"]
    assert test_db["gate"].count_documents({}) == 0
    assert test_db["fs.files"].count_documents({"_id": payload}) == 0  # the payload went too
    # documents come back with their id alone; the rest is aggregated (payloads, snapshots:
    # one row for the launch) or asked of the runs that stored files (none ran)
    read = [doc for name, doc in traffic.docs if name == "find" and set(doc) != {"_id"}]
    assert read == [], read[:2]
    assert sum(name == "aggregate" for name, _ in traffic.docs) <= 3
    # the tasks are held (they cannot start before the scancel): the experiments are not
    # marked INTERRUPTED first, the one write is the delete, naming them by one _id range
    writes = [
        (c.get("update") and "update", s["q"])
        for c in traffic.commands
        for s in c.get("updates", c.get("deletes", []))
    ]
    assert [w for w in writes if w[0] == "update"] == [], writes
    assert len(writes) == 1 and _id_lists(writes[0][1]) == [], writes


def _id_lists(query) -> list[list]:
    """Every ``{"_id": {"$in": [...]}}`` list in a filter (walked through its ``$and``/``$or``/
    ``$nor`` lists)."""
    found = []
    if isinstance(query, dict):
        for key, value in query.items():
            if key == "_id" and isinstance(value, dict) and "$in" in value:
                found.append(value["$in"])
            found += _id_lists(value)
    elif isinstance(query, list):
        for item in query:
            found += _id_lists(item)
    return found


def test_cancel_of_part_of_a_task_names_the_ids_as_ranges_and_spares_the_shared_task(
    slurm, test_db, tmp_path, watched
):
    """A cancel of experiments 1-4 of task 0 (which also holds 5-6) marks just them, by one
    ``_id`` range (not a list of their ids), and leaves both tasks alone; the next cancel of
    the rest finds the others by ranges too and cancels both tasks."""
    coll, traffic = watched
    array = launch_held(tmp_path)
    try:
        _cancel_part_then_the_rest(coll, traffic, test_db, array)
    finally:  # a failed assertion leaves no held array behind
        subprocess.run(["scancel", str(array)], check=False)


def _cancel_part_then_the_rest(coll, traffic, test_db, array: int) -> None:
    from seml_hydra.manage.cancel import cancel

    result = cancel(coll, {"_id": {"$in": [1, 2, 3, 4]}})
    assert result.interrupted == [1, 2, 3, 4]
    assert result.cancelled_tasks == []  # 5 and 6 still wait for task 0
    assert sorted(squeue(array)) == [f"{array}_0", f"{array}_1"]
    assert statuses(test_db["gate"]) == {
        **{i: "INTERRUPTED" for i in range(1, 5)},
        **{i: "PENDING" for i in range(5, 13)},
    }
    # the writes, and the look for active experiments sharing their tasks (all but the ids
    # cancelled), name the cancelled ids by range (the selection itself is the caller's)
    matches = [c["pipeline"][0]["$match"] for c in traffic.commands if "pipeline" in c]
    sent = [m for m in matches if "$nor" in m] + [u["q"] for u in traffic.updates()]
    assert len(sent) == 3 and [ids for q in sent for ids in _id_lists(q)] == [], sent
    traffic.reset()
    result = cancel(coll, {})
    assert result.interrupted == list(range(5, 13))
    assert result.cancelled_tasks == [f"{array}_0", f"{array}_1"]
    assert set(statuses(test_db["gate"]).values()) == {"INTERRUPTED"}
    assert [ids for u in traffic.updates() for ids in _id_lists(u["q"]) if len(ids) > 2] == []


def test_delete_by_id_ranges_leaves_a_forged_id_between_them_and_other_types_alone(test_db):
    """The ids of a ``delete`` go to MongoDB as ``_id`` ranges; MongoDB compares numbers by
    value, so each range also requires an integer ``_id``: a forged document ``_id: 2.5``
    (between 1 and 5) and a string ``"3"`` are not deleted with 1-5."""
    from seml_hydra.manage.lifecycle import delete

    coll = test_db["forged"]
    coll.insert_many(
        [{"_id": i, "status": "COMPLETED"} for i in range(1, 6)]
        + [{"_id": 2.5, "status": "COMPLETED"}, {"_id": "3", "status": "COMPLETED"}]
    )
    assert delete(coll, {"_id": {"$in": [1, 2, 3, 4, 5]}}).ids == [1, 2, 3, 4, 5]
    assert sorted(map(repr, coll.distinct("_id"))) == ["'3'", "2.5"]


def test_delete_removes_both_snapshots_of_a_batch_whose_sources_were_reloaded_for_some(test_db):
    """Experiments of one batch and payload may name different snapshots (``reload-sources``
    of a selection): the payload/snapshot read groups by the whole pair, so a delete of the
    batch removes the files of both snapshots (a read of one snapshot per batch would leave
    the other's files behind)."""
    import gridfs

    from seml_hydra.manage.lifecycle import delete

    fs = gridfs.GridFS(test_db)

    def put(kind: dict) -> str:
        return str(fs.put(b"x", metadata={"collection_name": "reloaded", **kind}))

    payload = put({"collection": "reloaded", "kind": "seml_hydra_payload"})
    old, new = (put({"type": "source_file", "batch_id": 1}) for _ in range(2))
    coll = test_db["reloaded"]
    coll.insert_many(
        {
            "_id": i,
            "batch_id": 1,
            "status": "STAGED",
            "seml": {"payload_file": payload, "source_files": [["app.py", ObjectId(source)]]},
        }
        for i, source in ((1, old), (2, new), (3, old))
    )
    assert delete(coll, {}).ids == [1, 2, 3]
    assert test_db["fs.files"].count_documents({}) == 0


def test_a_delete_whose_squeue_fails_leaves_every_experiment_interrupted_as_before(
    slurm, test_db, tmp_path, watched, monkeypatch
):
    """``delete`` marks the experiments of held tasks only when Slurm fails: its squeue (which
    tells held tasks) failing, every experiment is INTERRUPTED, none deleted, and the error
    says so, as when every experiment was marked before asking Slurm."""
    import os
    import shutil

    from seml_hydra.manage.lifecycle import delete
    from seml_hydra.manage.selection import ManageError

    coll, _ = watched
    array = launch_held(tmp_path)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    squeue_bin = bin_dir / "squeue"
    squeue_bin.write_text("#!/bin/sh\necho 'squeue: error: slurmctld is down' >&2\nexit 1\n")
    squeue_bin.chmod(0o755)
    try:
        with monkeypatch.context() as patch:
            patch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
            assert shutil.which("squeue") == str(squeue_bin)
            with pytest.raises(ManageError, match="are INTERRUPTED, but Slurm could not cancel"):
                delete(coll, {})
        assert statuses(test_db["gate"]) == {i: "INTERRUPTED" for i in range(1, 13)}
    finally:
        subprocess.run(["scancel", str(array)], check=False)
