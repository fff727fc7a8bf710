"""``cancel``, ``hold`` and ``release``: the Slurm side of an experiment's life.

Only jobs whose sbatch ``--comment`` is the collection are acted on (:func:`rows_of_collection`:
a document may name any job id); experiments of another Slurm cluster are left alone
(``track.killed.without_foreign``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from seml_hydra.core import states
from seml_hydra.core.ranges import id_filter, id_sort_key
from seml_hydra.core.terminal import terminal_safe
from seml_hydra.manage.selection import ManageError
from seml_hydra.slurm import client as slurm
from seml_hydra.track import census
from seml_hydra.track.groups import Group, docs_of, ids_of, task_groups
from seml_hydra.track.jobs import (
    array_of,
    array_values,
    foreign_experiments,
    is_listed,
    is_slurm_task,
    job_sort_key,
    row_jobs,
    squeue_alive,
    task_of,
)
from seml_hydra.track.killed import without_foreign
from seml_hydra.track.query import and_

#: how long cancel waits for Slurm to end cancelled tasks before re-setting INTERRUPTED
CANCEL_WAIT_S = 60.0

#: where ``cancel`` records that the user asked for the interruption (Sacred's observer never
#: writes ``execution``; ``stage.RUN_FIELDS`` clears it on a re-run)
CANCEL_MARK = "execution.cancel_time"


def rows_of_collection(
    rows: Iterable[Any], collection_name: str
) -> tuple[list[Any], dict[str, str | None]]:
    """Split squeue rows into those of jobs of collection ``collection_name`` and the others
    (pure): ``(rows whose comment is the collection, {job or array id: its comment})``.

    The sbatch ``--comment`` of a job is its collection: our launcher and SEML both set it, and
    ``seml queue`` finds a collection's jobs by it (SEML's rule). A document names a job by a
    bare id, which any document writer may forge: ``cancel``, ``delete``, ``hold`` and
    ``release`` act only on the jobs whose comment says they belong to the collection.
    """
    ours, others = [], {}
    for row in rows:
        if row.comment == collection_name:
            ours.append(row)
        else:
            job = str(row.array_job_id if row.array_job_id is not None else row.job_id_raw)
            others[job] = row.comment
    return ours, others


def stranger_lines(strangers: Mapping[str, str | None], collection_name: str) -> list[str]:
    """One line per job of ``strangers`` (``{job id: its comment}``, see
    :func:`rows_of_collection`) saying it was left alone (pure; the comment is shown without
    terminal escapes), e.g. ``job 548 is not a job of collection X (its comment is
    'unrelated'): left alone``."""
    lines = []
    for job, comment in sorted(strangers.items(), key=lambda item: job_sort_key(item[0])):
        what = (
            "it has no comment" if comment is None else f"its comment is {terminal_safe(comment)!r}"
        )
        lines.append(
            f"job {job} is not a job of collection {terminal_safe(collection_name)} ({what}): "
            "left alone"
        )
    return lines


def our_squeue_rows(
    arrays: Sequence[str], collection_name: str, strangers: dict[str, str | None] | None
) -> list[Any]:
    """squeue rows (every task its own row) of the jobs ``arrays`` whose comment is the
    collection; the others are added to ``strangers`` (when given). Raises ``SlurmError``."""

    rows = slurm.squeue_jobs(job_ids=list(arrays), all_users=True, expand_arrays=True)
    ours, others = rows_of_collection(rows, collection_name)
    if strangers is not None:
        strangers.update(others)
    return ours


def tasks_to_cancel(
    cancelled: Sequence[Mapping[str, Any]], others_active: Sequence[Mapping[str, Any]]
) -> list[str]:
    """Slurm tasks to ``scancel`` for the experiments ``cancelled`` (pure).

    A task also assigned to an active experiment that is not being cancelled
    (``experiments_per_job > 1``) is spared: the job skips the INTERRUPTED experiments itself.
    Both are experiments of this cluster (other clusters' are left out before).
    Returns ``"<array>_<task>"`` strings, sorted, without duplicates.
    """
    # by job id alone: an unclaimed experiment's task names the cluster of its submission,
    # a claimed one's that of its job ("slurm" and the real name, for older submissions)
    spared = {task[1] for task in map(task_of, others_active) if task is not None}
    out = set()
    for doc in cancelled:
        task = task_of(doc)
        if is_slurm_task(task) and task[1] not in spared:
            out.add(task[1])
    return sorted(out, key=job_sort_key)


@dataclass
class CancelResult:
    """What :func:`cancel` did: the ids it marked INTERRUPTED, the Slurm tasks it cancelled
    (only those squeue still listed alive: a task already gone is not reported), the ids run by
    the local executor (marked, not stopped), the tasks still alive after the wait, the ids
    of an earlier unfinished cancel it finished, and the experiments of other clusters it left
    alone (``foreign``)."""

    interrupted: list[int] = field(default_factory=list)
    cancelled_tasks: list[str] = field(default_factory=list)
    local_ids: list[int] = field(default_factory=list)
    still_alive: list[str] = field(default_factory=list)
    #: experiments an earlier, unfinished cancel had marked, whose tasks were cancelled now
    finished: list[int] = field(default_factory=list)
    #: ``{cluster: ids}`` of active experiments of another Slurm cluster: left alone
    foreign: dict[str, list[int]] = field(default_factory=dict)
    #: this cluster's name, when it was asked
    cluster: str | None = None
    #: ``{job id: its comment}`` of jobs documents named that are not the collection's (their
    #: ``--comment`` differs): left alone (:func:`rows_of_collection`)
    strangers: dict[str, str | None] = field(default_factory=dict)


def held_task_rows(rows: Iterable[Any]) -> set[str]:
    """The job ids (``"<array>_<task>"``) of the squeue ``rows`` that are pending and held
    (pure): their reason names a hold (``JobHeldUser``, ``JobHeldAdmin``), so Slurm starts
    them only once someone releases them (``seml release``, ``scontrol release``)."""
    return {
        job
        for row in rows
        if row.state == "PENDING" and "held" in (row.reason or "").lower()
        for job in row_jobs(row)
    }


@dataclass(frozen=True)
class CancelFacts:
    """What ``cancel`` read before deciding (:func:`plan_cancel`).

    ``selected``: the groups (``track.groups.Group``) of the matching active experiments of this
    cluster; ``unfinished``: the groups an earlier cancel marked INTERRUPTED whose task squeue
    still listed alive (:func:`_unfinished_cancels`); ``others``: the representatives of the
    active experiments of the same arrays that are not cancelled (their tasks are spared);
    ``orphaned``: the pending tasks of SEML 0.5 arrays left without a PENDING experiment
    (:func:`_orphaned_pending_tasks`), ``"<array>_<task>"``; ``rows``: squeue's rows (every task
    its own row) of the candidate tasks' arrays whose comment is the collection."""

    selected: Sequence[Group]
    unfinished: Sequence[Group] = ()
    others: Sequence[Mapping[str, Any]] = ()
    orphaned: Sequence[str] = ()
    rows: Sequence[Any] = ()


