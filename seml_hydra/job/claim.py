"""Claiming an experiment for a rank: one atomic ``find_one_and_update`` whose filter is the
claim rule (SEML's multi-task change, plus requeued runs), waiting for an earlier run of a
requeued array task, why a claim was refused, and the fence that keeps an earlier run's writes
from undoing a later run's. The rules are pure (:func:`claim_filter`, :func:`pending_for`,
:func:`fence`); :func:`claim` and :func:`claim_after_earlier_run` talk to MongoDB."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from seml_hydra.core import attempts, states
from seml_hydra.store.db.retry import retrying

if TYPE_CHECKING:
    from seml_hydra.core.schema import ExperimentCollection, ExperimentDoc

log = logging.getLogger(__name__)


def claim_filter(
    exp_id: int, execution: Mapping[str, Any], *, stale_s: float = states.HEARTBEAT_STALE_S
) -> dict[str, Any]:
    """MongoDB filter of the claim rule (SEML's multi-task change, plus requeued runs).

    The experiment may run when it is PENDING for this job's array (:func:`pending_for`), or
    RUNNING/RESCHEDULED with this very ``execution.{cluster, array_id, task_id}`` (another rank of this job, or this array task
    requeued), under these conditions on the stored ``execution.restart`` (missing = 0) and this
    run's ``execution["restart"]`` (``slurm_env.restart_count``, missing = 0):

    - RESCHEDULED (our own time-limit requeue): stored restart <= this run's.
    - RUNNING, same restart: another rank of this very run.
    - RUNNING, smaller stored restart: an earlier run of this array task (Slurm requeued the job,
      e.g. after its node's slurmd died, while that run may live on): taken over only when it is
      dead, i.e. the latest of its ``heartbeat``, ``start_time`` and ``execution.claim_time`` is
      older than ``stale_s`` seconds (or none exists). The age is computed by the server
      (``$$NOW``) from the stored dates, so no client clock or time zone takes part.

    Anything else - COMPLETED, FAILED, another job's RUNNING experiment, a later run's, one
    PENDING for another array - does not match, so it is never run twice. Raises ``KeyError``
    when an identity key is missing.
    """
    same_job = {f"execution.{key}": execution[key] for key in ("cluster", "array_id", "task_id")}
    mine = int(execution.get("restart") or 0)
    stored = {"$ifNull": ["$execution.restart", 0]}
    last_sign = {"$max": ["$heartbeat", "$start_time", "$execution.claim_time"]}
    dead = {"$lt": [last_sign, {"$subtract": ["$$NOW", int(stale_s * 1000)]}]}
    return {
        "_id": exp_id,
        "$or": [
            {"status": states.PENDING, **pending_for(execution["array_id"])},
            {"status": states.RESCHEDULED, **same_job, "$expr": {"$lte": [stored, mine]}},
            {
                "status": states.RUNNING,
                **same_job,
                "$expr": {
                    "$or": [
                        {"$eq": [stored, mine]},
                        {"$and": [{"$lt": [stored, mine]}, dead]},
                    ]
                },
            },
        ],
    }


def pending_for(array_id: Any) -> dict[str, Any]:
    """MongoDB filter: a PENDING experiment that job array ``array_id`` may claim (pure).

    Its recorded submission (``slurm[i].array_id``: ``seml_hydra.launch.submit.submit_group`` writes
    ``slurm[0]``, SEML 0.5 the entry it submitted with; an integer, or a string) is this array,
    or none is recorded yet: between ``sbatch`` and the write of its ids the experiment carries
    only the ``slurm.0.submitting`` mark, and whichever task of the submission starts first
    claims it. An array no document records - the orphan of a submitter that died before the
    write, whose experiments were submitted again since - claims none of the experiments
    recorded in another array.
    """
    values = [array_id, str(array_id)]
    if isinstance(array_id, str) and array_id.isdigit():
        values.append(int(array_id))
    return {
        "$or": [
            {"slurm.array_id": {"$in": values}},
            {"slurm.array_id": {"$exists": False}},
        ]
    }


#: the fields :func:`claim` reads back to explain a refusal (and to tell an earlier run)
_REFUSAL_FIELDS = {"status": 1, "execution": 1, "heartbeat": 1, "start_time": 1, "slurm": 1}


def claim(
    collection: ExperimentCollection,
    exp_id: int,
    execution: Mapping[str, Any],
    *,
    record_execution: bool = True,
) -> tuple[ExperimentDoc | None, str | None]:
    """Claim experiment ``exp_id`` for this rank with one atomic ``find_one_and_update``.

    Returns ``(document after the claim, None)`` when :func:`claim_filter` matches (the document
    is then RUNNING with this job's identity, ``execution.restart`` and ``execution.claim_time``,
    an aware UTC datetime), else ``(None, why)`` and nothing was written. ``record_execution``
    (the primary rank): ``execution`` - identity plus this rank's output file paths - replaces
    the stored one; the other ranks only set the identity keys, so the document names the
    primary's output files whatever order the ranks claim in.
    """
    doc, why, _ = _claim_once(collection, exp_id, execution, record_execution=record_execution)
    return doc, why


def _claim_once(
    collection: ExperimentCollection,
    exp_id: int,
    execution: Mapping[str, Any],
    *,
    record_execution: bool,
) -> tuple[ExperimentDoc | None, str | None, ExperimentDoc | None]:
    """:func:`claim`, also returning the document as read after a refusal (None otherwise)."""
    from pymongo import ReturnDocument

    stamp: dict[str, Any] = {"restart": int(execution.get("restart") or 0), "claim_time": _utcnow()}
    update: dict[str, Any]
    if record_execution:
        update = {"status": states.RUNNING, "execution": {**execution, **stamp}}
    else:
        update = {"status": states.RUNNING}
        update.update({f"execution.{k}": execution[k] for k in ("cluster", "array_id", "task_id")})
        update.update({f"execution.{k}": v for k, v in stamp.items()})
    doc = collection.find_one_and_update(
        claim_filter(exp_id, execution),
        claim_update(update, stamp["restart"]),
        return_document=ReturnDocument.AFTER,
    )
    if doc is not None:
        return doc, None, None
    current = collection.find_one({"_id": exp_id}, _REFUSAL_FIELDS)
    if current is None:
        return None, "it no longer exists", None
    return None, _claim_refusal(current, execution), current


def claim_update(fields: Mapping[str, Any], restart: int) -> list[dict[str, Any]]:
    """The update pipeline of a claim (pure): sets ``fields`` (plain values, dotted paths
    allowed) and, when this run takes over an earlier run of the experiment - it is
    RESCHEDULED (our time-limit requeue), or RUNNING in an earlier run of this array task
    (stored ``execution.restart`` below ``restart``, see :func:`claim_filter`) - first moves
    that run into the attempt history (``core.attempts``, ``moved_by: "requeue"``) in the
    same atomic write. The first claim of a PENDING experiment and the claims of the other
    ranks of this run move nothing. The requeued run continues the same Sacred run: its
    metrics go on in the same series (they are not split by attempt)."""
    stored = {"$ifNull": ["$execution.restart", 0]}
    taken_over = {
        "$or": [
            {"$eq": ["$status", states.RESCHEDULED]},
            {"$and": [{"$eq": ["$status", states.RUNNING]}, {"$lt": [stored, restart]}]},
        ]
    }
    history = attempts.history_expression(attempts.BY_REQUEUE, when=taken_over)
    values = {name: {"$literal": value} for name, value in fields.items()}
    return [{"$set": {"attempts": history}}, {"$set": values}]


#: how long a requeued task waits for an earlier run of it that is still alive (seconds), and
#: how often it looks again
EARLIER_RUN_WAIT_S = 3600.0
EARLIER_RUN_POLL_S = 5.0


def claim_after_earlier_run(
    collection: ExperimentCollection,
    exp_id: int,
    execution: Mapping[str, Any],
    *,
    record_execution: bool = True,
    max_wait_s: float = EARLIER_RUN_WAIT_S,
    poll_s: float = EARLIER_RUN_POLL_S,
    world_size: int = 1,
) -> tuple[ExperimentDoc | None, str | None]:
    """:func:`claim`, waiting while an earlier run of this array task still runs the experiment,
    then the fail-fast check (:func:`stopped_at_claim`).

    After Slurm requeued a job whose processes live on (its node's slurmd died), the requeued
    task (larger ``execution["restart"]``) finds the experiment RUNNING in the earlier run. It
    polls every ``poll_s`` seconds until the earlier run ends it (then ``(None, "it is
    COMPLETED, not PENDING")``: nothing runs twice), or its heartbeat turns stale (then the claim
    takes it over, see :func:`claim_filter`), at most ``max_wait_s`` seconds (then ``(None,
    why)``: the earlier run keeps it). Returns what :func:`claim` returns; ``(None, the
    fail-fast reason)`` when the experiment's launch reached its ``max_failures`` (then the
    experiment is INTERRUPTED: :func:`stopped_at_claim`, ``world_size`` this job's ranks).
    """
    deadline = time.monotonic() + max_wait_s
    waited = False
    while True:
        # repeating the claim is safe: once it applied, the document is RUNNING in this very
        # run, which the claim filter accepts again
        doc, why, current = retrying(
            lambda: _claim_once(collection, exp_id, execution, record_execution=record_execution),
            f"claiming experiment {exp_id}",
        )
        if doc is not None or current is None or not _earlier_run(current, execution):
            if waited:
                log.warning("Experiment %s: done waiting for the earlier run", exp_id)
            if doc is not None:
                stopped = stopped_at_claim(collection, doc, execution, world_size)
                if stopped is not None:
                    return None, stopped
            return doc, why
        if time.monotonic() >= deadline:
            return None, f"{why}; gave up waiting after {max_wait_s:.0f} s"
        if not waited:
            log.warning(
                "Experiment %s %s: waiting until it ends, or until its heartbeat is older than "
                "%.0f s (then this run takes over), at most %.0f s",
                exp_id,
                why,
                states.HEARTBEAT_STALE_S,
                max_wait_s,
            )
            waited = True
        time.sleep(poll_s)


def stopped_at_claim(
    collection: ExperimentCollection,
    doc: Mapping[str, Any],
    execution: Mapping[str, Any],
    world_size: int = 1,
) -> str | None:
    """The fail-fast check of a task that just claimed ``doc``: when the FAILED experiments of
    its launch (``doc["fail_fast"]``, ``seml_hydra.job.failfast``) reached ``max_failures``, the
    launch is stopped (``failfast.enforce``: this experiment too is INTERRUPTED) and the reason
    is returned, so the task does not run it; else None (no query without ``fail_fast``).

    So a task that starts after the threshold never runs, with or without the launcher. A job of
    several ranks (``world_size`` > 1) has its own Slurm task cancelled as well: every rank ends,
    none is left waiting for another in a collective."""
    from seml_hydra.job import failfast

    fail_fast = doc.get(failfast.FIELD)
    if not fail_fast:
        return None
    own = (execution.get("array_id"), execution.get("task_id"))
    stop = failfast.enforce(collection, fail_fast, own_task=own, cancel_own=world_size > 1)
    return None if stop is None else stop.reason


def _earlier_run(current: Mapping[str, Any], execution: Mapping[str, Any]) -> bool:
    """Whether ``current`` is RUNNING in an earlier run (smaller restart count) of this very
    array task (pure)."""
    stored = current.get("execution") or {}
    if current.get("status") != states.RUNNING or not isinstance(stored, Mapping):
        return False
    if any(stored.get(k) != execution[k] for k in ("cluster", "array_id", "task_id")):
        return False
    return int(stored.get("restart") or 0) < int(execution.get("restart") or 0)


def _claim_refusal(current: Mapping[str, Any], execution: Mapping[str, Any]) -> str:
    """Why :func:`claim_filter` did not match ``current`` (pure; a one-line reason)."""
    status = current.get("status")
    if status == states.PENDING:
        slurm = current.get("slurm")
        arrays = sorted(
            {str(e["array_id"]) for e in slurm if isinstance(e, Mapping) and "array_id" in e}
            if isinstance(slurm, list)
            else set()
        )
        return (
            f"it is PENDING for job {', '.join(arrays) or '?'}, not for this job "
            f"{execution['array_id']}"
        )
    if status not in (states.RUNNING, states.RESCHEDULED):
        return f"it is {status}, not PENDING"
    ex = current.get("execution") or {}
    if all(ex.get(k) == execution[k] for k in ("cluster", "array_id", "task_id")):
        stored, mine = int(ex.get("restart") or 0), int(execution.get("restart") or 0)
        if _earlier_run(current, execution):
            sign = current.get("heartbeat") or current.get("start_time") or ex.get("claim_time")
            return (
                f"still runs in an earlier run of this array task (Slurm restart {stored}, this "
                f"run is restart {mine}; its last sign of life: "
                f"{f'{sign} UTC' if sign else 'none recorded'})"
            )
        return f"it is {status} in a later run of this array task (restart {stored} > {mine})"
    return (
        f"it is {status} in job {ex.get('array_id')}_{ex.get('task_id')} "
        f"on {ex.get('cluster')}, not this job"
    )


def fence(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Filter that keeps this run's writes to the claimed ``doc`` from undoing a later run's
    (pure): once a requeued run of the same array task has taken the experiment over
    (:func:`claim_filter`, larger ``execution.restart``), an earlier run that lives on writes
    nothing any more."""
    restart = int((doc.get("execution") or {}).get("restart") or 0)
    return {"execution.restart": {"$not": {"$gt": restart}}}


def _utcnow() -> datetime:
    return datetime.now(timezone.utc)
