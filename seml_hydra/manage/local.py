"""``start --debug`` and ``start --local`` / ``launch-worker``: the checks before experiments run
in this process (``seml_hydra.job.worker`` runs them), each refusal one line (ManageError)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from seml_hydra.core import states
from seml_hydra.core.shell import seml_for
from seml_hydra.job.failfast import OFF_ON_COMMAND_LINE, max_failures_problem
from seml_hydra.job.worker import runnable_query
from seml_hydra.manage.selection import ManageError
from seml_hydra.manage.start import no_payload_message
from seml_hydra.slurm import client as slurm
from seml_hydra.track.jobs import is_slurm_task, task_of


def check_options(
    *,
    debug: bool,
    local: bool,
    post_mortem: bool,
    worker_gpus: str | None,
    sacred_id: Any,
    steal_slurm: bool = False,
    max_failures: int | None = None,
) -> None:
    """Refuse option combinations ``start`` cannot honour (pure; SEML's ``start_experiments``
    refuses the same): ``--debug`` with ``--local``, ``--debug`` without ``-id``,
    ``--post-mortem`` without ``--debug``/``--local``, ``--worker-gpus`` or ``--steal-slurm``
    without ``--local``; ``--max-failures`` below 1, or with ``--debug``/``--local`` (it
    applies to what ``start`` submits). Raises ManageError."""
    if debug and local:
        raise ManageError("--debug runs one experiment, --local a worker: use one of them.")
    if debug and sacred_id is None:
        raise ManageError("--debug runs one experiment: name it with -id N.")
    if post_mortem and not (debug or local):
        raise ManageError(
            "--post-mortem only works with --debug or --local (a Slurm job has no terminal)."
        )
    if worker_gpus is not None and not local:
        raise ManageError("--worker-gpus only works with --local (or launch-worker).")
    if steal_slurm and not local:
        raise ManageError("--steal-slurm only works with --local (or launch-worker).")
    problem = max_failures_problem(max_failures, "--max-failures", OFF_ON_COMMAND_LINE)
    if problem is not None:
        raise ManageError(f"{problem}; nothing was submitted.")
    if max_failures is not None and (debug or local):
        raise ManageError(
            "--max-failures stops what start submits to Slurm; it does not work with "
            "--debug or --local."
        )


def debug_document(collection: Any, query: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The one experiment ``start --debug`` runs: the only document matching ``query`` (the
    ``-id`` selection). Raises ManageError when none matches, it is not STAGED (SEML's old
    ``QUEUED`` counts as STAGED), or it was not staged by seml-hydra (no payload)."""
    docs = list(collection.find(query).sort("_id", 1).limit(2))
    if not docs:
        raise ManageError(f"No experiment in {name} matches the selection: nothing to debug.")
    if len(docs) > 1:
        raise ManageError("--debug runs one experiment: select exactly one with -id N.")
    doc = docs[0]
    status = states.ALIASES.get(doc.get("status"), doc.get("status"))
    if status != states.STAGED:
        raise ManageError(
            f"Experiment {doc['_id']} is {doc.get('status')}, not STAGED: --debug runs a STAGED "
            f"experiment (put it back with `{seml_for(name)} reset -id {doc['_id']}`)."
        )
    if not (doc.get("seml") or {}).get("payload_file"):
        raise ManageError(no_payload_message(doc))
    return doc


def check_runnable(
    collection: Any, query: Mapping[str, Any], name: str, *, steal_slurm: bool = False
) -> int:
    """How many experiments a worker could run from ``query`` (STAGED, with a payload; with
    ``steal_slurm`` also PENDING in a Slurm array); raises ManageError when there is none."""
    count = collection.count_documents(runnable_query(query, steal_slurm=steal_slurm))
    if not count:
        what = "STAGED or PENDING" if steal_slurm else "STAGED"
        raise ManageError(f"No {what} experiments in {name} match: nothing to run.")
    return count


@dataclass
class SlurmStealer:
    """``--steal-slurm`` (SEML's ``start_local_worker(steal_slurm=True)``): a worker also takes
    PENDING experiments whose Slurm array task has not started, and removes that task from
    the array (``scancel <array>_<task>``) once no other PENDING experiment waits for it.

    Only tasks of the collection's own jobs (``--comment`` = the collection, SEML's rule) that
    squeue lists as PENDING are taken. The claim is the worker's atomic one, so a task that
    starts meanwhile either claims the experiment first (the worker then skips it) or finds it
    RUNNING in the worker and skips it (``seml_hydra.job.claim``): it never runs twice.

    Attributes:
        collection: the pymongo collection; name: its name (the jobs' comment).
        cancelled: the Slurm tasks this stealer cancelled, in order.
        problems: one line per task it could not cancel (its task then finds nothing to run).
    """

    collection: Any
    name: str
    cancelled: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def takes(self, doc: Mapping[str, Any]) -> bool:
        """Whether PENDING ``doc``'s Slurm task is still pending in the collection's job."""
        task = task_of(doc)
        if not is_slurm_task(task):
            return False
        rows = slurm.squeue_jobs(job_ids=[task[1]], expand_arrays=True)
        return any(
            row.job_id == task[1] and row.state == states.PENDING and row.comment == self.name
            for row in rows
        )

    def taken(self, doc: Mapping[str, Any]) -> None:
        """After the claim of ``doc`` (as it was before it): ``scancel`` its task when it was
        PENDING and no other PENDING experiment of the collection waits for that task."""
        if doc.get("status") != states.PENDING:
            return
        task = task_of(doc)
        if not is_slurm_task(task):
            return
        first = doc["slurm"][0] if isinstance(doc.get("slurm"), list) else doc.get("slurm")
        if not isinstance(first, Mapping):
            return  # its task is the claim's (``execution``): nothing was submitted for it
        waiting = self.collection.count_documents(
            {
                "_id": {"$ne": doc["_id"]},
                "status": states.PENDING,
                "slurm.array_id": first.get("array_id"),
                "slurm.task_id": first.get("task_id"),
            }
        )
        if waiting:
            return
        try:
            slurm.scancel([task[1]])
        except slurm.SlurmError as error:
            self.problems.append(f"Slurm task {task[1]} not cancelled: {error}")
            return
        self.cancelled.append(task[1])