@dataclass(frozen=True)
class CancelPlan:
    """What ``cancel`` does, decided by :func:`plan_cancel` (every id list in group order).

    ``mark``: the ids set INTERRUPTED with ``execution.cancel_time`` before the ``scancel``;
    ``scancel``: the tasks (``"<array>_<task>"``) squeue lists alive, cancelled; ``again``: the
    ids set INTERRUPTED once more after the tasks are gone (a live Sacred observer may have
    written RUNNING over the mark meanwhile); ``candidates``: every task the cancel is about,
    alive or not; ``local_ids``: the experiments of submitit's local executor (marked, their
    process is not stopped); ``finished``: the ids of ``unfinished`` whose task is cancelled
    now."""

    mark: list[Any]
    scancel: list[str]
    again: list[Any]
    candidates: list[str]
    local_ids: list[Any]
    finished: list[Any]


def _task_id(group: Group) -> str | None:
    """The job id (``"<array>_<task>"`` or ``"<job>"``) of a group's task, or None (pure)."""
    task = task_of(group.doc)
    return task[1] if task is not None else None


def candidate_tasks(
    selected: Sequence[Group],
    unfinished: Sequence[Group],
    others: Sequence[Mapping[str, Any]],
    orphaned: Sequence[str] = (),
) -> list[str]:
    """The Slurm tasks a cancel of ``selected`` (and of the ``unfinished`` earlier cancels) is
    about (pure): :func:`tasks_to_cancel` of their representatives, sparing the tasks of
    ``others``, then the ``orphaned`` SEML tasks; the caller asks squeue about these."""
    return tasks_to_cancel([*docs_of(selected), *docs_of(unfinished)], others) + list(orphaned)


