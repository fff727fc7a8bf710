"""Everything the launcher and the ``seml`` command do to MongoDB and Slurm is safe to retry:
running a command twice, or again after it was killed half-way, never
duplicates or loses an experiment, and leaves no experiment PENDING without a Slurm job.

Real MongoDB and the real Slurm testbed. Every test starts from a "parked" sweep: two
experiments launched with ``wait=false`` and ``--begin=now+1hour``, so their two array tasks stay
PENDING in Slurm (nothing runs, nothing changes by itself) until a test starts them
(``scontrol update StartTime=now``). A command is interrupted half-way by putting a Slurm client
on its PATH that waits (``sbatch``, ``scontrol``, ``scancel`` or ``squeue``): once MongoDB and
that client show the command got there, its whole process group is SIGKILLed.

Covered elsewhere, not repeated here:

- the same sweep launched twice after it completed stages nothing and returns the stored
  results, a FAILED point is re-run, ``force`` stages a copy, two launches at once get distinct
  ids: ``test_main_job.py`` (``test_same_sweep_twice_stages_nothing_and_returns_stored_results``,
  ``test_failed_experiment_is_rerun_by_the_next_launch_and_force_stages_a_copy``,
  ``test_two_launches_at_once_get_distinct_ids_and_lose_nothing``);
- a second copy of an array task (duplicate or requeued job) never runs an experiment twice:
  ``test_claim.py``;
- ``hold``/``release`` with nothing pending: ``test_cli.py``; sbatch refusing a submission puts
  the experiments back to STAGED: ``test_main_job.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.mongo import snapshot_files
from support.paths import ROOT
from support.slurm import ALIVE, Blocker
from support.wait import wait_until
from typer.testing import CliRunner

from seml_hydra.cli import app

pytestmark = pytest.mark.slurm

POINTS = {1: 10, 2: 20}  # experiment id -> result of the sweep x=1,2 (gate.py returns 10 x)


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    """Keep the completion cache of the tests out of the user's home."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@dataclass
class Sweep:
    """The test's collection (its own name: its jobs' ``--comment``), and what a user runs on it."""

    db: Any
    name: str
    cwd: Path

    @property
    def coll(self) -> Any:
        return self.db[self.name]

    # -- the commands, in this process (CliRunner) or as processes to interrupt -----------------
    def launch_argv(self) -> list[str]:
        return [
            sys.executable,
            str(ROOT / "tests/apps/gate.py"),
            "-m",
            "hydra/launcher=seml",
            "hydra.launcher.wait=false",
            f"hydra.launcher.collection={self.name}",
            "+hydra.launcher.additional_parameters.begin=now+1hour",
            "x=1,2",
        ]

    def seml_argv(self, *args: str) -> list[str]:
        code = "import sys; from seml_hydra.cli import main; sys.argv[0] = 'seml'; main()"
        return [sys.executable, "-c", code, self.name, *args]

    def launch(self) -> str:
        proc = subprocess.run(
            self.launch_argv(), cwd=self.cwd, capture_output=True, text=True, timeout=300
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def seml(self, *args: str, collection: bool = True) -> str:
        argv = [self.name, *args] if collection else list(args)
        result = CliRunner().invoke(app, argv, prog_name="seml")
        assert result.exit_code == 0, (result.output, result.exception)
        return result.output

    def start(self, argv: list[str], client: Blocker) -> subprocess.Popen:
        """Start ``argv`` in its own process group with ``client`` waiting on its PATH; its
        output goes to ``killed.log`` (a pipe would keep the waiting client's output)."""
        with open(self.cwd / "killed.log", "w") as log:
            return subprocess.Popen(
                argv,
                cwd=self.cwd,
                env={**os.environ, "PATH": f"{client.bin}{os.pathsep}{os.environ['PATH']}"},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def kill_when(
        self, proc: subprocess.Popen, what: str, condition: Callable[[], Any], *, group: bool = True
    ) -> None:
        """SIGKILL ``proc`` (from :meth:`start`) as soon as ``condition`` holds, with its whole
        process group (the waiting Slurm client too) unless ``group`` is false."""

        def reached() -> Any:
            assert proc.poll() is None, (self.cwd / "killed.log").read_text()
            return condition()

        wait_until(what, reached, 120, 0.1)
        if group:
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait()  # reaped: the process is gone, as after a crash

    # -- what MongoDB and Slurm hold -----------------------------------------------------------
    def statuses(self) -> dict[int, str]:
        """``{id: status}``, after checking that no point of the sweep is stored twice."""
        docs = list(self.coll.find({}, {"status": 1, "config.x": 1}))
        points = [d["config"]["x"] for d in docs]
        assert len(points) == len(set(points)), f"a point is stored twice: {docs}"
        return {d["_id"]: d["status"] for d in docs}

    def recorded_jobs(self) -> set[str]:
        """The array tasks the documents name (``slurm[0].job_id``)."""
        return {
            d["slurm"][0]["job_id"]
            for d in self.coll.find({"slurm.0.job_id": {"$exists": True}}, {"slurm": 1})
        }

    def queue(self) -> dict[str, tuple[str, bool]]:
        """``{"<array>_<task>": (state, held)}`` of this collection's alive tasks in squeue."""
        out = subprocess.run(
            ["squeue", "-h", "-r", "-o", "%i|%T|%r|%k"], capture_output=True, text=True, check=True
        ).stdout
        rows = {}
        for line in out.splitlines():
            job, state, reason, comment = line.split("|")
            if comment == self.name and state in ALIVE:
                rows[job] = (state, "Held" in reason)
        return rows

    def restored(self) -> dict[str, bytes]:
        """The files ``restore-sources`` wrote (``{relative path: content}``)."""
        target = self.cwd / "restored"
        return {
            str(p.relative_to(target)): p.read_bytes() for p in target.rglob("*") if p.is_file()
        }

    def everything(self) -> tuple[Any, ...]:
        """All a command could change: the documents, GridFS, the tasks, the restored files."""
        docs = list(self.coll.find().sort("_id", 1))
        files = sorted(str(f["_id"]) for f in self.db["fs.files"].find({}, {"_id": 1}))
        return docs, files, self.queue(), self.restored()

    def assert_parked(self, status: str, *, held: bool = False, besides: Any = ()) -> None:
        """Both experiments in ``status``, each waiting in its own task of one array; squeue
        lists these tasks and the ones ``besides`` (``{job: (state, held)}``)."""
        assert self.statuses() == {1: status, 2: status}
        jobs = self.recorded_jobs()
        assert len(jobs) == 2 and len({job.split("_")[0] for job in jobs}) == 1, jobs
        assert self.queue() == {**{job: ("PENDING", held) for job in jobs}, **dict(besides)}

    def run_parked(self) -> None:
        """Let the queued tasks start: each experiment completes, once, in the task its
        document names."""
        for array in sorted({job.split("_")[0] for job in self.queue()}):
            subprocess.run(["scontrol", "update", f"JobId={array}", "StartTime=now"], check=True)
        wait_until(
            "both experiments complete",
            lambda: self.statuses() == {1: "COMPLETED", 2: "COMPLETED"},
        )
        for doc in self.coll.find():
            assert doc["result"] == POINTS[doc["_id"]]
            ran_in = f"{doc['execution']['array_id']}_{doc['execution']['task_id']}"
            assert ran_in == doc["slurm"][0]["job_id"]

    def cancel_jobs(self) -> None:
        """``scancel`` this collection's tasks behind seml's back and wait until they are gone."""
        jobs = sorted(self.queue())
        if jobs:
            subprocess.run(["scancel", *jobs], check=False)
            wait_until("the cancelled tasks are gone", lambda: self.queue() == {}, 60)


@pytest.fixture
def empty(slurm, test_db, tmp_path):
    """The test's collection, still empty; its tasks are cancelled at the end."""
    sweep = Sweep(test_db, f"retry_{os.getpid()}", tmp_path)
    yield sweep
    sweep.cancel_jobs()


@pytest.fixture
def sweep(empty):
    """The parked sweep: experiments 1 and 2 PENDING in the two tasks of one array."""
    out = empty.launch()
    assert "Staged 2 new experiment(s)" in out
    empty.assert_parked("PENDING")
    return empty


@pytest.fixture
def blocked(tmp_path):
    """``blocked("sbatch")``: a :class:`Blocker` for that client; opened at the end."""
    made = []

    def make(client: str, skip: int = 0) -> Blocker:
        made.append(Blocker(client, tmp_path, skip))
        return made[-1]

    yield make
    for blocker in made:
        blocker.open()


# ------------------------------------------------------------------------ twice in a row


Step = Callable[[Sweep], Any]


def seml(*args: str) -> Step:
    return lambda sweep: sweep.seml(*args)


@dataclass(frozen=True)
class Twice:
    """A command run twice on the parked sweep (after the steps ``before``): what each run says
    (``{name}``: the collection, ``{files}``: the number of files of its code snapshot) and the
    state after both: every experiment's status (None: no experiment left) and the tasks in
    squeue ("parked", "held" or none)."""

    run: Step
    first: str
    second: str
    status: str | None
    queue: str | None
    before: tuple[Step, ...] = ()


TWICE = {
    "launch": Twice(  # (the parked sweep was launched once already: three launches)
        Sweep.launch,
        "Skipped 2 point(s) already in the collection as PENDING",
        "Skipped 2 point(s) already in the collection as PENDING",
        "PENDING",
        "parked",
    ),
    "cancel": Twice(
        seml("cancel"),
        "Cancelled 2 experiment(s) (1-2), now INTERRUPTED",
        "No PENDING or RUNNING experiments to cancel.",
        "INTERRUPTED",
        None,
    ),
    "reset": Twice(
        seml("reset"),
        "Reset 2 experiment(s) to STAGED: 1-2",
        "No experiments to reset.",
        "STAGED",
        None,
        before=(seml("cancel"),),
    ),
    "start": Twice(
        seml("start"),
        "Started 2 experiment(s) (1-2) as slurm job",
        "No STAGED experiments in {name} match: nothing to start.",
        "PENDING",
        "parked",
        before=(seml("cancel"), seml("reset")),
    ),
    "delete": Twice(
        seml("delete", "-y"),
        "Deleted 2 experiment(s): 1-2",
        "No experiments to delete.",
        None,
        None,
    ),
    "hold": Twice(seml("hold"), "Held 2 pending Slurm task(s)", "Already held:", "PENDING", "held"),
    "release": Twice(
        seml("release"),
        "Released 2 Slurm task(s)",
        "Nothing held to release.",
        "PENDING",
        "parked",
        before=(seml("hold"),),
    ),
    "detect-killed": Twice(
        seml("detect-killed"),
        "Detected 2 killed experiment(s): 1-2",
        "No killed experiments detected.",
        "KILLED",
        None,
        before=(Sweep.cancel_jobs,),
    ),
    "drop": Twice(
        lambda sweep: sweep.seml("drop", sweep.name, "-y", collection=False),
        "Dropped {name}.",
        "No collection matches '{name}'.",
        None,
        None,
    ),
    "restore-sources": Twice(
        lambda sweep: sweep.seml("restore-sources", str(sweep.cwd / "restored")),
        "Restored {files} source file(s)",
        "nothing to write",
        "PENDING",
        "parked",
    ),
}


@pytest.mark.parametrize("command", list(TWICE))
def test_a_command_run_twice_changes_nothing_the_second_time(sweep, command):
    case = TWICE[command]
    for step in case.before:
        step(sweep)
    says = {
        "name": sweep.name,
        "files": len(snapshot_files(sweep.coll.database, sweep.coll.find_one())),
    }
    first = case.run(sweep)
    assert case.first.format(**says) in first
    after_first = sweep.everything()
    second = case.run(sweep)
    assert case.second.format(**says) in second
    assert sweep.everything() == after_first  # documents, GridFS, squeue, files: all unchanged
    if case.status is None:  # deleted or dropped, with their jobs and payload
        assert sweep.statuses() == {} and sweep.queue() == {}
        assert sweep.db["fs.files"].count_documents({"metadata.collection": sweep.name}) == 0
    elif case.queue is None:
        assert sweep.statuses() == {1: case.status, 2: case.status}
        assert sweep.queue() == {}
    else:
        sweep.assert_parked(case.status, held=case.queue == "held")


# ------------------------------------------------------------------------ interrupted half-way


def test_launcher_killed_before_sbatch_leaves_staged_experiments_a_relaunch_submits_once(
    empty, blocked
):
    scontrol = blocked("scontrol")  # submission asks for MaxArraySize first, after staging
    proc = empty.start(empty.launch_argv(), scontrol)
    empty.kill_when(proc, "the launcher asks Slurm for MaxArraySize", scontrol.called.exists)
    assert empty.statuses() == {1: "STAGED", 2: "STAGED"}
    assert empty.queue() == {}
    out = empty.launch()
    assert "Submitting 2 experiment(s) that were already staged: ids 1-2" in out
    assert "new experiment" not in out
    empty.assert_parked("PENDING")
    empty.run_parked()


def assert_pending_without_a_job(sweep: Sweep) -> None:
    """What a submission killed during sbatch leaves: PENDING, no job recorded, none queued."""
    assert sweep.statuses() == {1: "PENDING", 2: "PENDING"}
    assert sweep.recorded_jobs() == set()
    assert sweep.queue() == {}


@pytest.mark.parametrize("retry", ["launch again", "seml start"])
def test_launcher_killed_during_sbatch_is_submitted_again_by_the_retry(empty, blocked, retry):
    sbatch = blocked("sbatch")
    proc = empty.start(empty.launch_argv(), sbatch)
    empty.kill_when(proc, "the launcher runs sbatch", sbatch.called.exists)  # sbatch dies with it
    assert_pending_without_a_job(empty)
    out = empty.launch() if retry == "launch again" else empty.seml("start")
    assert "submission was interrupted" in out and "1-2" in out
    assert "new experiment" not in out
    empty.assert_parked("PENDING")
    empty.run_parked()


def test_seml_start_killed_during_sbatch_is_started_again(sweep, blocked):
    sweep.seml("cancel")
    sweep.seml("reset")
    sbatch = blocked("sbatch")
    proc = sweep.start(sweep.seml_argv("start"), sbatch)
    sweep.kill_when(proc, "seml start runs sbatch", sbatch.called.exists)
    assert_pending_without_a_job(sweep)
    out = sweep.seml("start")
    assert "submission was interrupted" in out and "Started 2 experiment(s) (1-2)" in out
    sweep.assert_parked("PENDING")
    sweep.run_parked()


def test_a_job_sbatch_made_after_its_launcher_died_is_cancelled_by_the_retry(empty, blocked):
    sbatch = blocked("sbatch")
    proc = empty.start(empty.launch_argv(), sbatch)
    # the launcher dies during sbatch, which lives on and submits the array: no document names
    # it, and its tasks cannot run (submitit never moved their pickles in place)
    empty.kill_when(proc, "the launcher runs sbatch", sbatch.called.exists, group=False)
    sbatch.open()
    wait_until("the orphaned sbatch's array is queued", lambda: len(empty.queue()) == 2)
    orphan = empty.queue()
    assert empty.statuses() == {1: "PENDING", 2: "PENDING"} and empty.recorded_jobs() == set()
    out = empty.launch()
    assert "2 experiment(s) whose submission was interrupted" in out
    # the recovery cancelled the orphan (no document records it; its job script lies in the
    # dead launch's submitit folder) before submitting the experiments again
    wait_until("the orphan is cancelled", lambda: not set(orphan) & set(empty.queue()), 60)
    empty.assert_parked("PENDING")
    empty.run_parked()  # the experiments complete in the new array, once


@pytest.mark.parametrize(
    "command, client, retry_says",
    [
        ("cancel", "scancel", "Slurm tasks cancelled: {tasks}"),
        ("delete", "scancel", "Deleted 2 experiment(s): 1-2"),
        ("cancel", "squeue", "No PENDING or RUNNING experiments to cancel."),
        ("delete", "squeue", "Deleted 2 experiment(s): 1-2"),
    ],
    ids=[
        "cancel-killed-before-scancel",
        "delete-killed-before-scancel",
        "cancel-killed-after-scancel",
        "delete-killed-between-cancel-and-delete",
    ],
)
def test_cancel_and_delete_killed_half_way_are_finished_by_running_them_again(
    sweep, blocked, command, client, retry_says
):
    tasks = sweep.queue()
    # scancel: killed before it; squeue: after it, while it waits (the second squeue: the first
    # asks which of the tasks are still alive, before the scancel)
    waiting = blocked(client, skip=1 if client == "squeue" else 0)
    proc = sweep.start(sweep.seml_argv(command, "-y"), waiting)
    sweep.kill_when(proc, f"seml {command} runs {client}", waiting.called.exists)
    assert sweep.statuses() == {1: "INTERRUPTED", 2: "INTERRUPTED"}
    if client == "scancel":
        assert sweep.queue() == tasks  # marked INTERRUPTED, but the tasks are still there
    else:
        wait_until("the cancelled tasks are gone", lambda: sweep.queue() == {}, 60)
    out = sweep.seml(command, "-y")
    assert retry_says.format(tasks=", ".join(sorted(tasks))) in out
    assert sweep.queue() == {}
    if command == "cancel":
        assert sweep.statuses() == {1: "INTERRUPTED", 2: "INTERRUPTED"}
    else:
        assert sweep.statuses() == {}
        assert sweep.db["fs.files"].count_documents({"metadata.collection": sweep.name}) == 0


def test_only_experiments_whose_submitting_process_is_gone_are_recovered(test_db):
    """The rule of ``recover_interrupted_submissions`` on every kind of mark, without Slurm."""
    from datetime import timedelta

    from seml_hydra.launch.marks import SUBMIT_TIMEOUT_S, submission_mark
    from seml_hydra.launch.recovery import recover_interrupted_submissions

    ended = subprocess.Popen(["true"])
    ended.wait()
    alive = submission_mark()  # this very process, submitting right now
    elsewhere = {**alive, "host": "another-login-node"}
    long_ago = alive["time"] - timedelta(seconds=SUBMIT_TIMEOUT_S + 60)
    marks = {
        1: alive,
        2: {**alive, "pid": ended.pid},  # the process ended
        3: {**alive, "started": "0"},  # another process got the pid since
        4: elsewhere,  # cannot be checked from here: still within SUBMIT_TIMEOUT_S
        5: {**elsewhere, "time": long_ago},
        6: {**alive, "pid": ended.pid},  # but a job claimed it
        7: {**alive, "pid": ended.pid},  # but its job is recorded
    }
    coll = test_db["marks"]
    coll.insert_many(
        {"_id": i, "status": "PENDING", "config": {"x": i}, "slurm": [{"submitting": mark}]}
        for i, mark in marks.items()
    )
    coll.update_one({"_id": 6}, {"$set": {"execution": {"array_id": 12, "task_id": 0}}})
    coll.update_one({"_id": 7}, {"$set": {"slurm.0.array_id": 12}})
    assert recover_interrupted_submissions(coll, {"_id": {"$ne": 3}}) == [2, 5]
    assert recover_interrupted_submissions(coll) == [3]
    assert recover_interrupted_submissions(coll) == []
    stored = {d["_id"]: (d["status"], "submitting" in d["slurm"][0]) for d in coll.find()}
    assert stored == {
        1: ("PENDING", True),
        2: ("STAGED", False),
        3: ("STAGED", False),
        4: ("PENDING", True),
        5: ("STAGED", False),
        6: ("PENDING", True),
        7: ("PENDING", True),
    }


def test_status_puts_experiments_of_a_dead_submission_back_to_staged_and_says_how_to_start(
    test_db,
):
    """``seml status`` (and ``detect-killed``) finish the recovery a relaunch would do, so such
    experiments do not look PENDING forever."""
    from typer.testing import CliRunner

    from seml_hydra.cli import app
    from seml_hydra.launch.marks import submission_mark

    ended = subprocess.Popen(["true"])
    ended.wait()
    coll = test_db["marks"]
    dead = {**submission_mark(), "pid": ended.pid}
    coll.insert_one({"_id": 1, "status": "PENDING", "slurm": [{"submitting": dead}]})
    result = CliRunner().invoke(app, ["marks", "status"])
    assert result.exit_code == 0, result.output
    assert "STAGED again; submit them with `seml marks start`" in result.output
    assert coll.find_one()["status"] == "STAGED"
    result = CliRunner().invoke(app, ["marks", "detect-killed"])
    assert "No killed experiments detected." in result.output


def test_delete_spares_the_payload_and_snapshot_of_a_launch_still_staging(test_db):
    """A launch uploads its payload and code snapshot before it inserts the documents using
    them: a ``seml delete`` at that moment removes only the files of what it deleted."""
    import gridfs

    from seml_hydra.manage.lifecycle import delete

    fs = gridfs.GridFS(test_db)
    coll = test_db["race"]

    def payload() -> str:
        meta = {"collection": "race", "kind": "seml_hydra_payload"}
        return str(fs.put(b"payload", metadata=meta))

    def source() -> str:
        meta = {"collection_name": "race", "type": "source_file"}
        return str(fs.put(b"print(1)", metadata=meta))

    old_payload, old_source = payload(), source()
    coll.insert_one(
        {
            "_id": 1,
            "status": "COMPLETED",
            "seml": {"payload_file": old_payload, "source_files": [["app.py", old_source]]},
        }
    )
    staging_payload, staging_source = payload(), source()  # no document refers to them yet
    assert delete(coll, {}).ids == [1]
    left = {str(f["_id"]) for f in test_db["fs.files"].find()}
    assert left == {staging_payload, staging_source}
