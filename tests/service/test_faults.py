"""Faults: timeouts and preemption (opt-in requeue), killed jobs, a hand-started duplicate task.
Real Slurm and MongoDB."""

from __future__ import annotations

import subprocess

import pytest
from support.run import run_app, start_app
from support.slurm import FAULT_CLUSTER, FAULT_NODES, run_up_sh, squeue_tasks
from support.wait import wait_running, wait_until

#: a time limit Slurm does not reach during a test: the tests send the signal Slurm sends
#: before a time limit or on preemption themselves, because Slurm delivers ``--signal`` up to a
#: minute early and a 1-minute job is signalled at a random moment. A single-task job has no
#: srun step (``launch.sbatch.runs_without_srun``) and is submitted with ``--signal=B:USR2@..``:
#: Slurm signals its batch shell, the exec'd Python, as ``scancel --batch --signal=USR2`` does
SLOW = ["hydra.launcher.timeout_min=10", "hydra.launcher.poll_interval_s=0.5"]


def run_resume_app(*args: str, cwd, collection) -> subprocess.CompletedProcess:
    """Run ``resume_app`` on Slurm; once its experiment is RUNNING, signal it as Slurm does at a
    time limit (USR2, submitit's signal, to the batch shell: the ``B:`` form the single-task job
    was submitted with), then wait for the launcher to finish."""
    proc = start_app("tests/apps/resume_app.py", "-m", "hydra/launcher=seml", *SLOW, *args, cwd=cwd)
    try:
        wait_running(collection, proc, timeout=600)  # the shared cluster may be full first
        doc = collection.find_one()
        wait_until(  # the task registered its hook (or would have): its first log line
            "the task to start",
            lambda: "started" in str(collection.find_one().get("captured_out", "")),
            60,
            0.2,
        )
        job = f"{doc['execution']['array_id']}"
        subprocess.run(["scancel", "--batch", "--signal=USR2", job], check=True)
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_timeout_with_checkpoint_is_rescheduled_requeued_and_completed_by_the_same_task(
    slurm, test_db, tmp_path
):
    proc = run_resume_app(cwd=tmp_path, collection=test_db["resume_app"])
    assert proc.returncode == 0, proc.stderr
    (doc,) = list(test_db["resume_app"].find())
    assert doc["status"] == "COMPLETED"
    requeues = doc["requeues"]
    assert requeues == 1 and doc["result"] == {"runs": 2, "requeues": 1}  # resumed its state
    array_id = doc["slurm"][0]["array_id"]
    assert doc["execution"]["array_id"] == array_id and doc["execution"]["task_id"] == 0
    # the run before the requeue stays readable in the attempt history
    (earlier,) = doc["attempts"]
    assert earlier["status"] == "RESCHEDULED" and earlier["moved_by"] == "requeue"
    assert (earlier["array_id"], earlier["task_id"], earlier["restart"]) == (array_id, 0, 0)
    assert earlier["start_time"] <= doc["start_time"] and earlier["host"]
    assert doc["execution"]["restart"] == 1
    import time

    deadline = time.monotonic() + 60  # slurmdbd records the end a moment after the job ends
    while True:
        states = subprocess.run(
            ["sacct", "-n", "-P", "-X", "-D", "-j", str(array_id), "-o", "State"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        # the second record reads RUNNING or REQUEUED until slurmdbd has its end
        if states[-1:] not in (["RUNNING"], ["REQUEUED"]) or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert states == ["REQUEUED"] * requeues + ["COMPLETED"]


def test_timeout_without_opt_in_ends_failed_with_the_reason_not_running(slurm, test_db, tmp_path):
    proc = run_resume_app("opt_in=false", cwd=tmp_path, collection=test_db["resume_app"])
    assert proc.returncode != 0
    (doc,) = list(test_db["resume_app"].find())
    assert doc["status"] == "FAILED"
    assert "did not opt in to requeueing" in "".join(doc["fail_trace"])


def test_requeue_limit_ends_failed_with_a_clear_reason(slurm, test_db, tmp_path):
    proc = run_resume_app(
        "hydra.launcher.max_requeues=0", cwd=tmp_path, collection=test_db["resume_app"]
    )
    assert proc.returncode != 0
    (doc,) = list(test_db["resume_app"].find())
    assert doc["status"] == "FAILED"
    assert "max_requeues=0 reached" in "".join(doc["fail_trace"])


def test_scancel_of_a_running_job_is_detected_as_killed_and_the_launcher_stops_waiting(
    slurm, test_db, tmp_path
):
    proc = start_app(
        "tests/apps/sleep_app.py",
        "-m",
        "hydra/launcher=seml",
        "seconds=300",
        "hydra.launcher.poll_interval_s=0.5",
        cwd=tmp_path,
    )
    try:
        wait_running(test_db["sleep_app"], proc, timeout=600)  # the cluster may be full first
        doc = test_db["sleep_app"].find_one()
        subprocess.run(["scancel", str(doc["slurm"][0]["array_id"])], check=True)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    doc = test_db["sleep_app"].find_one()
    assert doc["status"] == "KILLED"
    assert doc["fail_trace"]
    # it was RUNNING: what its captured_out holds ends at its last saved heartbeat
    assert doc["captured_out_incomplete"] is True
    # the job's own output file, in its submitit folder, is still read for the trace
    trace = "".join(doc["fail_trace"])
    assert "Last lines of" in trace and "could not read" not in trace, trace
    assert "is KILLED" in err


def test_a_job_slurm_will_never_start_is_reported_while_waiting(slurm, test_db, tmp_path):
    import time

    proc = start_app(
        "examples/fail.py",
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.nodes=3",
        "hydra.launcher.poll_interval_s=0.5",
        cwd=tmp_path,
    )
    try:
        out = ""
        deadline = time.monotonic() + 90
        while "Slurm will not start job" not in out:
            assert time.monotonic() < deadline and proc.poll() is None, out
            out += proc.stdout.readline()
        assert "PartitionNodeLimit" in out and "seml fail cancel" in out
    finally:
        proc.kill()
        proc.communicate()
        for doc in test_db["fail"].find():
            subprocess.run(["scancel", str(doc["slurm"][0]["array_id"])], check=False)


def test_a_throttled_foreign_array_does_not_disturb_status_or_queue(slurm, test_db, tmp_path):
    from typer.testing import CliRunner

    from seml_hydra.cli import app
    from seml_hydra.slurm import client as slurm_client
    from seml_hydra.track.jobs import task_of

    proc = run_app("fail.py", "-m", "hydra/launcher=seml", "x=1,3", "fail_on=-1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    foreign = subprocess.run(
        # (0-7: the testbed's MaxArraySize is 8)
        ["sbatch", "--parsable", "--array=0-7%1", "--output=/dev/null", "--wrap", "sleep 60"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        test_db["fail"].update_one({"config.x": 3}, {"$set": {"status": "RUNNING"}})
        job = task_of(test_db["fail"].find_one({"config.x": 3}))[1]
        # the run's heartbeat is fresh: only sacct's record of the end is evidence enough
        wait_until(
            "sacct to record the job's end",
            lambda: any(not row.alive for row in slurm_client.sacct_jobs([job])),
            60,
        )
        runner = CliRunner()
        status = runner.invoke(app, ["fail", "status"])
        assert status.exit_code == 0, status.output
        # the RUNNING one's job is gone (it completed): KILLED with evidence; nothing else moves
        assert {d["config"]["x"]: d["status"] for d in test_db["fail"].find()} == {
            1: "COMPLETED",
            3: "KILLED",
        }
        queue = runner.invoke(app, ["queue", "--all"])
        assert queue.exit_code == 0, queue.output
        assert "Traceback" not in queue.output
    finally:
        subprocess.run(["scancel", foreign], check=False)


@pytest.mark.xdist_group("fault-cluster")  # with the other tests of the fault cluster
def test_status_while_the_scheduler_is_unreachable_marks_nothing_killed(
    fault_slurm, test_db, tmp_path
):
    """slurmctld stopped (the fault cluster's: the other tests go on on the shared cluster)."""
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    proc = run_app("fail.py", "-m", "hydra/launcher=seml", "x=1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    test_db["fail"].update_one({}, {"$set": {"status": "RUNNING"}})
    doc = test_db["fail"].find_one()  # it ran on the fault cluster, as it says
    assert doc["slurm"][0]["cluster"] == FAULT_CLUSTER and doc["host"]["hostname"] in FAULT_NODES
    pid = int(open("/run/slurmctld-fault.pid").read())
    subprocess.run(["kill", str(pid)], check=True)
    try:
        wait_until(
            "slurmctld to stop",
            lambda: (
                subprocess.run(["scontrol", "ping"], capture_output=True, text=True).returncode != 0
            ),
            30,
        )
        result = CliRunner().invoke(app, ["fail", "status"])
        assert result.exit_code == 0, result.output
        assert "no experiment was marked KILLED" in result.output
        assert test_db["fail"].find_one()["status"] == "RUNNING"
    finally:
        run_up_sh()


def test_a_run_slurm_has_no_record_of_is_killed_once_its_heartbeat_is_stale(slurm, test_db):
    """Job id unknown to squeue and sacct (purged, other cluster): a fresh heartbeat keeps the
    run RUNNING, a heartbeat older than HEARTBEAT_STALE_S makes it KILLED."""
    from datetime import datetime, timedelta, timezone

    from typer.testing import CliRunner

    from seml_hydra.cli import app
    from seml_hydra.track.jobs import HEARTBEAT_STALE_S

    array = 9_000_000  # far above the testbed's job ids: squeue and sacct know nothing of it
    task = {"cluster": "slurm", "array_id": array, "task_id": 0}
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    test_db["ghost"].insert_one(
        {"_id": 1, "status": "RUNNING", "execution": task, "slurm": [task], "heartbeat": now}
    )
    result = CliRunner().invoke(app, ["ghost", "status"])
    assert result.exit_code == 0, result.output
    assert "left RUNNING" in result.output
    assert test_db["ghost"].find_one()["status"] == "RUNNING"

    stale = now - timedelta(seconds=HEARTBEAT_STALE_S + 5)
    test_db["ghost"].update_one({"_id": 1}, {"$set": {"heartbeat": stale}})
    result = CliRunner().invoke(app, ["ghost", "detect-killed"])
    assert result.exit_code == 0, result.output
    doc = test_db["ghost"].find_one()
    assert doc["status"] == "KILLED"
    assert f"Slurm job {array}_0 ended" in doc["fail_trace"][0]


def test_an_experiment_deleted_while_it_runs_is_not_brought_back_by_its_job(
    slurm, test_db, tmp_path
):
    """``seml delete --no-cancel`` of a RUNNING experiment: its job finishes, and Sacred's
    final save must not recreate a fragment of the document."""
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    coll = test_db["gate"]
    gate = tmp_path / "open"
    proc = start_app(
        "tests/apps/gate.py",
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.wait=false",
        f"gate={gate}",
        cwd=tmp_path,
    )
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    doc = wait_until("the run to start", lambda: coll.find_one({"host": {"$exists": True}}))
    result = CliRunner().invoke(app, ["gate", "delete", "--no-cancel", "-y"])
    assert result.exit_code == 0, result.output
    assert coll.count_documents({}) == 0
    gate.touch()
    array = doc["execution"]["array_id"]
    wait_until("the job to end", lambda: not squeue_tasks(array), 120)
    assert coll.count_documents({}) == 0


def test_status_never_judges_an_experiment_of_another_cluster(slurm, test_db):
    """Job ids are per cluster: a RUNNING experiment of cluster ``elsewhere`` whose job id this
    cluster does not know (and whose heartbeat is stale) stays RUNNING, and status says why;
    an old document naming no real cluster (``"slurm"``) is judged as before."""
    from datetime import datetime, timedelta, timezone

    from typer.testing import CliRunner

    from seml_hydra.cli import app
    from seml_hydra.track.jobs import HEARTBEAT_STALE_S

    stale = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(
        seconds=HEARTBEAT_STALE_S + 5
    )
    docs = []
    for exp_id, cluster in ((1, "elsewhere"), (2, "elsewhere"), (3, "slurm")):
        task = {"cluster": cluster, "array_id": 9_000_000 + exp_id, "task_id": 0}
        docs.append(
            {"_id": exp_id, "status": "RUNNING", "execution": task, "slurm": [task]}
            | {"heartbeat": stale}
        )
    test_db["ghost"].insert_many(docs)
    result = CliRunner().invoke(app, ["ghost", "status"])
    assert result.exit_code == 0, result.output
    assert (
        "2 experiment(s) run on cluster elsewhere (1-2): not checked from cluster semltest"
        in result.output
    ), result.output
    assert {d["_id"]: d["status"] for d in test_db["ghost"].find()} == {
        1: "RUNNING",
        2: "RUNNING",
        3: "KILLED",
    }


def _held_request(tmp_path, exp_id: int):
    """A SubmitRequest of experiment ``exp_id`` whose job is submitted held (it never runs)."""
    import dataclasses

    from seml_hydra.config import SemlLauncherConf
    from seml_hydra.launch.submit import SubmitRequest

    launcher = dataclasses.asdict(SemlLauncherConf())
    launcher["submitit_folder"] = str(tmp_path / ".submitit" / "%j")
    launcher["additional_parameters"] = {"hold": True}
    return SubmitRequest(exp_id, launcher, "no-payload", 1, "slurm")


def _staged(coll, *ids):
    """STAGED experiments ``ids`` of batch 1, naming the payload of :func:`_held_request`."""
    coll.insert_many(
        [
            {
                "_id": i,
                "status": "STAGED",
                "batch_id": 1,
                "slurm": [{}],
                "seml": {"payload_file": "no-payload"},
            }
            for i in ids
        ]
    )


#: slurm[0] of an experiment a concurrent `seml start` moved and submitted first
THEIRS = {
    "submitting": {"host": "elsewhere", "pid": 1, "token": "theirs"},
    "array_id": 8_000_000,
    "task_id": 0,
}


def test_submit_sends_nothing_to_sbatch_when_a_concurrent_start_moved_every_experiment(
    slurm, test_db, tmp_path
):
    from seml_hydra.launch.submit import submit_requests

    coll = test_db["race"]
    coll.insert_one({"_id": 1, "status": "PENDING", "batch_id": 1, "slurm": [THEIRS]})
    arrays = submit_requests(coll, "race", [_held_request(tmp_path, 1)], db_cfg=None)
    assert arrays == []
    assert not list(tmp_path.rglob("*.sh"))  # submitit writes the sbatch script first
    assert coll.find_one({"_id": 1})["slurm"] == [THEIRS]


def test_submit_submits_only_the_experiments_it_moved_and_leaves_the_others_slurm_entry(
    slurm, test_db, tmp_path
):
    from seml_hydra.launch.submit import submit_requests

    coll = test_db["race"]
    _staged(coll, 1)
    coll.insert_one({"_id": 2, "status": "PENDING", "batch_id": 1, "slurm": [THEIRS]})
    requests = [_held_request(tmp_path, 1), _held_request(tmp_path, 2)]
    arrays = submit_requests(coll, "race", requests, db_cfg=None)
    try:
        assert len(arrays) == 1 and [ids for _, ids in arrays[0].jobs.values()] == [[1]]
        array = arrays[0].array_id
        assert set(squeue_tasks(array)) == {f"{array}_0"}  # one task: not a 2-task array
        mine = coll.find_one({"_id": 1})["slurm"][0]
        assert str(mine["array_id"]) == array and mine["cluster"] == "semltest"
        assert coll.find_one({"_id": 2})["slurm"] == [THEIRS]
    finally:
        subprocess.run(["scancel", *(a.array_id for a in arrays)], check=False)


def test_submit_does_not_overwrite_a_slurm_entry_another_submission_took_over_meanwhile(
    slurm, test_db, tmp_path
):
    """The interleaving, made deterministic: after this submission's sbatch, before it records
    the job, another one (which judged this one dead) re-marked experiment 1 as its own."""
    from seml_hydra.launch.submit import submit_requests

    coll = test_db["race"]
    _staged(coll, 1, 2)

    class TakeOverBeforeRecording:
        """The real collection; its first bulk_write (the job records) comes after a take-over."""

        def __getattr__(self, name):
            return getattr(coll, name)

        def bulk_write(self, requests, **kwargs):
            coll.update_one({"_id": 1}, {"$set": {"slurm": [THEIRS]}})
            return coll.bulk_write(requests, **kwargs)

    requests = [_held_request(tmp_path, 1), _held_request(tmp_path, 2)]
    arrays = submit_requests(TakeOverBeforeRecording(), "race", requests, db_cfg=None)
    try:
        assert coll.find_one({"_id": 1})["slurm"] == [THEIRS]
        entry = coll.find_one({"_id": 2})["slurm"][0]
        assert str(entry["array_id"]) == arrays[0].array_id and "submitting" not in entry
    finally:
        subprocess.run(["scancel", *(a.array_id for a in arrays)], check=False)


def test_a_submission_undone_for_unsafe_job_files_leaves_its_experiments_as_staged_ones(
    slurm, test_db, tmp_path, monkeypatch
):
    """The array is cancelled and its experiments go back to STAGED without what the
    submission wrote: no mark, no job, no fail-fast group (which a later count would read)."""
    from seml_hydra.launch import submit

    coll = test_db["race"]
    _staged(coll, 1, 2)
    requests = [_held_request(tmp_path, 1), _held_request(tmp_path, 2)]
    for request in requests:
        request.launcher["max_failures"] = 1
    monkeypatch.setattr(submit, "job_files_problem", lambda jobs: "a planted folder")
    with pytest.raises(submit.UnsafeFolderError, match="a planted folder") as raised:
        submit.submit_requests(coll, "race", requests, db_cfg=None)
    assert raised.value.submitted == []
    for doc in coll.find():
        assert doc["status"] == "STAGED" and "fail_fast" not in doc, doc
        assert set(doc["slurm"][0]) <= {"sbatch_options", "cluster"}, doc


def test_release_and_cancel_leave_another_clusters_experiment_and_the_job_of_its_id_here_alone(
    slurm, test_db
):
    """Another cluster's job 123 is not this cluster's job 123: ``release``, ``cancel`` (and
    ``delete``, which cancels first) must neither mark the experiment nor act on this
    cluster's job."""
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    job = subprocess.run(
        ["sbatch", "--parsable", "--hold", "--time=1", "--wrap", "true"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    try:
        task = {"cluster": "elsewhere", "array_id": int(job), "task_id": 0}
        single = {**task, "job_id": job, "num_tasks": 1}  # a plain job: task_of gives `job`
        test_db["ghost"].insert_one(
            {"_id": 1, "status": "RUNNING", "execution": task, "slurm": [single]}
        )
        test_db["ghost"].update_one({"_id": 1}, {"$set": {"status": "PENDING"}})
        result = CliRunner().invoke(app, ["ghost", "release"])
        assert result.exit_code == 0, result.output
        assert "Nothing held to release." in result.output
        assert squeue_tasks(job)[job][1] == "JobHeldUser"  # still held
        test_db["ghost"].update_one({"_id": 1}, {"$set": {"status": "RUNNING"}})
        result = CliRunner().invoke(app, ["ghost", "cancel", "-y"])
        assert result.exit_code == 0, result.output
        assert "1 experiment(s) run on cluster elsewhere (1): not cancelled" in result.output
        assert "No PENDING or RUNNING experiments to cancel." in result.output
        assert test_db["ghost"].find_one()["status"] == "RUNNING"
        result = CliRunner().invoke(app, ["ghost", "delete", "-y"])
        assert result.exit_code == 0, result.output
        assert "Deleted 1 experiment(s): 1" in result.output and "Cancelled" not in result.output
        assert job in squeue_tasks(job)  # this cluster's job of the same id is untouched
    finally:
        subprocess.run(["scancel", job], check=True)


def test_cancel_delete_hold_release_leave_a_job_of_another_comment_alone(slurm, test_db):
    """Forged documents naming an unrelated job of the user (its sbatch comment is not the
    collection) must not get it cancelled, deleted's cancel, held or released: only jobs whose
    comment is the collection are acted on (how ``seml queue`` finds them, SEML's rule)."""
    from typer.testing import CliRunner

    from seml_hydra.cli import app

    job = subprocess.run(
        ["sbatch", "--parsable", "--hold", "--comment", "unrelated", "--time=5"]
        + ["--output=/dev/null", "--wrap", "sleep 300"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    left_alone = f"job {job} is not a job of collection victim (its comment is 'unrelated'): "
    try:
        test_db["victim"].insert_many(
            [
                # SEML 0.5's form (the whole array) and ours (one task of it)
                {"_id": 1, "status": "PENDING", "slurm": [{"array_id": int(job)}]},
                {
                    "_id": 2,
                    "status": "PENDING",
                    "slurm": [{"array_id": int(job), "task_id": 0, "job_id": job, "num_tasks": 1}],
                },
            ]
        )
        runner = CliRunner()
        result = runner.invoke(app, ["victim", "release"])
        assert result.exit_code == 0, result.output
        assert f"{left_alone}left alone" in result.output
        assert "Nothing held to release." in result.output
        assert squeue_tasks(job)[job] == ("PENDING", "JobHeldUser")
        result = runner.invoke(app, ["victim", "hold"])
        assert result.exit_code == 0, result.output
        assert f"{left_alone}left alone" in result.output
        assert "Nothing pending to hold." in result.output
        for command in (["cancel", "-id", "1", "-y"], ["delete", "-id", "2", "-y"]):
            result = runner.invoke(app, ["victim", *command])
            assert result.exit_code == 0, result.output
            assert f"{left_alone}left alone" in result.output
            assert squeue_tasks(job)[job] == ("PENDING", "JobHeldUser"), command
        assert "Slurm task(s) first" not in result.output
        assert test_db["victim"].find_one({"_id": 1})["status"] == "INTERRUPTED"
        assert test_db["victim"].count_documents({"_id": 2}) == 0
    finally:
        subprocess.run(["scancel", job], check=True)


def held_job(folder, *args: str) -> str:
    """A held job whose script lies in ``folder`` (as submitit's sbatch script does)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "submission_file.sh"
    script.write_text("#!/bin/sh\nsleep 300\n")
    return subprocess.run(
        ["sbatch", "--parsable", "--hold", "--time=5", "--output=/dev/null", *args, str(script)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_recovering_a_dead_submission_cancels_its_unrecorded_array_only(slurm, test_db, tmp_path):
    """A submitter that died between sbatch and recording the job leaves an array no document
    records (comment = collection, name <collection>_<batch>, its script in the submitit folder
    of the dead mark): the recovery that puts its experiments back to STAGED cancels that
    array, and no recorded array, nor another batch's, nor one made in another folder (a
    collection of the same name in another database)."""
    import socket

    from seml_hydra.launch.recovery import recover_interrupted_submissions

    dead = subprocess.Popen(["true"])
    dead.wait()
    ours = tmp_path / "sweep" / ".submitit"
    mark = {"host": socket.gethostname(), "pid": dead.pid, "started": "gone", "token": "t"}
    mark["folder"] = str(ours / "%j")
    orphan = held_job(ours, "--comment=lost", "--job-name=lost_1")
    recorded = held_job(ours, "--comment=lost", "--job-name=lost_1")
    other_batch = held_job(ours, "--comment=lost", "--job-name=lost_2")
    elsewhere = held_job(tmp_path / "other", "--comment=lost", "--job-name=lost_1")
    try:
        test_db["lost"].insert_many(
            [
                {"_id": i, "batch_id": 1, "status": "PENDING", "slurm": [{"submitting": mark}]}
                for i in (1, 2)
            ]
            + [
                {
                    "_id": 3,
                    "batch_id": 1,
                    "status": "PENDING",
                    "slurm": [{"array_id": int(recorded)}],
                }
            ]
        )
        assert recover_interrupted_submissions(test_db["lost"]) == [1, 2]
        assert {d["_id"]: d["status"] for d in test_db["lost"].find()} == {
            1: "STAGED",
            2: "STAGED",
            3: "PENDING",
        }
        wait_until("the orphan is cancelled", lambda: squeue_tasks(orphan) == {}, 30)
        assert squeue_tasks(recorded)[recorded][0] == "PENDING"
        assert squeue_tasks(other_batch)[other_batch][0] == "PENDING"
        assert squeue_tasks(elsewhere)[elsewhere][0] == "PENDING"
    finally:
        subprocess.run(["scancel", orphan, recorded, other_batch, elsewhere], check=True)


def test_recovery_leaves_the_unrecorded_array_of_a_live_submission_of_the_batch_alone(
    slurm, test_db, tmp_path
):
    """While a live process still submits experiments of the batch (its mark), an unrecorded
    array of the batch may be its own, waiting for its record: not cancelled."""
    import os
    import socket

    from seml_hydra.core.processes import process_start
    from seml_hydra.launch.recovery import recover_interrupted_submissions

    dead = subprocess.Popen(["true"])
    dead.wait()
    host = socket.gethostname()
    folder = str(tmp_path / ".submitit" / "%j")
    gone = {"host": host, "pid": dead.pid, "started": "gone", "token": "t", "folder": folder}
    alive = {"host": host, "pid": os.getpid(), "started": process_start(os.getpid())}
    alive.update(token="u", folder=folder)
    array = held_job(tmp_path / ".submitit", "--comment=busy", "--job-name=busy_1")
    try:
        test_db["busy"].insert_many(
            [
                {"_id": 1, "batch_id": 1, "status": "PENDING", "slurm": [{"submitting": gone}]},
                {"_id": 2, "batch_id": 1, "status": "PENDING", "slurm": [{"submitting": alive}]},
            ]
        )
        assert recover_interrupted_submissions(test_db["busy"]) == [1]
        assert squeue_tasks(array)[array][0] == "PENDING"
    finally:
        subprocess.run(["scancel", array], check=True)


def test_an_execution_block_without_a_cluster_takes_the_submissions_cluster(slurm, test_db):
    """Documents of mixed versions: the job of an older version wrote ``execution`` with ids
    but no cluster, while the submission (``slurm[0]``) names cluster ``elsewhere``. The
    experiment is another cluster's: status does not judge it by this cluster's job ids."""
    from datetime import datetime, timedelta, timezone

    from typer.testing import CliRunner

    from seml_hydra.cli import app
    from seml_hydra.track.jobs import HEARTBEAT_STALE_S

    stale = datetime.now(timezone.utc).replace(tzinfo=None) - timedelta(
        seconds=HEARTBEAT_STALE_S + 5
    )
    task = {"array_id": 9_100_001, "task_id": 0}
    test_db["mixed"].insert_one(
        {"_id": 1, "status": "RUNNING", "execution": task, "heartbeat": stale}
        | {"slurm": [{**task, "cluster": "elsewhere"}]}
    )
    result = CliRunner().invoke(app, ["mixed", "status"])
    assert result.exit_code == 0, result.output
    assert "1 experiment(s) run on cluster elsewhere (1)" in result.output, result.output
    assert test_db["mixed"].find_one()["status"] == "RUNNING"