def finished_ids(unfinished: Sequence[Group], candidates: Sequence[str]) -> list[Any]:
    """The ids of the ``unfinished`` earlier cancels whose task is among ``candidates``
    (:func:`candidate_tasks`): those this cancel finishes (pure)."""
    wanted = set(candidates)
    return [i for g in unfinished if _task_id(g) in wanted for i in g.ids]


def local_ids(groups: Sequence[Group]) -> list[Any]:
    """The ids of the experiments of ``groups`` run by submitit's local executor (pure)."""
    return [i for g in groups if (task_of(g.doc) or ("",))[0] == "local" for i in g.ids]


def plan_cancel(
    facts: CancelFacts, *, mark_held: bool = True, candidates: Sequence[str] | None = None
) -> CancelPlan:
    """Decide a cancel from what was read (pure): see :class:`CancelFacts` and
    :class:`CancelPlan`. ``candidates``: :func:`candidate_tasks` of ``facts``, when the caller
    computed them already (to ask squeue about them); None: computed here.

    - Only the candidate tasks (:func:`candidate_tasks`) squeue lists alive are cancelled.
    - ``mark``: every selected experiment; with ``mark_held=False`` (``delete``, which deletes
      them right after) not those whose task squeue lists pending and held
      (:func:`held_task_rows`): such a task cannot start and claim its experiment before the
      ``scancel``.
    - ``again``: the marked and finished experiments but the PENDING ones (when read) of a
      task squeue lists pending and held: no process runs them, so no observer can write
      RUNNING over the mark (one write per experiment instead of two for a held array; squeue
      is asked after the mark, and a task that ran is held again only by a requeue, which
      ends its process).
    - ``finished``: the experiments of ``unfinished`` whose task is a candidate (not spared).
    """
    held = held_task_rows(facts.rows)
    if candidates is None:
        candidates = candidate_tasks(facts.selected, facts.unfinished, facts.others, facts.orphaned)
    mark = [i for g in facts.selected if mark_held or _task_id(g) not in held for i in g.ids]
    finished = finished_ids(facts.unfinished, candidates)
    resting = {
        i
        for g in facts.selected
        if g.doc.get("status") == states.PENDING and _task_id(g) in held
        for i in g.ids
    }
    return CancelPlan(
        mark=mark,
        scancel=_alive_in(candidates, facts.rows),
        again=[i for i in [*mark, *finished] if i not in resting],
        candidates=list(candidates),
        local_ids=local_ids(facts.selected),
        finished=finished,
    )


