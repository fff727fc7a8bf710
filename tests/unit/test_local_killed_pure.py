"""Pure KILLED decision for runs outside Slurm (``track.jobs.decide_local_killed``): a
RUNNING experiment of ``launch-worker`` / ``start --local`` / ``--debug`` on this host whose
process is gone and whose heartbeat is stale is lost; one of another host never is."""

from __future__ import annotations

from datetime import datetime, timedelta

from seml_hydra.job.worker import local_execution
from seml_hydra.track.jobs import (
    decide_killed,
    decide_local_killed,
    local_process,
    recorded_process_start,
)

NOW = datetime(2026, 12, 1, 12, 0, 0)
FRESH, STALE = NOW - timedelta(seconds=20), NOW - timedelta(seconds=61)


def local(exp_id, pid, host="here", status="RUNNING", **extra):
    """An experiment as ``job.worker.run_local`` records it (Sacred's ``host.hostname``)."""
    return {
        "_id": exp_id,
        "status": status,
        "execution": {"cluster": "local", "array_id": pid, "task_id": 0},
        "host": {"hostname": host},
        **extra,
    }


def test_a_gone_local_process_with_a_stale_heartbeat_is_killed_only_on_its_own_host():
    docs = [
        local(1, 101, heartbeat=STALE),  # gone, stale -> killed
        local(2, 102, heartbeat=FRESH),  # gone, fresh heartbeat: alive
        local(3, 103, heartbeat=STALE),  # process alive
        local(4, 104, host="elsewhere", heartbeat=STALE),  # another host: a pid says nothing
        local(5, 105),  # gone, never beat (no heartbeat, no start_time) -> killed
        local(6, 106, start_time=FRESH),  # no heartbeat yet: start_time counts
        local(7, 107, status="PENDING", heartbeat=STALE),  # not running
        local(8, 108, heartbeat=STALE),  # pid not asked: counts as alive
        {**local(9, 109, heartbeat=STALE), "host": None},  # no host recorded
    ]
    alive = {101: False, 102: False, 103: True, 104: False, 105: False, 106: False}
    alive.update({107: False, 109: False})
    alive = {(pid, None): value for pid, value in alive.items()}
    assert decide_local_killed(docs, alive, "here", now=NOW, heartbeat_stale_s=60) == [1, 5]
    # the Slurm decision still leaves local runs alone (the launcher watches its own)
    assert decide_killed(docs, set(), {}, now=NOW) == ([], [], [])


def test_local_process_names_the_pid_of_this_hosts_runs_only():
    assert local_process(local(1, 4765), "here") == 4765
    assert local_process(local(1, "4765"), "here") == 4765
    assert local_process(local(1, 4765, host="other"), "here") is None
    assert local_process(local(1, 4765, status="COMPLETED"), "here") is None
    assert local_process(local(1, -3), "here") is None
    slurm = {**local(1, 10), "execution": {"cluster": "semltest", "array_id": 10, "task_id": 0}}
    assert local_process(slurm, "here") is None


def worker_run(exp_id, pid, started, **extra):
    """An experiment as the worker claims it (``job.worker.local_execution``), before Sacred
    has written ``host`` or any heartbeat."""
    return {"_id": exp_id, "status": "RUNNING", "execution": local_execution(pid, "here", started)}


def test_the_worker_records_its_host_and_process_start_with_the_claim():
    execution = local_execution(4765, "here", "98765")
    assert execution == {
        "cluster": "local",
        "array_id": 4765,
        "task_id": 0,
        "hostname": "here",
        "process_start": "98765",
    }
    assert "process_start" not in local_execution(4765, "here", None)
    doc = worker_run(1, 4765, "98765")
    # killed before Sacred started: no host.hostname yet, the claim's hostname tells
    assert local_process(doc, "here") == 4765
    assert local_process(doc, "elsewhere") is None
    assert recorded_process_start(doc) == "98765"
    assert recorded_process_start(local(1, 4765)) is None  # submitit's local executor


def test_a_pid_reused_by_a_later_process_does_not_keep_the_run_alive():
    docs = [worker_run(1, 201, "500"), worker_run(2, 201, "900"), worker_run(3, 202, "7")]
    # pid 201 now runs the process that started at 900 (a later worker): run 1 is lost
    alive = {(201, "500"): False, (201, "900"): True, (202, "7"): True}
    assert decide_local_killed(docs, alive, "here", now=NOW) == [1]
