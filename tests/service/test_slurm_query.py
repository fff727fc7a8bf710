"""seml_hydra.slurm.client against the real Slurm testbed (tools/testbed/up.sh).

These tests fail (never skip) when Slurm is missing: the ``slurm`` fixture of conftest.py
checks ``sinfo``. Every job submitted here is cancelled by id at teardown. Waiting is done by
polling with a bounded deadline, never by sleeping a fixed time.
"""

from __future__ import annotations

import uuid

import pytest
from support.wait import wait_until

from seml_hydra.slurm import client as sl
from seml_hydra.slurm.client import SlurmError
from seml_hydra.slurm.parse import parse_job_id

pytestmark = [pytest.mark.slurm, pytest.mark.usefixtures("slurm")]

#: a job id slurmctld will not have (below MAX_JOB_ID 0x03FFFFFF, far above the testbed's)
UNKNOWN_JOB_ID = "67000000"


@pytest.fixture
def submit():
    """``submit(*sbatch_args) -> job id``; cancels every submitted job at teardown."""
    submitted: list[str] = []

    def _submit(*args: str) -> str:
        out = sl.run_slurm(["sbatch", "--parsable", "--chdir=/tmp", "--output=/dev/null", *args])
        job_id = out.strip().split(";")[0]
        parse_job_id(job_id)
        submitted.append(job_id)
        return job_id

    yield _submit
    if submitted:
        sl.scancel(submitted)


def test_held_array_is_found_released_and_cancelled(submit):
    comment = f"seml_hydra test {uuid.uuid4().hex[:8]}"
    job = submit("--hold", "--array=0-3%2", f"--comment={comment}", "-J", "seml hydra|test",
                 "--time=2", "--wrap", "sleep 30")  # fmt: skip
    jid = int(job)
    me = sl.current_user()

    rows = wait_until(f"squeue to list job {job}", lambda: sl.squeue_jobs(job_ids=[job]))
    (row,) = rows
    assert row.job_id == f"{job}_[0-3%2]"
    assert (row.job_id_raw, row.array_job_id, row.array_task) == (jid, jid, "0-3%2")
    assert row.task_ids == [0, 1, 2, 3] and row.throttle == 2
    assert (row.state, row.reason, row.alive) == ("PENDING", "JobHeldUser", True)
    assert row.comment == comment
    assert row.name == "seml hydra|test"
    assert row.user == me and row.nodelist is None and row.elapsed_s == 0.0
    parsed = parse_job_id(row.job_id)
    assert (parsed.array_id, parsed.task_ids, parsed.throttle) == (jid, (0, 1, 2, 3), 2)

    # the same job among all of the current user's jobs, and among everybody's
    assert row in sl.squeue_jobs()
    assert row in sl.squeue_jobs(all_users=True)
    assert row in sl.squeue_jobs(user=me, states=["PENDING"])
    # --array: one row per task
    expanded = sl.squeue_jobs(job_ids=[job], expand_arrays=True)
    assert sorted(r.job_id for r in expanded) == [f"{job}_{t}" for t in range(4)]
    assert {(r.state, r.reason, r.comment) for r in expanded} == {
        ("PENDING", "JobHeldUser", comment)
    }

    (rec,) = sl.scontrol_show_job(job)
    assert rec["JobId"] == job and rec["ArrayJobId"] == job
    assert rec["ArrayTaskId"] == "0-3%2" and rec["ArrayTaskThrottle"] == "2"
    assert (rec["JobState"], rec["Reason"]) == ("PENDING", "JobHeldUser")
    assert rec["Comment"] == comment and rec["JobName"] == "seml hydra|test"

    acct = wait_until(f"sacct to record job {job}", lambda: sl.sacct_jobs([job]))
    assert [(a.job_id, a.state, a.alive) for a in acct] == [(f"{job}_[0-3%2]", "PENDING", True)]

    sl.release([job])

    def released_rows():
        rows = sl.squeue_jobs(job_ids=[job])
        return rows if rows and all(r.reason != "JobHeldUser" for r in rows) else None

    released = wait_until("the release to show in squeue", released_rows)
    assert all(r.alive for r in released)

    sl.scancel([job])
    done = wait_until(
        "squeue to show the cancelled job",
        lambda: [r for r in sl.squeue_jobs(job_ids=[job], states=["all"]) if not r.alive],
    )
    assert {r.state for r in done} == {"CANCELLED"}
    wait_until(
        "every task to end",
        lambda: not any(r.alive for r in sl.squeue_jobs(job_ids=[job], states=["all"])),
    )
    acct = wait_until(
        "sacct to record the cancellation",
        lambda: (rows := sl.sacct_jobs([job])) and all(not r.alive for r in rows) and rows,
    )
    assert {r.state for r in acct} == {"CANCELLED"}
    assert all(r.state_raw.startswith("CANCELLED by ") for r in acct)


