"""Fail-fast: once ``max_failures`` experiments of one launch ended FAILED, the launch's other
experiments stop (INTERRUPTED, with the reason in ``fail_fast.reason``).

"One launch" is one submission: the experiments one launcher run (its batch, re-runs
included) or one ``seml <collection> start`` submitted with ``max_failures`` set. As it moves
them to PENDING, the submission marks each with ``fail_fast: {group, max_failures}``
(:func:`mark`; a field Sacred's observer never holds). The rule is held by the jobs, so it works
without the launcher (``wait=false``, after Ctrl-C, a launcher that died):

- the job that records a failure, and every task right after it claims an experiment, counts
  the FAILED experiments of that experiment's group (:func:`enforce`);
- at the threshold it stops the group (:func:`stop_group`): every PENDING, RUNNING or
  RESCHEDULED experiment of it becomes INTERRUPTED with the reason (also as its ``fail_trace``),
  then the Slurm tasks of those experiments are cancelled (``scancel``; only tasks squeue lists
  with the collection as their comment; not the caller's own task when it runs one rank: it
  skips the rest of its experiments itself) and, once Slurm no longer lists them, marked
  INTERRUPTED again (a run's final save may have written its outcome meanwhile; its
  heartbeats do not write over the mark: :data:`STOP_REASON`);
- a task that claimed an experiment of a stopped group does not run it;
- a run that ends COMPLETED all the same (a ``seml_local`` process, which a stop does not end;
  a Slurm task finishing within Slurm's ``KillWait`` of its ``scancel``) was not stopped: its
  mark (``fail_fast.reason``, ``stop_time``, the stop's ``fail_trace``) is dropped
  (:func:`unmark_completed`, by the job right after the run when its final save found the
  mark, or could not tell: ``job.observer.DocumentObserver.over_stop``, and by the stop once
  Slurm ended the tasks it cancelled).

Every step is idempotent: several jobs reaching the threshold at once stop the group once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Final

from seml_hydra.core import states
from seml_hydra.store.db.retry import retrying

if TYPE_CHECKING:
    from seml_hydra.core.schema import ExperimentCollection

log = logging.getLogger(__name__)

#: the document field: ``{group, max_failures}`` from the submission, ``reason`` and
#: ``stop_time`` once the group was stopped
FIELD: Final = "fail_fast"
#: set once the group was stopped: a run's heartbeats no longer write to such a document
STOP_REASON = f"{FIELD}.reason"

#: how long a stop waits for Slurm to end the tasks it cancelled (seconds), and how often it
#: asks squeue
CANCEL_WAIT_S = 60.0
CANCEL_POLL_S = 0.5


#: how a launcher field says "off" (a command-line option says it by being left out)
OFF_IN_CONFIG = "or null for no fail-fast"
OFF_ON_COMMAND_LINE = "or leave --max-failures out (each launch's own max_failures applies)"


def max_failures_problem(
    value: Any, name: str = "hydra.launcher.max_failures", off: str = OFF_IN_CONFIG
) -> str | None:
    """Why ``value`` cannot be a ``max_failures`` (pure): None when it is None (off) or an
    integer >= 1, else a one-line message naming ``name`` and ending with ``off`` (how the
    user turns it off where ``name`` is set: :data:`OFF_IN_CONFIG`, :data:`OFF_ON_COMMAND_LINE`)."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return None
    return (
        f"{name}={value!r}: must be an integer >= 1 (the number of FAILED experiments that "
        f"stops the launch's other experiments), {off}"
    )


def mark(group: str, max_failures: int | None) -> dict[str, Any] | None:
    """The ``fail_fast`` field a submission writes (pure): None when ``max_failures`` is None."""
    if max_failures is None:
        return None
    return {"group": group, "max_failures": int(max_failures)}


def reason(failed_ids: Sequence[Any]) -> str:
    """The stop's reason (pure), e.g. ``fail-fast: 2 experiments failed: ids 1, 2``."""
    ids = ", ".join(str(i) for i in failed_ids)
    if len(failed_ids) == 1:
        return f"fail-fast: 1 experiment failed: id {ids}"
    return f"fail-fast: {len(failed_ids)} experiments failed: ids {ids}"


