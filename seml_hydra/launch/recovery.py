"""Recovery of interrupted submissions: experiments a dead submitting process left PENDING
without a job go back to STAGED, and the array its sbatch may still have created is cancelled.

Run first by every launch of a sweep (for its points), by ``seml start``, ``seml status`` /
``detect-killed`` and while a launch waits; :func:`recovered_message` is what each of them tells
the user. The marks it reads are written by ``seml_hydra.launch.submit.submit_group``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from seml_hydra.core import states
from seml_hydra.launch.marks import submitter_gone
from seml_hydra.launch.sbatch import is_batch_job_name
from seml_hydra.slurm import client as slurm

log = logging.getLogger(__name__)


def recover_interrupted_submissions(
    collection: Any, query: Mapping[str, Any] | None = None
) -> list[int]:
    """Put the matching experiments whose submission died half-way back to STAGED; their ids.

    The rule: an experiment is PENDING without a Slurm job (``slurm[0].array_id``) only while
    the process submitting it waits for sbatch: ``submit.submit_group`` marks it with
    ``slurm[0].submitting`` (that process's host, pid, start time, and the time) and replaces
    the mark with the job's ids. Once the marking process is gone (SIGKILL, a closed terminal,
    a crash: see ``marks.submitter_gone``) an experiment still marked, and claimed by no job (no
    ``execution``), would stay PENDING forever: a launch of its sweep and ``seml start`` call
    this first, and submit it again. No experiment runs twice: a job the dead process's sbatch
    still created mostly cannot start a task (submitit moves its pickles into place only after
    sbatch returned), and a job claims only a PENDING experiment, atomically, so of two jobs of
    one experiment only one runs it, and a job claims a PENDING experiment only for the array
    its document records (``seml_hydra.job.claim.pending_for``). Before the experiments go back to
    STAGED, the array the dead process's sbatch may still have created is cancelled
    (:func:`cancel_orphan_arrays`): no document records it, so it would run nothing anyway.
    """
    lost_filter = {
        "status": states.PENDING,
        "slurm.0.submitting": {"$exists": True},
        "slurm.0.array_id": {"$exists": False},
        "execution": {"$exists": False},
    }
    selected = {"$and": [dict(query), lost_filter]} if query else lost_filter
    docs = list(collection.find(selected, {"slurm": 1, "batch_id": 1}).sort("_id", 1))
    lost_marks = {d["_id"]: d for d in docs if submitter_gone(d["slurm"][0]["submitting"])}
    lost = list(lost_marks)
    if lost:
        marks = [d["slurm"][0]["submitting"] for d in lost_marks.values()]
        times = [m["time"] for m in marks if isinstance(m.get("time"), datetime)]
        cancel_orphan_arrays(
            collection,
            {d.get("batch_id") for d in lost_marks.values()},
            {m.get("folder") for m in marks},
            since=min(times) if times else None,
        )
        collection.update_many(
            {"_id": {"$in": lost}, **lost_filter},
            {"$set": {"status": states.STAGED}, "$unset": {"slurm.0.submitting": ""}},
        )
    return lost


def orphan_arrays(rows: Sequence[Any], collection_name: str, batch_ids: set[Any]) -> list[str]:
    """The ids of the arrays among squeue ``rows`` (``seml_hydra.slurm.records.SqueueRow``) that a
    submission of batches ``batch_ids`` of collection ``collection_name`` made (pure):
    comment = the collection, job name ``[<prefix>_]<collection>_<batch_id>``
    (``sbatch.job_name``, ``sbatch.is_batch_job_name``); sorted numerically."""
    arrays = {
        str(row.array_job_id if row.array_job_id is not None else row.job_id_raw)
        for row in rows
        if row.comment == collection_name
        and any(is_batch_job_name(row.name, collection_name, b) for b in batch_ids)
    }
    return sorted(arrays, key=int)


#: seconds an array's ``SubmitTime`` (slurmctld's clock, whole seconds) may precede the mark of
#: the submission that made it (the submitting machine's clock, written before sbatch ran)
CLOCK_SLACK_S = 5.0


def submitted_since(record: Mapping[str, Any], since: datetime) -> bool:
    """Whether a job's ``scontrol show job`` record (``SubmitTime``, local time as scontrol
    prints it) says it was submitted at or after ``since`` (an aware or UTC-naive datetime),
    less :data:`CLOCK_SLACK_S` (pure but for the local time zone). False when the record has
    no readable ``SubmitTime``: not proved to be the submission's, so never cancelled."""
    try:
        submitted = datetime.fromisoformat(str(record.get("SubmitTime"))).astimezone()
    except ValueError:
        return False
    if since.tzinfo is None:  # pymongo returns naive UTC datetimes
        since = since.replace(tzinfo=timezone.utc)
    return submitted >= since - timedelta(seconds=CLOCK_SLACK_S)


