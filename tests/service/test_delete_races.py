"""``delete`` against a collection that changes while its selection is read (found by an outside tester).

The aggregate that reads a ``delete``'s selection is no snapshot: an experiment whose state
moves forward in the census index while the aggregate walks it (PENDING -> RUNNING: a task
starting) is counted twice. Its count then equals the span of the ids and a gap (an
experiment the selection did not match) is taken for one of the selection's ids."""

from __future__ import annotations

import threading
import time

import pytest


def pending(n: int) -> list[dict]:
    return [
        {
            "_id": i,
            "status": "PENDING",
            "seml": {"output_dir": "/nonexistent"},
            "slurm": [{"array_id": 7, "task_id": 0}],
        }
        for i in range(1, n + 1)
    ]


@pytest.mark.parametrize("delay", [0.01, 0.02, 0.04])
def test_a_task_starting_during_delete_by_state_does_not_delete_an_unselected_experiment(
    test_db, delay
):
    """``delete -s PENDING,RUNNING`` (here without its cancel) of 60,000 experiments, one
    COMPLETED among them: experiment 1 starts (PENDING -> RUNNING) while the selection is read.
    The COMPLETED one was never selected and must survive; it is deleted because the
    aggregate counted experiment 1 in both states, so 59,999 + 1 ids looked consecutive."""
    from seml_hydra.manage.lifecycle import delete
    from seml_hydra.store.db.collections import ensure_job_indexes

    n = 60_000
    gap = n // 2
    coll = test_db["race"]
    docs = pending(n)
    docs[gap - 1]["status"] = "COMPLETED"
    coll.insert_many(docs)
    ensure_job_indexes(coll)

    def start() -> None:
        time.sleep(delay)
        coll.update_one({"_id": 1}, {"$set": {"status": "RUNNING"}})

    thread = threading.Thread(target=start)
    thread.start()
    try:
        result = delete(coll, {"status": {"$in": ["PENDING", "RUNNING"]}}, cancel_first=False)
    finally:
        thread.join()
    assert coll.find_one({"_id": gap}) is not None, "the COMPLETED experiment was deleted"
    assert gap not in result.ids
    assert coll.count_documents({}) == 1


# --------------------------------------------------------------------------- Ctrl-C, mongod stopped


def _ctrl_c_while_mongod_stopped(server, words: list[str], op_seen) -> None:
    """Run ``seml *words`` against ``server`` (a private mongod), wait until ``op_seen`` (a
    test of one ``currentOp`` entry) finds its write in flight, stop mongod (SIGSTOP) and
    press Ctrl-C: the command must end within 10 s, non-zero. mongod is continued after."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    client = server.direct()
    env = {**os.environ, "SEML_MONGODB_URI": f"mongodb://127.0.0.1:{server.port}/a6"}
    seml = Path(sys.executable).parent / "seml"
    proc = subprocess.Popen([str(seml), *words], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if any(
                op_seen(o) for o in client.admin.command("currentOp", {"ns": "a6.col"})["inprog"]
            ):
                break
            time.sleep(0.005)  # the write is in flight for a moment only: look often
        else:
            pytest.fail(f"no write seen (exit {proc.poll()})")
        os.kill(server.pid, signal.SIGSTOP)
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pytest.fail(f"seml {' '.join(words)} still runs 10 s after Ctrl-C (mongod stopped)")
        assert proc.returncode != 0
    finally:
        os.kill(server.pid, signal.SIGCONT)
        if proc.poll() is None:
            proc.wait(timeout=60)


def test_ctrl_c_stops_a_delete_whose_mongod_stopped_answering(private_mongod):
    """``seml col delete -y`` of 40,000 finished experiments; mongod stops answering (SIGSTOP)
    while the documents are being deleted and the user presses Ctrl-C. One ``delete_many``
    (15,000: checked by hand) is sent from the main thread: Ctrl-C ends the command at once
    (exit 130). From
    20,000 on the parts go from threads (``core.parallel.run_at_once``): the main thread waits
    for them, Python's exit waits for them again, and the command hangs as long as mongod does
    (here: until the test continues mongod, 10 s after the Ctrl-C)."""
    n = 40_000
    client = private_mongod.direct()
    client["a6"]["col"].insert_many([{"_id": i, "status": "COMPLETED"} for i in range(1, n + 1)])
    _ctrl_c_while_mongod_stopped(
        private_mongod,
        ["col", "delete", "-y", "--no-cancel"],
        lambda op: op.get("op") == "remove" or "delete" in (op.get("command") or {}),
    )


def test_delete_takes_the_filter_dicts_the_other_commands_take(test_db):
    """``-fd`` is a MongoDB filter (SEML's ``--filter-dict``): ``print-experiment``, ``reset``
    and SEML 0.5.7's own ``delete`` (a ``find``) take ``{"$where": ...}``. Our ``delete`` puts
    the filter into an aggregate's ``$match``, where MongoDB refuses ``$where``, and fails."""
    from seml_hydra.manage.lifecycle import delete
    from seml_hydra.track.query import select

    coll = test_db["where"]
    coll.insert_many([{"_id": i, "status": "COMPLETED"} for i in range(1, 6)])
    query = {"$where": "this._id == 3"}
    assert [d["_id"] for d in select(coll, query, {"_id": 1})] == [3]
    assert list(delete(coll, query, cancel_first=False).ids) == [3]
    assert sorted(coll.distinct("_id")) == [1, 2, 4, 5]


@pytest.mark.slurm
def test_ctrl_c_stops_a_status_marking_killed_whose_mongod_stopped_answering(slurm, private_mongod):
    """``seml col status`` after Slurm lost the 8 tasks of an array (40,000 PENDING
    experiments, 5,000 per task): the KILLED marks (8 ``update_many``, >= 10,000 experiments)
    go from threads (``track.killed.MARK_WORKERS``). mongod stops answering (SIGSTOP) while
    they run and the user presses Ctrl-C: the command must end, as it does when the marks
    go one after the other from the main thread."""
    from support.slurm import dead_array

    from seml_hydra.slurm import client as slurm_client
    from seml_hydra.store.db.collections import ensure_job_indexes

    dead = dead_array(8)
    here = slurm_client.cluster_name()
    client = private_mongod.direct()
    coll = client["a6"]["col"]
    per = 5_000
    coll.insert_many(
        [
            {
                "_id": i,
                "status": "PENDING",
                "batch_id": 1,
                "seml": {"output_dir": "/nonexistent"},
                "slurm": [
                    {
                        "array_id": dead,
                        "task_id": (i - 1) // per,
                        "job_id": f"{dead}_{(i - 1) // per}",
                        "num_tasks": 8,
                        "cluster": here,
                        "output_files_template": f"/nonexistent/{dead}_{(i - 1) // per}_0_log.out",
                    }
                ],
            }
            for i in range(1, 8 * per + 1)
        ]
    )
    ensure_job_indexes(coll)
    _ctrl_c_while_mongod_stopped(
        private_mongod, ["col", "status"], lambda op: op.get("op") == "update"
    )
