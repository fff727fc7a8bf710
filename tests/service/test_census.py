"""The census index (``track.census``) decides as the documents do, on the real MongoDB and the
Slurm testbed: ``status`` 's KILLED detection, its table and ``queue`` 's experiments
per job come out the same from a collection with the index (read from its keys) as from a copy
without it (every document read, the path before the census), on a mix of experiments: PENDING
of live and dead tasks, RUNNING with stale and fresh heartbeats, a requeued experiment whose old
``execution`` block names a dead job, a cancelled one, another cluster's, SEML 0.5's (an array,
no task) and a STAGED one. And for a held array the census reads no document at all."""

from __future__ import annotations

import copy
import subprocess
from datetime import datetime, timedelta, timezone

import pymongo
import pytest
from pymongo import monitoring
from support.mongo import MONGO_URL, TEST_DB, statuses
from support.slurm import squeue_tasks as squeue
from support.wait import wait_until

pytestmark = pytest.mark.slurm


def sbatch(*args: str) -> int:
    """A job of the testbed (``sbatch --parsable``); its id."""
    out = subprocess.run(
        ["sbatch", "--parsable", "-p", "debug", "-t", "5", *args, "--wrap", "true"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return int(out.strip().split(";")[0])


@pytest.fixture
def jobs(slurm):
    """``(live, dead, here)``: a held array of 2 tasks, an array cancelled before it started
    (sacct records it CANCELLED) and this cluster's name."""
    from seml_hydra.slurm import client

    live = sbatch("--hold", "--array=0-1")
    dead = sbatch("--hold", "--array=0-1")
    subprocess.run(["scancel", str(dead)], check=True)
    wait_until("the cancelled array is gone from squeue", lambda: squeue(dead) == {})
    yield live, dead, client.cluster_name()
    subprocess.run(["scancel", str(live)], check=False)


def ours(ids, array, task, here, **extra) -> list[dict]:
    """Experiments of our launcher's submission: ``slurm[0]`` names the task."""
    first = {
        "array_id": array,
        "task_id": task,
        "job_id": f"{array}_{task}",
        "num_tasks": 2,
        "cluster": here,
        "output_files_template": f"/nonexistent/{array}_{task}_0_log.out",
    }
    return [
        {
            "_id": i,
            "status": "PENDING",
            "seml": {"output_dir": "/nonexistent", "source_files": [["a.py", "x" * 64]]},
            "slurm": [copy.deepcopy(first)],
            **copy.deepcopy(extra),
        }
        for i in ids
    ]


def mixed(live: int, dead: int, here: str) -> list[dict]:
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    never = dead + 100_000  # a job Slurm has no record of
    docs = ours(range(1, 7), live, 0, here) + ours(range(7, 10), live, 1, here)
    docs += ours(range(10, 13), dead, 0, here)  # their task was cancelled: KILLED
    docs += ours(range(13, 15), live, 1, here, seml={"description": "described"})
    # RUNNING in a job Slurm does not know: a fresh heartbeat keeps one, a stale one is lost
    running = {"array_id": never, "task_id": 0, "cluster": here, "hostname": "node1"}
    docs += ours([15], never, 0, here, status="RUNNING", execution=running, heartbeat=now)
    stale = now - timedelta(hours=1)
    docs += ours([16], never, 0, here, status="RUNNING", execution=running, heartbeat=stale)
    # requeued: PENDING again in the live task, but the old execution block names a dead job
    old = {"array_id": dead, "task_id": 1, "cluster": here}
    docs += ours([17], live, 0, here, execution=old)
    docs += ours([18], dead, 1, here, execution={"cancel_time": now})  # cancelled: INTERRUPTED
    docs += ours([19], dead, 0, "othercluster")  # another cluster's: not judged
    docs += ours([20], live, 0, here, status="COMPLETED")
    single = ours([21], live, 0, here)  # a single job's record: "<array>" names it
    single[0]["slurm"][0].update(job_id=str(live), num_tasks=1)
    docs += single
    # SEML 0.5.7's own submission: an array, no task; its cluster in execution
    for i, array in ((22, live), (23, live), (24, never)):
        docs.append(
            {
                "_id": i,
                "status": "PENDING",
                "seml": {"output_dir": "/nonexistent"},
                "slurm": [{"array_id": array, "num_tasks": 2, "sbatch_options": {}}],
                "execution": {"cluster": here},
            }
        )
    docs.append({"_id": 25, "status": "STAGED", "slurm": [{"sbatch_options": {}}]})
    return docs


def twin(test_db, docs):
    """``(census, documents)``: two collections holding ``docs``, with the census index and
    without it (``ensure_job_indexes`` then the census index dropped)."""
    from seml_hydra.store.db.collections import CENSUS_INDEX, ensure_job_indexes
    from seml_hydra.track import census

    out = []
    for name in ("mix", "mix_plain"):
        test_db[name].insert_many(copy.deepcopy(docs))
        ensure_job_indexes(test_db[name])
        out.append(test_db[name])
    out[1].drop_index(CENSUS_INDEX)
    assert census.covered(out[0]) and not census.covered(out[1])
    return out


def stored(coll) -> list[dict]:
    """The documents of ``coll`` by ``_id``, its name in their fail traces written ``<name>``."""
    out = []
    for doc in coll.find().sort("_id"):
        trace = doc.get("fail_trace")
        if trace:
            doc["fail_trace"] = [line.replace(coll.name, "<name>") for line in trace]
        out.append(doc)
    return out


def test_census_decides_killed_table_and_queue_as_the_documents(jobs, test_db):
    from seml_hydra.manage.describe import group_rows
    from seml_hydra.manage.inspection import queue_groups
    from seml_hydra.manage.status_view import status_table
    from seml_hydra.track.jobs import task_of
    from seml_hydra.track.killed import detect_killed

    live, dead, here = jobs
    indexed, plain = twin(test_db, mixed(live, dead, here))
    assert detect_killed(indexed) == detect_killed(plain)
    assert statuses(indexed) == statuses(plain)
    assert statuses(indexed)[12] == "KILLED" and statuses(indexed)[1] == "PENDING"
    assert stored(indexed) == stored(plain)
    for coll in (indexed, plain):  # the census answered for one, the documents for the other
        table, arrays = status_table(coll, {})
        rows = [(r.state, r.ids, r.descriptions) for r in group_rows(table)]
        if coll is indexed:
            expected = (rows, arrays)
        else:
            assert (rows, arrays) == expected

    def per_task(coll):
        out: dict = {}
        for doc, ids in queue_groups(coll, [live, dead]):
            out.setdefault((task_of(doc), doc.get("status")), []).extend(ids)
        return {k: sorted(v) for k, v in out.items()}

    assert per_task(indexed) == per_task(plain)


class Reads(monitoring.CommandListener):
    """The commands sent for collection ``mix`` and how many documents their replies carried."""

    def __init__(self) -> None:
        self.names: list[str] = []
        self.matched: list[dict] = []  # the $match of each aggregate that reads documents
        self.returned = 0

    def started(self, event) -> None:
        if event.command.get(event.command_name) in ("mix", "many"):
            self.names.append(event.command_name)
            stages = event.command.get("pipeline") or []
            if any("$project" in stage for stage in stages):  # track.query.grouped
                self.matched.append(stages[0].get("$match"))

    def succeeded(self, event) -> None:
        cursor = event.reply.get("cursor") or {}
        self.returned += len(cursor.get("firstBatch") or cursor.get("nextBatch") or [])

    def failed(self, event) -> None:
        pass


def test_status_of_a_held_array_reads_index_keys_only(jobs, test_db):
    """Detection, table and queue of a live held array group no document (``track.query.grouped``
    runs only for the claimed experiments of ``queue``: none here) and get back a few index
    entries, not the experiments."""
    from seml_hydra.manage.inspection import queue_groups
    from seml_hydra.manage.status_view import status_table
    from seml_hydra.track.killed import detect_killed

    live, _, here = jobs
    docs = ours(range(1, 201), live, 0, here) + ours(range(201, 401), live, 1, here)
    indexed, _ = twin(test_db, docs)
    reads = Reads()
    client = pymongo.MongoClient(MONGO_URL, event_listeners=[reads])
    try:
        coll = client[TEST_DB]["mix"]
        result = detect_killed(coll)
        table, arrays = status_table(coll, {})
        groups = queue_groups(coll, [live])
    finally:
        client.close()
    assert (result.killed, result.interrupted, result.unsure) == ([], [], [])
    assert sorted(i for _, ids in table for i in ids) == list(range(1, 401))
    assert arrays == [str(live)]
    assert sorted(i for _, ids in groups for i in ids) == list(range(1, 401))
    claimed = {"$or": [{"execution.array_id": {"$in": [live, str(live)]}}]}
    assert reads.matched == [claimed], reads.matched
    assert reads.returned < 50, reads.returned  # index entries, not the 400 experiments


@pytest.mark.parametrize("first", ["a string", None, 7, []])
def test_an_experiment_whose_slurm_entry_is_not_a_document_is_judged(jobs, test_db, first):
    # a hand edit leaves slurm[0] a string (a number, null, []): the index holds null slurm.0.*
    # keys for it, which a covered read matches and a read of the document does not; the
    # experiment claimed by a dead task must be marked KILLED by the census too
    live, dead, here = jobs
    execution = {"array_id": dead, "task_id": 0, "cluster": here, "hostname": "node1"}
    doc = {"_id": 1, "status": "RUNNING", "seml": {"output_dir": "/nonexistent"}}
    docs = [{**doc, "slurm": [first], "execution": execution}]
    docs += ours([2], live, 0, here)  # alive: vouched for by the census
    indexed, plain = twin(test_db, docs)
    assert detect_killed_ids(plain) == [1]
    assert detect_killed_ids(indexed) == [1]
    assert statuses(indexed) == statuses(plain) == {1: "KILLED", 2: "PENDING"}


def detect_killed_ids(coll) -> list:
    from seml_hydra.track.killed import detect_killed

    return detect_killed(coll).killed


def test_a_collection_of_too_many_keys_is_walked_once_per_command(test_db):
    # 600 Slurm tasks: more keys than census.MAX_KEYS. status's detection walks the active
    # keys and gives up; its table must not walk the same keys again before giving up too,
    # while queue's shorter walk of the first two fields still answers
    from seml_hydra.core import states
    from seml_hydra.store.db.collections import ensure_job_indexes
    from seml_hydra.track import census

    test_db["many"].insert_many(
        {"_id": i, "status": "PENDING", "slurm": [{"array_id": 7, "task_id": i}]}
        for i in range(1, census.MAX_KEYS + 90)
    )
    ensure_job_indexes(test_db["many"])
    reads = Reads()
    client = pymongo.MongoClient(MONGO_URL, event_listeners=[reads])
    try:
        coll = client[TEST_DB]["many"]
        active = [(s,) for s in sorted(states.ACTIVE)]
        with pytest.raises(census.Unplain):
            census.walk(coll, active, len(census.FIELDS))
        reads.names.clear()
        with pytest.raises(census.Unplain):
            census.state_groups(coll)
        assert reads.names.count("find") <= 1, reads.names  # the index's explain at most
        assert [e.key for e in census.walk(coll, [()], 2)] == [("PENDING", None)]
    finally:
        client.close()


def test_the_status_index_of_earlier_versions_is_dropped_and_the_census_answers_by_state(test_db):
    """A collection indexed by an earlier version has a ``status`` index besides the census
    index, whose first field is ``status``: every write of a state paid for both. The next
    command's ``ensure_job_indexes`` drops it, and a query by state is answered from the
    census index's keys."""
    from seml_hydra.store.db.collections import CENSUS_INDEX, ensure_job_indexes

    coll = test_db["old"]
    coll.insert_many({"_id": i, "status": "PENDING"} for i in range(1, 5))
    coll.create_index("status")
    assert ensure_job_indexes(coll)
    names = {index["name"] for index in coll.list_indexes()}
    assert "status_1" not in names and CENSUS_INDEX in names
    plan = coll.find({"status": {"$in": ["PENDING", "RUNNING"]}}).explain()["queryPlanner"]
    stage = plan["winningPlan"].get("queryPlan", plan["winningPlan"])
    while stage.get("stage") != "IXSCAN":
        stage = stage["inputStage"]
    assert stage["indexName"] == CENSUS_INDEX
    assert ensure_job_indexes(coll)  # a second command finds nothing to drop


def test_cancel_groups_a_whole_collection_from_the_census_keys_and_keeps_only_the_ids_read(
    test_db,
):
    """``cancel`` of a whole collection groups its unclaimed experiments from the census keys
    (no document read), the claimed one from its document; given the ids a ``delete`` read,
    an experiment staged since (14, in the same array) is left out, and so is the claimed one
    outside them."""
    from seml_hydra.core.ranges import id_filter
    from seml_hydra.manage.cancel import active_groups
    from seml_hydra.store.db.collections import ensure_job_indexes
    from seml_hydra.track.groups import ids_of

    def job(i):
        return {"array_id": 7, "task_id": i % 2, "cluster": "c", "job_id": f"7_{i % 2}"}

    test_db["mix"].insert_many(
        {"_id": i, "status": "PENDING", "slurm": [job(i)]} for i in range(1, 13)
    )
    test_db["mix"].insert_one(
        {
            "_id": 13,
            "status": "RUNNING",
            "slurm": [job(13)],
            "execution": {"cluster": "c", "array_id": 7, "task_id": 1},
        }
    )
    ensure_job_indexes(test_db["mix"])
    reads = Reads()
    client = pymongo.MongoClient(MONGO_URL, event_listeners=[reads])
    try:
        coll = client[TEST_DB]["mix"]
        groups = active_groups(coll, {})
        assert sorted(ids_of(groups)) == list(range(1, 14))
        # one aggregate reads documents: those of the claimed key (RUNNING)
        assert len(reads.matched) == 1 and "RUNNING" in str(reads.matched[0]), reads.matched
        assert "PENDING" not in str(reads.matched[0])
        test_db["mix"].insert_one({"_id": 14, "status": "PENDING", "slurm": [job(14)]})
        read = list(range(1, 7))
        groups = active_groups(coll, id_filter(read), within=read)
        assert sorted(ids_of(groups)) == read
        tasks = {g.doc["slurm"][0]["job_id"] for g in groups}
        assert tasks == {"7_0", "7_1"}
    finally:
        client.close()


def examined(test_db, since) -> dict[str, int]:
    """``{operation: documents examined}`` on collection ``mix`` by the commands mongod's
    profiler recorded after ``since``, per operation (``update``, ``aggregate``, ``find``...)."""
    out: dict[str, int] = {}
    for entry in test_db["system.profile"].find({"ns": f"{TEST_DB}.mix", "ts": {"$gt": since}}):
        name = entry["op"] if entry["op"] != "command" else next(iter(entry["command"]))
        out[name] = out.get(name, 0) + int(entry.get("docsExamined", 0))
    return out


def sampled_updates(test_db, since) -> list[dict]:
    """The commands of the updates on ``mix`` after ``since`` that match a key's experiments
    holding a sample's values (their filter has an ``$expr``), as mongod's profiler recorded."""
    found = test_db["system.profile"].find(
        {"ns": f"{TEST_DB}.mix", "ts": {"$gt": since}, "op": "update"}
    )
    return [e["command"] for e in found if "$expr" in str(e["command"]["q"])]


def test_a_lost_task_s_experiments_are_marked_from_one_sample_without_reading_them(
    jobs, test_db, monkeypatch
):
    """The census cannot vouch for the keys of a dead array's tasks (100 experiments each):
    each is judged from one of its documents and marked by one update matching the key's
    experiments that hold the sample's values; no other command reads them (mongod's profiler
    counts the documents each one examined). An experiment of the key holding another output
    file is judged from its own document: the outcome is that of the documents' path."""
    from seml_hydra.track import killed
    from seml_hydra.track.killed import detect_killed

    live, dead, here = jobs
    docs = ours(range(1, 101), dead, 0, here) + ours(range(101, 201), dead, 1, here)
    docs += ours(range(201, 211), live, 0, here)
    docs[150]["slurm"][0]["output_files_template"] = "/nonexistent/other_log.out"  # 151
    indexed, plain = twin(test_db, docs)
    assert getattr(killed, "SAMPLED_MIN", 64) <= 100  # (64 before the samples)
    test_db.command("profile", 2)
    since = datetime.now(timezone.utc)
    try:
        result = detect_killed(indexed)
    finally:
        test_db.command("profile", 0)
    assert result == detect_killed(plain)
    assert result.killed == list(range(1, 201))
    assert stored(indexed) == stored(plain)
    assert "other_log.out" in stored(indexed)[150]["fail_trace"][-1]
    assert "other_log.out" not in stored(indexed)[149]["fail_trace"][-1]
    reads = examined(test_db, since)
    # the updates examine the experiments they mark, found by the census index (the planner
    # preferred execution.array_id's index: every unclaimed experiment, once per update)
    assert 199 <= reads.pop("update") <= 205, reads
    assert sum(reads.values()) <= 10, reads  # the samples, 151; not the 200 experiments
    hints = [u.get("hint") for u in sampled_updates(test_db, since)]
    assert hints == [{"$hint": "seml_hydra_census"}] * 2, hints


@pytest.mark.parametrize("sampled_min", [1, 10**9])
def test_sampled_or_read_the_census_decides_killed_as_the_documents(
    jobs, test_db, monkeypatch, sampled_min
):
    """The census's mixed collection (see :func:`mixed`) plus keys whose experiments differ
    where the decisions read (heartbeat, cancel mark, output file): judged from one sample per
    key (every key sampled) or from every document, the census path decides as the documents
    do."""
    from datetime import timedelta

    from seml_hydra.track import killed
    from seml_hydra.track.killed import detect_killed

    monkeypatch.setattr(killed, "SAMPLED_MIN", sampled_min)
    live, dead, here = jobs
    docs = mixed(live, dead, here)
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    base = 100
    more = ours(range(base, base + 6), dead, 1, here)
    more[1]["execution"] = {"cancel_time": now}  # cancelled: INTERRUPTED
    more[2]["slurm"][0]["output_files_template"] = "/nonexistent/x_log.out"
    more[3]["heartbeat"] = now - timedelta(hours=2)
    more[4]["slurm"][0]["sbatch_options"] = {"mem": "1G"}  # not read by the decisions
    docs += more
    indexed, plain = twin(test_db, docs)
    assert detect_killed(indexed) == detect_killed(plain)
    assert statuses(indexed) == statuses(plain)
    assert statuses(indexed)[base + 1] == "INTERRUPTED" and statuses(indexed)[base] == "KILLED"
    assert stored(indexed) == stored(plain)


def test_the_marks_of_many_experiments_go_at_once_and_decide_as_one_after_the_other(
    jobs, test_db, monkeypatch
):
    from seml_hydra.track import killed
    from seml_hydra.track.killed import detect_killed

    sent = []
    real = killed.run_at_once

    def watched(calls, workers):
        sent.append((len(calls), workers))
        return real(calls, workers)

    monkeypatch.setattr(killed, "run_at_once", watched)
    monkeypatch.setattr(killed, "MARK_AT_ONCE_MIN", 3)
    live, dead, here = jobs
    indexed, plain = twin(test_db, mixed(live, dead, here))
    assert detect_killed(indexed) == detect_killed(plain)
    assert stored(indexed) == stored(plain)
    assert sent and all(workers == killed.MARK_WORKERS for calls, workers in sent if calls > 1)
    assert any(calls > 1 for calls, _ in sent), sent