def made_in(command: str | None, folders: set[Any]) -> bool:
    """Whether a job's ``Command`` (``scontrol show job``: the sbatch script submitit wrote) lies
    in one of the submitit ``folders`` (pure): under the folder's first part that holds no job
    id placeholder (``%j``, ``%A``...: submitit writes the script there before the id exists,
    ``submitit.core.utils.JobPaths.get_first_id_independent_folder``)."""
    from submitit.core.utils import JobPaths

    if not command:
        return False
    for folder in folders:
        if isinstance(folder, str) and folder:
            base = str(JobPaths.get_first_id_independent_folder(folder))
            if base != os.sep and command.startswith(base.rstrip(os.sep) + os.sep):
                return True
    return False


#: :func:`cancel_orphan_arrays`' default account of the arrays it cancels
DIED = (
    "submitted by a process that died before recording them; their experiments are submitted again"
)


def cancel_orphan_arrays(
    collection: Any,
    batch_ids: set[Any],
    folders: set[Any],
    *,
    since: datetime | None = None,
    why: str = DIED,
) -> list[str]:
    """Cancel the Slurm arrays of batches ``batch_ids`` of ``collection`` that no document
    records (:func:`orphan_arrays`), whose job script lies in one of the submitit
    ``folders`` of the dead submissions' marks (:func:`made_in`) and, with ``since`` (the
    earliest of those marks' times), that were submitted since then (:func:`submitted_since`):
    made by a submitter that died between ``sbatch`` and the write of the job's ids. A
    collection of the same name in another database numbers its batches from 1 too and may
    share the folder: its running array was submitted before the mark, so it is left alone.
    Returns their ids (each is logged as a warning, with ``why``).

    Only the user's own jobs are asked for (squeue), then the documents: a batch one of whose
    experiments still carries the mark of a live submitter is left out (its array may be
    waiting for that submitter's record; a mark goes only with the record, so an array squeue
    listed before the documents were read is either recorded or marked by its live
    submitter). Cancelling rather than recording: which experiments an orphan runs cannot be
    told safely from Slurm. Slurm errors are logged and nothing is cancelled (a cluster without
    Slurm, e.g. submitit's local executor).
    """
    batches = {b for b in batch_ids if b is not None}
    if not batches:
        return []
    try:
        rows = slurm.squeue_jobs()
    except (slurm.SlurmError, OSError) as error:
        log.warning("Could not look for orphan Slurm arrays of %s: %s", collection.name, error)
        return []
    marked = collection.find(
        {"batch_id": {"$in": sorted(batches)}, "slurm.0.submitting": {"$exists": True}},
        {"batch_id": 1, "slurm": 1},
    )
    busy = {d.get("batch_id") for d in marked if not submitter_gone(d["slurm"][0]["submitting"])}
    candidates = orphan_arrays(rows, collection.name, batches - busy)
    if not candidates:
        return []
    values = [int(a) for a in candidates] + candidates
    recorded = {
        str(entry.get("array_id"))
        for d in collection.find(
            {
                "$or": [
                    {"slurm.array_id": {"$in": values}},
                    {"execution.array_id": {"$in": values}},
                ]
            },
            {"slurm": 1, "execution": 1},
        )
        for entry in [*(d.get("slurm") or []), d.get("execution") or {}]
        if isinstance(entry, Mapping)
    }
    try:
        orphans = [
            a
            for a in candidates
            if a not in recorded
            and any(
                made_in(r.get("Command"), folders) and (since is None or submitted_since(r, since))
                for r in slurm.scontrol_show_job(a)
            )
        ]
        if not orphans:
            return []
        slurm.scancel(orphans)
    except slurm.SlurmError as error:
        log.warning("Could not cancel orphan Slurm array(s) %s: %s", ", ".join(orphans), error)
        return []
    log.warning(
        "Cancelled Slurm array(s) %s of collection %s: %s", ", ".join(orphans), collection.name, why
    )
    return orphans