def cancel(
    collection: Any,
    query: Mapping[str, Any],
    *,
    wait_s: float = CANCEL_WAIT_S,
    mark_held: bool = True,
    within: Sequence[Any] | None = None,
    whole: bool = False,
) -> CancelResult:
    """Interrupt the matching active experiments: INTERRUPTED (with ``execution.cancel_time``),
    ``scancel`` of exactly their array tasks, wait (at most ``wait_s``) until Slurm no longer
    lists those tasks alive, then INTERRUPTED again: Sacred's heartbeat rewrites ``status``
    until the process is gone. Tasks shared with active experiments not cancelled are spared.
    Experiments of the local executor are marked but their processes are not stopped.
    Experiments of another Slurm cluster are left alone (``foreign``): a job id there names
    another job here. What to mark and cancel is decided by :func:`plan_cancel` from what this
    step reads (:class:`CancelFacts`); this step reads, asks Slurm and applies the plan.

    Safe to run again: a cancel that stopped between marking and ``scancel`` (killed, or Slurm
    failed) is finished by the next one, which also cancels the tasks squeue still lists alive
    of the matching experiments a cancel marked INTERRUPTED (:func:`_unfinished_cancels`).
    With ``mark_held`` every experiment is marked before Slurm is asked anything.

    Only jobs whose sbatch comment is the collection are cancelled (:func:`rows_of_collection`:
    a document may name any job id); the others are reported in ``strangers``.

    ``mark_held=False`` (``lifecycle.delete``, which deletes the experiments right after): the
    experiments whose Slurm task squeue lists as held (:func:`held_task_rows`) are not marked
    INTERRUPTED, their tasks are only cancelled; the others are marked after the squeue that
    finds the tasks alive, still before the ``scancel``. A held task cannot start and claim an
    experiment before the ``scancel`` (one released meanwhile runs until then, and its
    experiment is deleted with the others), and a ``delete`` killed before its ``scancel``
    leaves them PENDING with their task held, where the next ``delete`` finds them. They are
    not in ``interrupted``. When Slurm fails, every experiment is marked before the error, as
    with ``mark_held``.

    ``within``: the ids ``query`` selects, when the caller read them (``delete``); with them, or
    with an empty ``query``, the active experiments are grouped from the census index
    (:func:`active_groups`). ``whole`` (or an empty ``query``): the selection is every
    experiment of the collection when it was read, so no active experiment outside it shares
    their tasks (one that became active since was submitted in an array of its own): the look
    for them is skipped.

    Raises ``ManageError`` when Slurm cannot be asked (after marking), pymongo errors."""

    whole = whole or not query
    groups = active_groups(collection, query, within=within)
    try:  # job ids are per cluster: another cluster's experiments are not touched from here
        groups, foreign, here = without_foreign(groups)
    except slurm.SlurmError as error:
        raise ManageError(
            f"Could not ask Slurm for its cluster name ({error}); nothing was cancelled."
        ) from None
    unfinished = _unfinished_cancels(collection, query)
    if not groups and not unfinished:
        return CancelResult(foreign=foreign, cluster=here)
    marks = _Marks(collection, ids_of(groups))
    if mark_held:  # before Slurm is asked: a cancel killed from here on is finished by the next
        marks.apply(ids_of(groups))
    others = [] if whole else _others_sharing(collection, [*groups, *unfinished], here)
    strangers: dict[str, str | None] = {}
    try:
        orphaned = _orphaned_pending_tasks(
            collection, {a for a in map(array_of, docs_of(groups)) if a}, strangers
        )
    except slurm.SlurmError:
        marks.apply_rest()
        raise
    candidates = candidate_tasks(groups, unfinished, others, orphaned)
    plan: CancelPlan | None = None
    try:
        rows = _squeue_of(candidates, collection.name, strangers) if candidates else []
        facts = CancelFacts(groups, unfinished, others, orphaned, rows)
        plan = plan_cancel(facts, mark_held=mark_held, candidates=candidates)
        marks.apply(plan.mark)
        # only tasks squeue still lists are cancelled (and reported): the others are gone
        still_alive = []
        if plan.scancel:
            slurm.scancel(plan.scancel)
            still_alive = _wait_gone(plan.scancel, wait_s, collection.name)
    except slurm.SlurmError as error:
        marks.apply_rest()
        finished = plan.finished if plan is not None else finished_ids(unfinished, candidates)
        ids = [*ids_of(groups), *finished]
        raise ManageError(
            f"Experiment(s) {', '.join(map(str, ids))} are INTERRUPTED, but Slurm could not "
            f"cancel their task(s) {', '.join(candidates)}: {error}. Run the command again to "
            "cancel them."
        ) from None
    if plan.again:
        collection.update_many(
            and_(
                id_filter(plan.again),
                {"status": {"$in": [*sorted(states.ACTIVE), states.KILLED]}},
            ),
            {"$set": {"status": states.INTERRUPTED}},
        )
    return CancelResult(
        interrupted=plan.mark,
        cancelled_tasks=plan.scancel,
        local_ids=plan.local_ids,
        still_alive=still_alive,
        finished=plan.finished,
        foreign=foreign,
        cluster=here,
        strangers=strangers,
    )


