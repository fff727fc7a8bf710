"""Running experiments in this process instead of a Slurm job: SEML's local worker
(``seml <collection> start --local``, ``launch-worker``) and its debug run (``start --debug``).

SEML (``commands/start.py``, ``start_local_worker``) takes experiments from the database one
after another, each with an atomic ``find_one_and_update`` to RUNNING with ``execution.cluster =
"local"``, so several workers never take the same one; ``--worker-gpus`` sets
``CUDA_VISIBLE_DEVICES`` for the worker. Here the experiment is claimed the same way
(:func:`staged_claim_filter`: it must still be STAGED), then run exactly as an array task runs
it (``seml_hydra.job.runner.JobRunner``: rank plan, code snapshot, Sacred-observed run,
resource statistics), as rank 0 of a one-task job of submitit's local executor
(:func:`local_job_environment`), in the directory it was launched from (``seml.working_dir``).
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Protocol

from seml_hydra.core import states
from seml_hydra.core.documents import point_hydra_node
from seml_hydra.core.processes import process_start
from seml_hydra.core.schema import experiment_collection
from seml_hydra.core.scoped import temporarily
from seml_hydra.job.runner import JobRunner
from seml_hydra.store.db.retry import retrying
from seml_hydra.store.payload import hydra_base

if TYPE_CHECKING:
    from seml_hydra.core.schema import Database, ExperimentCollection, ExperimentDoc

#: ``execution.cluster`` of an experiment a worker runs (SEML's, and submitit's local executor's)
LOCAL_CLUSTER = "local"


#: the states a worker takes: STAGED and SEML's old spelling of it (``QUEUED``)
STAGED_STATES = [states.STAGED, *(k for k, v in states.ALIASES.items() if v == states.STAGED)]


def _takeable(steal_slurm: bool) -> dict[str, Any]:
    """The status condition of what a worker takes (pure): STAGED; with ``steal_slurm`` also
    PENDING with a recorded Slurm submission (``slurm.array_id``)."""
    staged = {"status": {"$in": STAGED_STATES}}
    if not steal_slurm:
        return staged
    return {"$or": [staged, {"status": states.PENDING, "slurm.array_id": {"$exists": True}}]}


def staged_claim_filter(exp_id: Any, *, steal_slurm: bool = False) -> dict[str, Any]:
    """MongoDB filter a worker claims ``exp_id`` with (pure): it is STAGED (or SEML's old
    spelling ``QUEUED``), or with ``steal_slurm`` PENDING in a Slurm array. Once one worker's
    ``find_one_and_update`` made it RUNNING, the filter matches no more, so no second worker
    takes it, and a Slurm task that starts later finds it RUNNING elsewhere and skips it
    (``seml_hydra.job.claim.claim_filter``)."""
    return {"_id": exp_id, **_takeable(steal_slurm)}


def runnable_query(query: Mapping[str, Any], *, steal_slurm: bool = False) -> dict[str, Any]:
    """``query`` limited to the experiments a worker can run (pure): those of
    :func:`staged_claim_filter` staged by the seml-hydra launcher (with ``seml.payload_file``;
    SEML's own are started by SEML)."""
    return {"$and": [dict(query), _takeable(steal_slurm), {"seml.payload_file": {"$exists": True}}]}


def local_job_environment(pid: int, gpus: str | None = None) -> dict[str, str]:
    """The variables that make this process rank 0 of a one-task local job (pure), as submitit's
    ``LocalExecutor`` sets them (``seml_hydra.job.slurm_env.placement`` reads them; the
    experiment's ``execution`` is then ``{"cluster": "local", "array_id": pid, "task_id": 0}``,
    which ``seml status`` does not look for in Slurm). ``gpus`` (e.g. ``"0,1"``): also
    ``CUDA_VISIBLE_DEVICES``, SEML's ``--worker-gpus``."""
    env = {
        "SUBMITIT_EXECUTOR": "local",
        "SUBMITIT_LOCAL_JOB_ID": str(pid),
        "SUBMITIT_LOCAL_NTASKS": "1",
        "SUBMITIT_LOCAL_JOB_NUM_NODES": "1",
        "SUBMITIT_LOCAL_GLOBALID": "0",
        "SUBMITIT_LOCAL_LOCALID": "0",
        "SUBMITIT_LOCAL_NODEID": "0",
    }
    if gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = gpus
    return env


def local_execution(pid: int, hostname: str, started: str | None) -> dict[str, Any]:
    """The ``execution`` a worker claims an experiment with (pure): SEML's ``{"cluster":
    "local", "array_id": pid, "task_id": 0}``, plus ``hostname`` (this host, as Sacred's
    ``host.hostname`` names it later) and ``process_start`` (``core.processes.process_start``
    of ``pid``), so that ``seml status`` can tell, already before Sacred has started the run,
    that a SIGKILLed worker is gone even when a later process got its pid
    (``seml_hydra.track.jobs.decide_local_killed``). ``started`` None (no such process, or
    unknown): not recorded."""
    execution: dict[str, Any] = {"cluster": LOCAL_CLUSTER, "array_id": pid, "task_id": 0}
    execution["hostname"] = hostname
    if started:
        execution["process_start"] = started
    return execution


@contextlib.contextmanager
def working_directory(path: str | None) -> Iterator[None]:
    """Run inside ``path`` (the launch's directory) when it exists, as a job does."""
    old = os.getcwd()
    if path and os.path.isdir(path):
        os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


@dataclass
class LocalRunner(JobRunner):
    """A :class:`~seml_hydra.job.runner.JobRunner` that claims STAGED experiments
    (:func:`staged_claim_filter`) instead of PENDING ones of a Slurm array.

    Attributes (beyond JobRunner's):
        post_mortem: open ``pdb.post_mortem`` on the task's exception, before the failure is
            recorded (SEML's ``--post-mortem``).
        steal_slurm: also claim an experiment PENDING in a Slurm array.
        on_claimed: called with the document as it was before a successful claim (a stolen
            one still names its Slurm task there).
    """

    post_mortem: bool = False
    steal_slurm: bool = False
    on_claimed: Callable[[Mapping[str, Any]], None] | None = None

    def _claim(
        self, collection: ExperimentCollection, exp_id: int, execution: dict[str, Any]
    ) -> tuple[ExperimentDoc | None, str | None]:
        """One atomic ``find_one_and_update`` STAGED -> RUNNING with this worker's
        ``execution`` (``restart`` 0, ``claim_time`` an aware UTC datetime); ``(None, why)``
        when it is not STAGED (any more)."""
        from pymongo import ReturnDocument

        stamp = {"restart": 0, "claim_time": datetime.now(timezone.utc)}
        before = retrying(
            lambda: collection.find_one_and_update(
                staged_claim_filter(exp_id, steal_slurm=self.steal_slurm),
                {"$set": {"status": states.RUNNING, "execution": {**execution, **stamp}}},
                return_document=ReturnDocument.BEFORE,
            ),
            f"claiming experiment {exp_id}",
        )
        doc = None if before is None else collection.find_one({"_id": exp_id})
        if doc is not None:
            if self.on_claimed is not None and before is not None:
                self.on_claimed(before)
            return doc, None
        current = collection.find_one({"_id": exp_id}, {"status": 1})
        if current is None:
            return None, "it no longer exists"
        return None, f"it is {current.get('status')}, not STAGED"

    def _on_task_error(self) -> None:
        if self.post_mortem:
            import pdb

            pdb.post_mortem(sys.exc_info()[2])


def runner_for(
    db: Database, collection_name: str, doc: Mapping[str, Any], **kwargs: Any
) -> LocalRunner:
    """The :class:`LocalRunner` of document ``doc``: its payload and the log levels and
    ``max_requeues`` of its launcher node (the payload's base Hydra node with the document's
    diff, as ``seml_hydra.launch.submit`` reads them for a job). ``kwargs``: more fields
    (``post_mortem``). Raises ``AttributeError`` when the payload is gone, pymongo errors."""
    payload = doc["seml"]["payload_file"]
    node = point_hydra_node(hydra_base(db, payload), doc.get("hydra"))
    launcher = node.get("launcher") or {}
    return LocalRunner(
        db_cfg=None,
        collection=collection_name,
        payload_id=payload,
        primary_log_level=str(launcher.get("primary_log_level", "INFO")),
        other_log_level=str(launcher.get("other_log_level", "ERROR")),
        max_requeues=int(launcher.get("max_requeues", 3)),
        **kwargs,
    )


def run_local(
    db: Database,
    collection_name: str,
    doc: Mapping[str, Any],
    *,
    pid: int,
    post_mortem: bool = False,
    steal_slurm: bool = False,
    on_claimed: Callable[[Mapping[str, Any]], None] | None = None,
) -> str:
    """Claim and run experiment ``doc`` (a STAGED document) in this process; returns its outcome
    (``"COMPLETED"``, ``"FAILED"`` or ``"SKIPPED: why"`` when another worker or job took it).
    ``steal_slurm``: it may also be PENDING in a Slurm array (its claim takes it from there).
    The caller sets :func:`local_job_environment` (``pid``: this worker's id)."""
    runner = runner_for(
        db,
        collection_name,
        doc,
        post_mortem=post_mortem,
        steal_slurm=steal_slurm,
        on_claimed=on_claimed,
    )
    execution = local_execution(pid, socket.gethostname(), process_start(pid))
    with working_directory((doc.get("seml") or {}).get("working_dir")):
        return runner._run_one(
            db, experiment_collection(db, collection_name), doc["_id"], execution
        )


class Stealing(Protocol):
    """What ``--steal-slurm`` asks about PENDING experiments (``seml_hydra.manage.local``)."""

    def takes(self, doc: Mapping[str, Any]) -> bool:
        """Whether the worker may take PENDING ``doc``: its Slurm task has not started."""

    def taken(self, doc: Mapping[str, Any]) -> None:
        """After the claim of ``doc`` (as it was before): remove its task from the array."""


@dataclass
class WorkerReport:
    """What a worker did: ``ran`` the ``(exp_id, outcome)`` of each experiment it claimed, in
    order, and ``skipped`` the ids another worker took between its look and its claim."""

    ran: list[tuple[Any, str]] = field(default_factory=list)
    skipped: list[Any] = field(default_factory=list)


def run_worker(
    db: Database,
    collection_name: str,
    query: Mapping[str, Any],
    *,
    limit: int = 0,
    gpus: str | None = None,
    post_mortem: bool = False,
    on_start: Callable[[Any], None] = lambda exp_id: None,
    steal: Stealing | None = None,
) -> WorkerReport:
    """Run the STAGED experiments matching ``query`` one after another, lowest ``_id`` first,
    until none is left or ``limit`` (> 0) ran; each claimed atomically, so workers running at
    the same time on one collection never run one twice. ``gpus``: ``CUDA_VISIBLE_DEVICES`` of
    this worker; ``on_start(exp_id)`` is called before each run (the CLI prints a line).
    ``steal`` (SEML's ``--steal-slurm``): also take PENDING experiments of Slurm arrays that
    ``steal.takes(doc)`` accepts (their task has not started); ``steal.taken(doc)`` is called
    after the claim (it removes the task from the array). Returns a :class:`WorkerReport`."""
    collection = db[collection_name]
    report = WorkerReport()
    pid = os.getpid()
    passed: list[Any] = []  # PENDING ones ``steal`` refused: their task runs
    with temporarily(os.environ, local_job_environment(pid, gpus)):
        while limit <= 0 or len(report.ran) < limit:
            q = runnable_query(query, steal_slurm=steal is not None)
            q["$and"].append({"_id": {"$nin": passed}})
            doc = collection.find_one(q, sort=[("_id", 1)])
            if doc is None:
                break
            if doc.get("status") == states.PENDING:
                if steal is None or not steal.takes(doc):
                    passed.append(doc["_id"])
                    continue
            on_start(doc["_id"])
            outcome = run_local(
                db,
                collection_name,
                doc,
                pid=pid,
                post_mortem=post_mortem,
                steal_slurm=steal is not None,
                on_claimed=steal.taken if steal is not None else None,
            )
            if outcome.startswith("SKIPPED"):
                report.skipped.append(doc["_id"])
                continue
            report.ran.append((doc["_id"], outcome))
    return report