def in_task(doc: Mapping[str, Any], task: tuple[Any, Any] | None) -> bool:
    """Whether ``doc`` is (to be) run by the array task ``task`` = ``(array_id, task_id)``
    (pure): its ``execution`` names that task, or its submission (``slurm[0]``) does."""
    if task is None:
        return False
    execution = doc.get("execution") or {}
    slurm = doc.get("slurm")
    first = slurm[0] if isinstance(slurm, list) and slurm and isinstance(slurm[0], Mapping) else {}
    return any(
        str(where.get("array_id")) == str(task[0]) and str(where.get("task_id")) == str(task[1])
        for where in (execution, first)
        if isinstance(where, Mapping) and where.get("array_id") is not None
    )


def tasks_to_cancel(
    docs: Iterable[Mapping[str, Any]], own_task: tuple[Any, Any] | None, cancel_own: bool
) -> list[str]:
    """The Slurm job ids (``slurm[0].job_id``: ``"<array>_<task>"``, or ``"<job>"`` for a
    one-task submission) to cancel for the stopped ``docs`` (pure): not those of submitit's
    local executor, and not ``own_task``'s unless ``cancel_own``. Sorted, no duplicates."""
    out = set()
    for doc in docs:
        slurm = doc.get("slurm")
        first = slurm[0] if isinstance(slurm, list) and slurm else {}
        if not isinstance(first, Mapping) or first.get("cluster") == "local":
            continue
        job = first.get("job_id")
        if job is None or (not cancel_own and in_task(doc, own_task)):
            continue
        out.add(str(job))
    return sorted(out)


def failed_ids(collection: ExperimentCollection, group: str) -> list[int]:
    """The ids of the FAILED experiments of fail-fast group ``group``, sorted."""
    query = {f"{FIELD}.group": group, "status": states.FAILED}
    return sorted(d["_id"] for d in collection.find(query, {"_id": 1}))


@dataclass
class Stop:
    """What :func:`enforce` found and did: the group's ``failed`` ids, the ``reason``, the
    ``stopped`` ids it marked INTERRUPTED and the Slurm ``cancelled`` tasks."""

    failed: list[int]
    reason: str
    stopped: list[int] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)


def enforce(
    collection: ExperimentCollection,
    fail_fast: Mapping[str, Any] | None,
    *,
    own_task: tuple[Any, Any] | None = None,
    cancel_own: bool = False,
) -> Stop | None:
    """Stop the group of ``fail_fast`` (a document's ``fail_fast`` field) when it has
    ``max_failures`` FAILED experiments (:func:`stop_group`); None when it has fewer, or when
    ``fail_fast`` names no group. ``own_task``/``cancel_own``: see :func:`tasks_to_cancel`."""
    if not isinstance(fail_fast, Mapping) or not fail_fast.get("group"):
        return None
    group, limit = str(fail_fast["group"]), fail_fast.get("max_failures")
    if max_failures_problem(limit) is not None or limit is None:
        return None
    failed = retrying(lambda: failed_ids(collection, group), "counting the failed experiments")
    if len(failed) < limit:
        return None
    return stop_group(collection, group, failed, own_task=own_task, cancel_own=cancel_own)