def active_groups(
    collection: Any, query: Mapping[str, Any], *, within: Sequence[Any] | None = None
) -> list[Group]:
    """The groups (``track.groups.Group``, in the order of their first id, each representative's
    ``_id`` its index) of the active experiments matching ``query``.

    With an empty ``query``, or ``within`` (the ids ``query`` selects), the keys of the
    census index (``track.census``) stand for the unclaimed experiments that name their
    ``slurm[0]`` array: what ``cancel`` reads of them (``task_of``, ``array_of``, the state)
    is in the key, so their documents are not read (:func:`census_groups`; with ``within``,
    only its ids are kept: an experiment staged since is not selected). The others (claimed:
    their task is in ``execution``; without an array in ``slurm[0]``), and every experiment
    when the census cannot answer, are grouped from their documents
    (``track.groups.task_groups``). Raises pymongo errors."""
    active = and_(query, {"status": {"$in": sorted(states.ACTIVE)}})
    found = census_groups(collection) if within is not None or not query else None
    if found is None:
        return task_groups(collection, active)
    keyed, rest = found
    if within is not None:
        wanted = set(within)
        kept = [Group(g.doc, [i for i in g.ids if i in wanted]) for g in keyed]
        keyed = [g for g in kept if g.ids]
    read = task_groups(collection, and_(query, {"$or": rest})) if rest else []
    ordered = sorted([*keyed, *read], key=lambda g: id_sort_key(g.ids[0]))
    return [Group({**g.doc, "_id": n}, g.ids) for n, g in enumerate(ordered)]


def census_groups(collection: Any) -> tuple[list[Group], list[dict[str, Any]]] | None:
    """``(groups, rest)`` of the active experiments from the census index alone: a group per
    key without ``execution.array_id`` and with ``slurm[0].array_id`` (its representative the
    key as a document, ``census.key_document``; its ids counted from the index), and the
    query (``census.key_filter``) of every other key, whose documents the caller reads (a
    ``slurm[0]`` that is not a document, which the index keys as null, is among them: see
    ``census.read_back``). None
    when the census cannot answer (no usable index, a value of another type, too many keys).
    Raises pymongo errors."""
    try:
        if not census.covered(collection):
            return None
        entries = census.walk(collection, [(s,) for s in sorted(states.ACTIVE)], len(census.FIELDS))
    except census.Unplain:
        return None
    array_at = census.FIELDS.index("slurm.0.array_id")
    claim_at = census.FIELDS.index("execution.array_id")
    keyed = [e for e in entries if e.key[claim_at] is None and e.key[array_at] is not None]
    rest = [census.key_filter(e.key) for e in entries if e not in keyed]
    groups = [
        Group(census.key_document(e.key, _id=n), list(ids))
        for n, (e, ids) in enumerate(zip(keyed, census.key_ids(collection, keyed, False)))
        if ids
    ]
    return groups, rest