def test_failed_job_is_dead_with_its_exit_code(submit):
    job = submit("-J", "seml-hydra-fail", "--time=1", "--wrap", "exit 3")
    (row,) = wait_until(
        f"job {job} to fail",
        lambda: [r for r in sl.squeue_jobs(job_ids=[job], states=["all"]) if not r.alive],
        120,
    )
    assert (row.job_id, row.state, row.reason) == (job, "FAILED", "NonZeroExitCode")
    assert row.array_job_id is None and row.task_ids is None
    (acct,) = wait_until(
        "sacct to say FAILED", lambda: [r for r in sl.sacct_jobs([job]) if r.state == "FAILED"]
    )
    assert (acct.job_id, acct.job_id_raw, acct.exit_code, acct.exit_signal) == (job, job, 3, 0)
    assert acct.start is not None and acct.end is not None and acct.nodelist is not None


def test_unknown_job_ids_give_empty_answers():
    assert sl.scontrol_show_job(UNKNOWN_JOB_ID) == []
    assert sl.scontrol_show_job(f"{UNKNOWN_JOB_ID}_3") == []
    assert sl.squeue_jobs(job_ids=[UNKNOWN_JOB_ID]) == []
    assert sl.squeue_jobs(job_ids=[UNKNOWN_JOB_ID, str(int(UNKNOWN_JOB_ID) + 1)]) == []
    assert sl.sacct_jobs([UNKNOWN_JOB_ID]) == []
    sl.scancel([UNKNOWN_JOB_ID])  # Slurm 22.05 accepts this silently


def test_actions_on_unknown_jobs_raise_with_slurms_message():
    for action in (sl.hold, sl.release):
        with pytest.raises(SlurmError, match="Invalid job id specified") as info:
            action([UNKNOWN_JOB_ID])
        assert info.value.cmd[:2] == ["scontrol", action.__name__]


def test_failed_queries_raise_instead_of_returning_nothing():
    # squeue exits 0 here, with "squeue: error: Invalid user" on stderr
    with pytest.raises(SlurmError, match="Invalid user"):
        sl.squeue_jobs(user="no_such_user_seml_hydra")
    with pytest.raises(SlurmError, match="Invalid job state"):
        sl.squeue_jobs(states=["BOGUS"])
    with pytest.raises(SlurmError, match="not found: is Slurm installed"):
        sl.run_slurm(["squeue-not-a-command"])


def test_config_and_max_array_size():
    cfg = sl.show_config()
    assert cfg["ClusterName"]
    size = sl.max_array_size()
    assert isinstance(size, int) and size >= 1
    assert size == int(cfg.get("MaxArraySize", sl.DEFAULT_MAX_ARRAY_SIZE))


def test_current_user_is_who_slurm_sees(submit):
    job = submit("--hold", "--time=1", "--wrap", "true")
    (row,) = wait_until(f"squeue to list job {job}", lambda: sl.squeue_jobs(job_ids=[job]))
    assert row.user == sl.current_user()


def test_cluster_name_is_the_configured_one_asked_once_per_process(monkeypatch):
    monkeypatch.setattr(sl, "_cluster_name", None)
    assert sl.cluster_name() == "semltest" == sl.show_config()["ClusterName"]
    calls = []
    monkeypatch.setattr(sl, "show_config", lambda **kw: calls.append(kw) or {})
    assert sl.cluster_name() == "semltest" and calls == []  # cached: scontrol not asked again
    monkeypatch.setattr(sl, "_cluster_name", None)
    for asked in (1, 2):  # a failure is not cached: asked again next time
        with pytest.raises(SlurmError, match="printed no ClusterName"):
            sl.cluster_name()
        assert len(calls) == asked