def stop_group(
    collection: ExperimentCollection,
    group: str,
    failed: Sequence[int],
    *,
    own_task: tuple[Any, Any] | None = None,
    cancel_own: bool = False,
    wait_s: float = CANCEL_WAIT_S,
) -> Stop:
    """Mark the active experiments of ``group`` INTERRUPTED with :func:`reason` of ``failed``
    (``fail_fast.reason``, ``fail_fast.stop_time``, ``fail_trace``), then ``scancel`` their
    Slurm tasks (:func:`tasks_to_cancel`) that squeue lists alive with the collection as their
    comment, wait (at most ``wait_s`` seconds) until Slurm no longer lists them and mark the
    stopped experiments INTERRUPTED again (a run that was starting wrote RUNNING over the mark).
    A Slurm error is logged, not raised: the experiments are INTERRUPTED already and no task
    claims them any more."""
    why = reason(list(failed))
    active = {f"{FIELD}.group": group, "status": {"$in": sorted(states.ACTIVE)}}
    docs = retrying(
        lambda: list(collection.find(active, {"slurm": 1, "execution": 1})),
        "reading the experiments to stop",
    )
    if not docs:
        return Stop(list(failed), why)
    ids = sorted(d["_id"] for d in docs)
    stamp = {
        "status": states.INTERRUPTED,
        f"{FIELD}.reason": why,
        f"{FIELD}.stop_time": datetime.now(timezone.utc),
        "fail_trace": [why + "\n"],
    }
    retrying(
        lambda: collection.update_many({**active, "_id": {"$in": ids}}, {"$set": stamp}),
        "marking the stopped experiments INTERRUPTED",
    )
    log.warning("%s: experiment(s) %s INTERRUPTED", why, ", ".join(map(str, ids)))
    stop = Stop(list(failed), why, ids)
    jobs = tasks_to_cancel(docs, own_task, cancel_own)
    if jobs:
        from seml_hydra.slurm import client as slurm

        try:
            stop.cancelled = _alive_ours(jobs, collection.name)
            if stop.cancelled:
                slurm.scancel(stop.cancelled)
                log.warning("fail-fast cancelled the Slurm task(s) %s", ", ".join(stop.cancelled))
                _wait_gone(stop.cancelled, collection.name, wait_s)
        except (slurm.SlurmError, ValueError) as error:
            log.warning("fail-fast could not cancel the Slurm task(s) %s: %s", jobs, error)
        # a run that started meanwhile: Sacred's first save wrote RUNNING over the mark (as
        # `seml cancel` does, INTERRUPTED again once its task is gone)
        retrying(
            lambda: collection.update_many(
                {
                    "_id": {"$in": ids},
                    f"{FIELD}.reason": why,
                    "status": {"$in": [*sorted(states.ACTIVE), states.KILLED]},
                },
                {"$set": {"status": states.INTERRUPTED}},
            ),
            "marking the stopped experiments INTERRUPTED again",
        )
        unmark_completed(collection, ids)  # they ended on their own before the scancel
    return stop


def unmark_completed(collection: Any, ids: Sequence[Any]) -> list[Any]:
    """Drop the stop's mark from those of ``ids`` that ended COMPLETED although their group
    was stopped (a completed run is not "stopped"): ``fail_fast.reason`` and
    ``fail_fast.stop_time`` go, and ``fail_trace`` too when it is the stop's reason (the one
    :func:`stop_group` wrote); ``fail_fast.{group, max_failures}`` stay. Each document is
    changed only while it is COMPLETED with the reason it was read with; returns the ids
    changed. Raises pymongo errors past the retry window (``store.db.retry``)."""
    query = {
        "_id": {"$in": list(ids)},
        "status": states.COMPLETED,
        STOP_REASON: {"$type": "string"},
    }
    docs = retrying(
        lambda: list(collection.find(query, {FIELD: 1, "fail_trace": 1})),
        "reading the completed experiments of a stopped launch",
    )
    changed = []
    for doc in docs:
        why = doc[FIELD]["reason"]
        drop = {STOP_REASON: "", f"{FIELD}.stop_time": ""}
        if doc.get("fail_trace") == [why + "\n"]:
            drop["fail_trace"] = ""
        where = {"_id": doc["_id"], "status": states.COMPLETED, STOP_REASON: why}

        def unset(where: dict[str, Any] = where, drop: dict[str, str] = drop) -> Any:
            return collection.update_one(where, {"$unset": drop})

        done = retrying(unset, f"dropping the fail-fast mark of experiment {doc['_id']}")
        if done.modified_count:
            changed.append(doc["_id"])
    return changed


def _alive_ours(jobs: Sequence[str], collection_name: str) -> list[str]:
    """The ``jobs`` squeue lists alive whose comment is the collection (a document may name
    any job id). Raises ``SlurmError``/``ValueError``."""
    from seml_hydra.slurm import client as slurm

    rows = slurm.squeue_jobs(job_ids=list(jobs), all_users=True, expand_arrays=True)
    alive = {r.job_id for r in rows if r.alive and r.comment == collection_name}
    return sorted(alive & set(jobs))


def _wait_gone(jobs: Sequence[str], collection_name: str, wait_s: float) -> None:
    """Poll squeue until none of ``jobs`` is alive, at most ``wait_s`` seconds."""
    import time

    deadline = time.monotonic() + wait_s
    while alive := _alive_ours(jobs, collection_name):
        if time.monotonic() >= deadline:
            log.warning("fail-fast: Slurm still lists %s after %.0f s", ", ".join(alive), wait_s)
            return
        time.sleep(CANCEL_POLL_S)