class _Marks:
    """The INTERRUPTED marks of one cancel (``execution.cancel_time`` = the cancel's time), by
    id ranges (``core.ranges.id_filter``), each id written at most once (``done``: those
    written); ``ids``: every selected experiment (:meth:`apply_rest` marks those not yet
    marked)."""

    def __init__(self, collection: Any, ids: Sequence[Any]) -> None:
        self.collection = collection
        self.ids = list(ids)
        self.done: set[Any] = set()
        self.change = {"status": states.INTERRUPTED, CANCEL_MARK: datetime.now(timezone.utc)}

    def apply(self, which: Sequence[Any]) -> None:
        """Mark the active experiments among ``which`` not marked yet (one ``update_many``)."""
        todo = [i for i in which if i not in self.done]
        if todo:
            active = {"status": {"$in": sorted(states.ACTIVE)}}
            self.collection.update_many(and_(id_filter(todo), active), {"$set": self.change})
            self.done.update(todo)

    def apply_rest(self) -> None:
        """Mark every selected experiment not marked yet (on a Slurm failure)."""
        self.apply(self.ids)


def _others_sharing(collection: Any, cancelled: Sequence[Group], here: str | None) -> list[Any]:
    """The representatives of the active experiments of this cluster that are not among
    ``cancelled`` but share their Slurm arrays (their tasks are spared: ``tasks_to_cancel``).
    One aggregate by array (``track.groups.task_groups``). Raises pymongo errors."""
    arrays = sorted(
        {t[1].split("_")[0] for t in map(task_of, docs_of(cancelled)) if is_slurm_task(t)}
    )
    if not arrays:
        return []
    values = array_values(arrays)
    others = docs_of(
        task_groups(
            collection,
            {
                "$nor": [id_filter(ids_of(cancelled))],
                "status": {"$in": sorted(states.ACTIVE)},
                "$or": [
                    {"slurm.array_id": {"$in": values}},
                    {"execution.array_id": {"$in": values}},
                ],
            },
        )
    )
    if here is None:  # (unknown: a foreign task of the same id spares ours, safely)
        return others
    skipped = {i for ids in foreign_experiments(others, here).values() for i in ids}
    return [d for d in others if d["_id"] not in skipped]


def _unfinished_cancels(collection: Any, query: Mapping[str, Any]) -> list[Group]:
    """The matching experiments a cancel marked INTERRUPTED (``execution.cancel_time``) whose
    Slurm task squeue still lists alive: that cancel stopped before its ``scancel`` took effect.
    A failed squeue finds none (the cancel's own squeue then reports the problem)."""

    marked = [
        group
        for group in task_groups(
            collection, and_(query, {"status": states.INTERRUPTED, CANCEL_MARK: {"$exists": True}})
        )
        if is_slurm_task(task_of(group.doc))
    ]
    if not marked:
        return []
    try:
        marked = without_foreign(marked)[0]
        if not marked:
            return []
        jobs = sorted({task_of(g.doc)[1] for g in marked})  # type: ignore[index]
        alive = set(_alive_tasks(jobs, collection.name))
    except (slurm.SlurmError, ValueError):
        return []
    return [g for g in marked if task_of(g.doc)[1] in alive]  # type: ignore[index]


def _orphaned_pending_tasks(
    collection: Any, arrays: set[str], strangers: dict[str, str | None] | None = None
) -> list[str]:
    """The pending tasks of SEML 0.5 arrays (see ``track.jobs.array_of``) that no longer have a
    PENDING experiment to claim: SEML's ``cancel_jobs_without_experiments``. Tasks that
    started run their own experiments and are left alone, and so are jobs that are not the
    collection's (added to ``strangers``, see :func:`rows_of_collection`)."""
    if not arrays:
        return []
    waiting = {
        array
        for array in map(
            array_of,
            docs_of(
                task_groups(
                    collection,
                    {"status": states.PENDING, "slurm.array_id": {"$in": array_values(arrays)}},
                )
            ),
        )
        if array
    }
    orphaned = sorted(arrays - waiting, key=int)
    if not orphaned:
        return []
    rows = our_squeue_rows(orphaned, collection.name, strangers)
    tasks = {job for row in rows if row.state == "PENDING" for job in row_jobs(row)}
    return sorted(tasks, key=job_sort_key)


def _alive_tasks(
    tasks: Sequence[str],
    collection_name: str,
    strangers: dict[str, str | None] | None = None,
) -> list[str]:
    """The ``tasks`` squeue lists alive whose job's comment is ``collection_name``; the jobs of
    another comment are added to ``strangers`` (when given). Raises ``SlurmError``."""
    return _alive_in(tasks, _squeue_of(tasks, collection_name, strangers))


def _squeue_of(
    tasks: Sequence[str], collection_name: str, strangers: dict[str, str | None] | None
) -> list[Any]:
    """squeue rows of the arrays of ``tasks`` whose comment is the collection (the others'
    jobs added to ``strangers``, when given). Raises ``SlurmError``."""
    arrays = sorted({t.split("_")[0] for t in tasks}, key=int)
    return our_squeue_rows(arrays, collection_name, strangers)


def _alive_in(tasks: Sequence[str], rows: Sequence[Any]) -> list[str]:
    """The ``tasks`` squeue ``rows`` list alive (pure)."""
    alive = squeue_alive(rows)
    return [t for t in tasks if is_listed(t, alive)]


def _wait_gone(tasks: Sequence[str], wait_s: float, collection_name: str) -> list[str]:
    """Poll squeue until none of ``tasks`` is alive or ``wait_s`` passed; the ones still alive."""
    deadline = time.monotonic() + wait_s
    while True:
        alive = _alive_tasks(tasks, collection_name)
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.5)


def pending_tasks(
    collection: Any,
    query: Mapping[str, Any],
    strangers: dict[str, str | None] | None = None,
) -> tuple[list[str], list[str]]:
    """``(held, not held)`` pending Slurm tasks of the matching PENDING experiments of this
    cluster (those of another cluster are left out, and so are jobs whose comment is not the
    collection: added to ``strangers`` when given, see :func:`rows_of_collection`).

    Raises:
        SlurmError: squeue failed, or the cluster's name could not be asked.
    """
    q = and_(query, {"status": states.PENDING})
    # another cluster's ids name other jobs
    docs = docs_of(without_foreign(task_groups(collection, q))[0])
    tasks = {t[1] for t in map(task_of, docs) if is_slurm_task(t)}
    # SEML 0.5's pending experiments belong to their whole array (any task may claim them)
    seml_arrays = {a for a in map(array_of, docs) if a}
    if not tasks and not seml_arrays:
        return [], []
    arrays = sorted({t.split("_")[0] for t in tasks} | seml_arrays, key=int)
    held: set[str] = set()
    free: set[str] = set()
    for row in our_squeue_rows(arrays, collection.name, strangers):
        if row.state != "PENDING":
            continue
        target = held if "held" in (row.reason or "").lower() else free
        jobs = squeue_alive([row])
        if str(row.array_job_id) not in seml_arrays:
            jobs &= tasks
        target.update(jobs)
    return sorted(held, key=job_sort_key), sorted(free, key=job_sort_key)


def hold(
    collection: Any,
    query: Mapping[str, Any],
    strangers: dict[str, str | None] | None = None,
) -> tuple[list[str], list[str]]:
    """Hold the pending, not yet held tasks; returns ``(held now, already held)``. Jobs that
    are not the collection's are left alone and added to ``strangers`` (:func:`pending_tasks`)."""

    held, free = pending_tasks(collection, query, strangers)
    slurm.hold(free)
    return free, held


def release(
    collection: Any,
    query: Mapping[str, Any],
    strangers: dict[str, str | None] | None = None,
) -> list[str]:
    """Release the held pending tasks; returns them. Jobs that are not the collection's are
    left alone and added to ``strangers`` (:func:`pending_tasks`)."""

    held, _ = pending_tasks(collection, query, strangers)
    slurm.release(held)
    return held
