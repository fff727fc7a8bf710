"""KILLED detection, the I/O side: :func:`detect_killed` asks squeue and sacct about the active
experiments' Slurm tasks and marks the lost ones KILLED (or INTERRUPTED when cancelled), with
the tail of their output as ``fail_trace``; :func:`mark_dead_jobs` does the same for the
launcher's own submitit jobs once submitit reports them done. The decisions are pure
(``seml_hydra.track.jobs.decide_killed``); the traces come from the one builder
``seml_hydra.track.outputs.killed_trace``.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from seml_hydra.core import states
from seml_hydra.core.parallel import run_at_once
from seml_hydra.core.processes import process_alive
from seml_hydra.core.ranges import format_ids, id_filter, id_sort_key
from seml_hydra.slurm import client as slurm
from seml_hydra.slurm.parse import is_alive
from seml_hydra.store.db.collections import CENSUS_INDEX
from seml_hydra.track import census
from seml_hydra.track.groups import (
    JUDGED_FIELDS,
    Group,
    docs_of,
    ids_of,
    numbered,
    same_as,
    task_groups,
    utc_now,
)
from seml_hydra.track.jobs import (
    UNNAMED_CLUSTERS,
    array_of,
    decide_killed,
    decide_local_killed,
    foreign_experiments,
    is_listed,
    is_slurm_task,
    job_sort_key,
    local_process,
    recorded_process_start,
    sacct_states_by_task,
    squeue_alive,
    task_of,
)
from seml_hydra.track.outputs import (
    killed_trace,
    output_file,
    read_document_output,
    read_output_tail,
)
from seml_hydra.track.query import and_

if TYPE_CHECKING:
    from pymongo.collection import Collection


@dataclass
class DetectResult:
    """What :func:`detect_killed` did: ids marked KILLED / INTERRUPTED, ids left RUNNING only
    because their heartbeat is fresh (``unsure``), ids put back to STAGED (``recovered``), ids
    left alone because they run on another cluster (``foreign``), and a warning when Slurm
    could not be asked."""

    killed: list[int] = field(default_factory=list)
    interrupted: list[int] = field(default_factory=list)
    warning: str | None = None
    #: gone from squeue, no sacct record, but a heartbeat younger than HEARTBEAT_STALE_S
    unsure: list[int] = field(default_factory=list)
    #: PENDING without a job because their submitting process died: STAGED again
    recovered: list[int] = field(default_factory=list)
    #: ``{cluster: ids}`` of active experiments of another Slurm cluster: not judged from here
    foreign: dict[str, list[int]] = field(default_factory=dict)
    #: this cluster's name, when it was asked (only for experiments naming a cluster)
    cluster: str | None = None


def recovered_message(ids: Sequence[int], then: str = "") -> str:
    """The one line saying that the experiments ``ids``, left PENDING without a Slurm job by a
    submission that died, are STAGED again (``DetectResult.recovered``,
    ``launch.submit.recover_interrupted_submissions``), e.g. ``"2 experiment(s) whose
    submission was interrupted (left PENDING without a Slurm job): 1-2 are STAGED again"``,
    followed by ``"; " + then`` when ``then`` says what to do next. Pure; for the launcher,
    its wait and the ``seml`` commands alike."""
    text = (
        f"{len(ids)} experiment(s) whose submission was interrupted (left PENDING without a "
        f"Slurm job): {format_ids(list(ids))} are STAGED again"
    )
    return f"{text}; {then}" if then else text


def detect_killed(
    collection: Any,
    query: Mapping[str, Any] | None = None,
    *,
    recover: Callable[[Any, Mapping[str, Any] | None], list[int]] | None = None,
) -> DetectResult:
    """Mark KILLED the active experiments whose Slurm task is gone (see
    ``track.jobs.decide_killed``); INTERRUPTED when the user had cancelled them; a fresh
    heartbeat without any Slurm record keeps a run RUNNING (``unsure``). A failed scheduler
    query marks nothing and returns a warning. ``fail_trace`` = what sacct said of the job and
    the last lines of ``execution.slurm_output_file`` (:func:`document_trace`). Returns a
    :class:`DetectResult`; raises pymongo errors.

    The experiments are judged per group (``track.groups.task_groups``: one aggregate; all
    experiments of a Slurm task that agree on what the decision reads are one group), and each
    lost group is marked with one ``update_many``: the time and memory grow with the number of
    Slurm tasks, not of experiments. Without ``query``, the census index vouches for the keys
    of live tasks (:func:`unvouched_entries`) and a large key it cannot vouch for is judged
    from one sample document, its experiments marked by a query instead of being read
    (:func:`sampled_groups`); the marks of many experiments go at most :data:`MARK_WORKERS` at
    once (``core.parallel.run_at_once``). Each marked experiment gets its own ``fail_trace``,
    the one its group's representative gives.

    ``recover(collection, query)``, when given, runs first and returns the ids it put back to
    STAGED (``recovered``): the launcher and ``seml`` pass
    ``seml_hydra.launch.submit.recover_interrupted_submissions`` (experiments left PENDING
    without a job by a submitting process that died), which this package cannot import.

    An experiment of another Slurm cluster (its ``execution.cluster`` / ``slurm[0].cluster``
    is neither this cluster's ``ClusterName`` nor one of ``track.jobs.UNNAMED_CLUSTERS``) is
    never judged: job ids are per cluster, so this one's squeue and sacct say nothing about it
    (``foreign``). A run outside Slurm on this host whose process is gone and whose heartbeat
    is stale is KILLED too (:func:`mark_lost_local_runs`); one of another host is left alone."""
    recovered = recover(collection, query) if recover is not None else []
    now = utc_now()
    active = and_(query or {}, {"status": {"$in": sorted(states.ACTIVE)}})
    entries = None if query else unvouched_entries(collection)
    samples: list[Sample] = []
    if entries is None:
        groups = task_groups(collection, active, now=now)
    else:  # only the experiments the census index could not vouch for
        samples, rest = sampled_groups(collection, entries, now)
        query_rest = {"$or": [census.key_filter(e.key) for e in rest]}
        read = task_groups(collection, query_rest, now=now) if rest else []
        groups = numbered([*(s.group for s in samples), *read])
    result = _judge(collection, groups, recovered, now)
    if samples:  # the experiments of a sampled key that differ from its sample
        others = task_groups(collection, {"$or": [s.others for s in samples]}, now=now)
        if others:
            result = _merged(result, _judge(collection, others, [], now), set(ids_of(others)))
    return result


def _judge(
    collection: Any, groups: list[Group], recovered: list[int], now: datetime
) -> DetectResult:
    """:func:`detect_killed` of ``groups``: the lost local runs, then the Slurm tasks."""
    local, lost_groups = mark_lost_local_runs(collection, groups, now=now)
    if lost_groups:
        groups = [g for g in groups if g.doc["_id"] not in lost_groups]
    result = _detect_slurm(collection, groups, recovered, now)
    result.killed = sorted(local + result.killed, key=id_sort_key)
    return result


def _merged(first: DetectResult, then: DetectResult, moved: set[Any]) -> DetectResult:
    """``first`` without the ids ``moved`` (judged again, from their documents, by ``then``),
    plus what ``then`` found (pure)."""

    def join(a: Sequence[Any], b: Sequence[Any]) -> list[Any]:
        return sorted([i for i in a if i not in moved] + list(b), key=id_sort_key)

    foreign = {c: join(first.foreign.get(c, []), ids) for c, ids in then.foreign.items()}
    return DetectResult(
        join(first.killed, then.killed),
        join(first.interrupted, then.interrupted),
        warning=first.warning or then.warning,
        unsure=join(first.unsure, then.unsure),
        recovered=first.recovered,
        foreign={**first.foreign, **foreign},
        cluster=first.cluster or then.cluster,
    )


#: a census key the census cannot vouch for, of at least this many experiments, is judged
#: from one of its documents (:func:`sampled_groups`); a smaller one from all of them
SAMPLED_MIN = 64
#: with more unvouched census keys than this, none is sampled (each costs four indexed
#: look-ups: many small keys are read faster as documents)
SAMPLED_KEYS_MAX = 64


@dataclass(frozen=True)
class Sample:
    """A census key judged from one of its documents: ``group``, the experiments of the key
    holding the sample's values at ``track.groups.JUDGED_FIELDS`` (``where``: the key's query
    and ``track.groups.same_as`` the sample; ``ids``: every experiment of the key), and
    ``others``, the query of the key's experiments that hold other values there."""

    group: Group
    others: dict[str, Any]


def _sample(collection: Any, first: Mapping[str, Any]) -> dict[str, Any] | None:
    """The judged fields (``track.groups.JUDGED_FIELDS``) of the document ``first`` matches,
    or None when it is not there or holds a value Python cannot hold (a date after year 9999
    another tool wrote): its key is then judged from its documents' own fields."""
    from bson.errors import InvalidBSON

    try:
        doc = collection.find_one(first, {name: 1 for name in JUDGED_FIELDS})
    except InvalidBSON:
        return None
    return None if doc is None else dict(doc)


def sampled_groups(
    collection: Any, entries: Sequence[census.Entry], now: datetime
) -> tuple[list[Sample], list[census.Entry]]:
    """``(samples, the other entries)`` of the census ``entries`` (:func:`unvouched_entries`):
    a key of at least :data:`SAMPLED_MIN` experiments (counted on the index, its ids a range
    when consecutive: ``census.ids_of_key``) is judged from its first document (its
    representative as ``track.groups.task_groups`` gives it for that document alone, read with
    the key's query: the census's candidate is read back). A lost one is then marked by one
    ``update_many`` matching the key's experiments that hold the sample's values
    (``Group.where``): no experiment of the key is read, and each one marked is one the
    documents' path would have grouped with the sample, so it gets the same state and the
    same ``fail_trace`` (sacct's record, the output's tail). The ones holding other values
    (``Sample.others``) are judged from their documents afterwards by :func:`detect_killed`.
    None is sampled when there are more than :data:`SAMPLED_KEYS_MAX` entries. Raises pymongo
    errors."""
    if len(entries) > SAMPLED_KEYS_MAX:
        return [], list(entries)
    samples: list[Sample] = []
    rest: list[census.Entry] = []
    for entry in entries:
        number, ids = census.ids_of_key(collection, entry)
        key = census.key_filter(entry.key)
        first = and_(key, {"_id": entry.first_id})
        sample = None
        if number >= SAMPLED_MIN:
            sample = _sample(collection, first)
        found = task_groups(collection, first, now=now) if sample is not None else []
        if sample is None or len(found) != 1:
            rest.append(entry)
            continue
        same = same_as(sample)
        group = Group(found[0].doc, list(ids), and_(key, {"$expr": same}))
        samples.append(Sample(group, and_(key, {"$expr": {"$not": [same]}})))
    return samples, rest


def unvouched(collection: Any) -> dict[str, Any] | None:
    """The active experiments of ``collection`` that :func:`detect_killed` must judge from
    their documents, as a query (``{"$or": [key_filter, ...]}`` of :func:`unvouched_entries`;
    ``{"$or": []}``: none), or None when the census cannot vouch for any. Raises pymongo
    errors."""
    entries = unvouched_entries(collection)
    if entries is None:
        return None
    return {"$or": [census.key_filter(e.key) for e in entries]}


def unvouched_entries(collection: Any) -> list[census.Entry] | None:
    """The census keys (``track.census.Entry``) of the active experiments of ``collection``
    that :func:`detect_killed` must judge, after the census index vouched for the others
    (``track.census``); None when it cannot (no usable index, values of other types, Slurm
    could not be asked): then all of them.

    Every distinct key of the active experiments (status, the ``slurm[0]`` job fields,
    ``execution.array_id``) is read from the index alone (:func:`seml_hydra.track.census.walk`)
    and stands for a document (``census.key_document``) that the decisions take as they take
    any experiment holding these values: an experiment without ``execution.array_id`` whose
    task (``track.jobs.task_of``) is one of this cluster's and listed alive by squeue, or whose
    SEML 0.5 array (``array_of`` of ``slurm[0]``) has a task alive, or that names no Slurm
    task ``decide_killed`` would judge, is left alone by them whatever else its document holds
    (its heartbeat, its output, its cancel mark are read only for a lost task). The others come
    back, read in the query language (``census.key_filter``) by the caller, so a key the index
    gave wrongly only sends more experiments to the full path. Raises pymongo errors."""
    try:
        if not census.covered(collection):
            return None
        entries = census.walk(collection, [(s,) for s in sorted(states.ACTIVE)], len(census.FIELDS))
        census.read_back(collection, entries)
        docs = [census.key_document(e.key, _id=i) for i, e in enumerate(entries)]
        alive = _vouched(docs)
    except (census.Unplain, slurm.SlurmError, ValueError):
        return None
    return [e for i, e in enumerate(entries) if i not in alive]


def _vouched(docs: Sequence[Mapping[str, Any]]) -> set[int]:
    """The ``_id`` s of the census documents (:func:`unvouched`) whose experiments the decisions
    leave alone: one squeue call for their arrays, ``slurm.cluster_name`` when one names a
    cluster. Raises ``SlurmError``."""
    tasks = {d["_id"]: task_of(d) for d in docs if "execution" not in d}
    named = [t for t in tasks.values() if is_slurm_task(t) and t[0] not in UNNAMED_CLUSTERS]
    here = slurm.cluster_name() if named else None
    arrays = {t[1].split("_")[0] for t in tasks.values() if is_slurm_task(t)}
    arrays |= {a for i, t in tasks.items() if t is None and (a := array_of(docs[i]))}
    alive: set[str] = set()
    if arrays:
        rows = slurm.squeue_jobs(
            job_ids=sorted(arrays, key=int), all_users=True, expand_arrays=True
        )
        alive = squeue_alive(rows)
    alive_arrays = {j.split("_")[0] for j in alive}
    out = set()
    for i, task in tasks.items():
        first = docs[i].get("slurm", [{}])[0]
        if is_slurm_task(task):
            ours = task[0] in UNNAMED_CLUSTERS or task[0] == here
            if ours and is_listed(task[1], alive):
                out.add(i)
        elif task is not None:  # the local executor's, or not a Slurm job id: never judged
            out.add(i)
        elif first.get("array_id") is not None:  # array_of reads slurm[0]: the census's
            array = array_of(docs[i])
            if array is None or array in alive_arrays:
                out.add(i)
    return out


def mark_lost_local_runs(
    collection: Any, groups: Sequence[Group], *, now: datetime | None = None
) -> tuple[list[Any], set[int]]:
    """Mark KILLED the RUNNING experiments of ``groups`` (``track.groups.Group``) run outside
    Slurm on this host whose process is gone and whose heartbeat is stale
    (``track.jobs.decide_local_killed``; the process asked with ``core.processes.process_alive``,
    with the start time the worker recorded, so a later process given the same pid does not
    count);
    ``fail_trace`` says so, then the last lines of the output file (``track.outputs.killed_trace``).
    The update requires the state read, so a result written meanwhile wins. Returns ``(the ids
    marked, the indexes of the groups found lost)``; raises pymongo errors."""
    here = socket.gethostname()
    docs = docs_of(groups)
    runs = {(p, recorded_process_start(d)) for d in docs if (p := local_process(d, here))}
    if not runs:
        return [], set()
    lost = decide_local_killed(docs, {run: process_alive(*run) for run in runs}, here, now=now)
    by_index = {g.doc["_id"]: g for g in groups}
    for index in lost:
        doc = by_index[index].doc
        head = (
            f"The local process {local_process(doc, here)} on {here} that ran the experiment "
            f"is gone while the experiment was {doc.get('status')}, and its heartbeat is stale."
        )
        path = output_file(doc)
        tails = [(path, read_document_output(doc, path, collection.name))] if path else []
        _mark(
            collection,
            by_index[index],
            {"status": states.KILLED, "fail_trace": killed_trace(head, tails)},
        )
    ids = ids_of(groups, lost)
    if not ids:
        return [], set(lost)
    marked = [
        d["_id"]
        for d in collection.find(and_(id_filter(ids), {"status": states.KILLED}), {"_id": 1})
    ]
    return marked, set(lost)


def _mark(collection: Any, group: Group, changes: Mapping[str, Any]) -> None:
    """``$set`` ``changes`` on the experiments of ``group`` still in the state read (one
    ``update_many``: a result written meanwhile wins), found by the group's query
    (``Group.where``: a sampled census key, :func:`sampled_groups`, on the census index) or
    else by their id ranges
    (``core.ranges.id_filter``: a few ``_id`` ranges, not a list of every id). A RUNNING
    experiment marked KILLED also gets ``captured_out_incomplete: true``
    (:data:`INCOMPLETE_OUTPUT`)."""
    if changes.get("status") == states.KILLED and group.doc["status"] == states.RUNNING:
        changes = {**changes, **INCOMPLETE_OUTPUT}
    if group.where is None:
        which, hint = id_filter(group.ids), None
    else:  # a census key's query: MongoDB's planner may prefer execution.array_id's index,
        # whose null keys are every unclaimed experiment (8 updates examined 800,000 documents)
        which, hint = group.where, CENSUS_INDEX
    collection.update_many(
        and_(which, {"status": group.doc["status"]}), {"$set": dict(changes)}, hint=hint
    )


#: the marks of one detection (an ``update_many`` per lost group) go at most this many at once
#: (``core.parallel.run_at_once``: mongod rewrites the documents of each on one CPU) ...
MARK_WORKERS = 4
#: ... when they mark at least this many experiments together (else one after the other)
MARK_AT_ONCE_MIN = 10_000

#: set on a RUNNING experiment marked KILLED: its job ended without its final save, so its
#: ``captured_out`` holds what the last saved heartbeat sent (``print-output`` says so; the
#: job's output file, ``print-output --slurm``, has the rest)
INCOMPLETE_OUTPUT = {"captured_out_incomplete": True}


def _detect_slurm(
    collection: Any, groups: list[Group], recovered: list[int], now: datetime
) -> DetectResult:
    """:func:`detect_killed` for the Slurm tasks of ``groups`` (the active experiments)."""
    try:
        groups, foreign, here = without_foreign(groups)
    except slurm.SlurmError as error:
        return DetectResult(
            warning=f"Could not ask Slurm for its cluster name ({error}); no experiment "
            "was marked KILLED.",
            recovered=recovered,
        )
    docs = docs_of(groups)
    tasks = {task_of(d) for d in docs}
    jobs = sorted({t[1] for t in tasks if is_slurm_task(t)})
    seml_arrays = {a for a in map(array_of, docs) if a}  # SEML 0.5's unclaimed experiments
    if not jobs and not seml_arrays:
        return DetectResult(recovered=recovered, foreign=foreign, cluster=here)
    arrays = sorted({j.split("_")[0] for j in jobs} | seml_arrays, key=int)
    try:
        rows = slurm.squeue_jobs(job_ids=arrays, all_users=True, expand_arrays=True)
        alive = squeue_alive(rows)
        alive_arrays = {j.split("_")[0] for j in alive}
        missing = [j for j in jobs if not is_listed(j, alive)]
        missing += sorted(seml_arrays - alive_arrays, key=int)
        sacct: dict[str, list[str]] = {}
        if missing:
            # the arrays too: sacct lists a task that never started only in its array's
            # record (`123_[0-3]`, e.g. a held array cancelled), not under `123_0`
            asked = sorted(set(missing) | {j.split("_")[0] for j in missing}, key=job_sort_key)
            sacct = sacct_states_by_task(slurm.sacct_jobs(asked), missing)
    except (slurm.SlurmError, ValueError) as error:
        return DetectResult(
            warning=f"Could not ask Slurm about the jobs ({error}); no experiment was marked "
            "KILLED.",
            recovered=recovered,
            foreign=foreign,
            cluster=here,
        )
    killed, interrupted, unsure = decide_killed(docs, alive, sacct, now=now)
    # an experiment waiting for any task of its SEML array is lost when no task of the array
    # is alive in squeue, nor in sacct
    for doc in docs:
        array = array_of(doc)
        if not array or array in alive_arrays:
            continue
        recorded = [st for job, sts in sacct.items() if job.split("_")[0] == array for st in sts]
        if any(is_alive(st) for st in recorded):
            continue
        cancelled = (doc.get("execution") or {}).get("cancel_time") is not None
        (interrupted if cancelled else killed).append(doc["_id"])
    by_index = {g.doc["_id"]: g for g in groups}  # (groups of other clusters are left out)
    marks: list[tuple[Group, dict[str, Any]]] = []
    for index in killed:
        doc = by_index[index].doc
        trace = document_trace(doc, collection.name, _recorded(doc, sacct))
        marks.append((by_index[index], {"status": states.KILLED, "fail_trace": trace}))
    marks += [(by_index[index], {"status": states.INTERRUPTED}) for index in interrupted]
    many = sum(len(g.ids) for g, _ in marks) >= MARK_AT_ONCE_MIN
    run_at_once([partial(_mark, collection, *m) for m in marks], MARK_WORKERS if many else 1)
    return DetectResult(
        ids_of(groups, killed),
        ids_of(groups, interrupted),
        unsure=ids_of(groups, unsure),
        recovered=recovered,
        foreign=foreign,
        cluster=here,
    )


def _recorded(doc: Mapping[str, Any], sacct: Mapping[str, list[str]]) -> list[str]:
    """sacct's states of the experiment's task (``[]`` without a task or a record)."""
    task = task_of(doc)
    return list(sacct.get(task[1], [])) if task else []


def document_trace(
    doc: Mapping[str, Any], collection_name: str, slurm_states: Sequence[str] = ()
) -> list[str]:
    """``fail_trace`` of an experiment of collection ``collection_name`` whose Slurm job is gone:
    what Slurm said of its job (``slurm_states``, from sacct), then the last lines of its
    output file (``track.outputs.output_file``, read as ``read_document_output`` allows), built
    by ``track.outputs.killed_trace``."""
    task = task_of(doc)
    ended = (
        f"ended ({', '.join(dict.fromkeys(slurm_states))})"
        if slurm_states
        else "ended (or is unknown to Slurm)"
    )
    head = (
        f"Slurm job {task[1] if task else '?'} {ended} while the experiment "
        f"was {doc.get('status')}; squeue and sacct no longer list it as alive."
    )
    path = output_file(doc)
    tails = [(path, read_document_output(doc, path, collection_name))] if path else []
    return killed_trace(head, tails)


def without_foreign(
    groups: Sequence[Group],
) -> tuple[list[Group], dict[str, list[Any]], str | None]:
    """``(groups of this cluster, {cluster: experiment ids} of the others, this cluster's
    name)`` of ``track.groups.Group`` s; the name is asked (``slurm.cluster_name``, raising
    ``SlurmError``) only when a group names a cluster (None otherwise)."""

    docs = docs_of(groups)
    if not any(is_slurm_task(t) and t[0] not in UNNAMED_CLUSTERS for t in map(task_of, docs)):
        return list(groups), {}, None
    here = slurm.cluster_name()
    foreign = {
        cluster: sorted(ids_of(groups, indexes), key=id_sort_key)
        for cluster, indexes in foreign_experiments(docs, here).items()
    }
    skipped = {i for indexes in foreign_experiments(docs, here).values() for i in indexes}
    return [g for g in groups if g.doc["_id"] not in skipped], foreign, here


def alive_killed(collection: Any, ids: Sequence[int]) -> list[int]:
    """The experiments among ``ids`` marked KILLED whose Slurm task squeue still lists alive
    (on this cluster): a KILLED this module did not decide, e.g. SEML 0.5.7's ``status``,
    whose ``detect_killed`` knows only array tasks, taking a running job for a dead one. Its
    job goes on and its observer writes the experiment's real state over it (a heartbeat
    re-asserts RUNNING), so a waiting launcher keeps waiting for it. KILLED experiments
    without a Slurm task (the local executor's), or of another cluster, are not listed.

    Returns the ids, sorted. Raises pymongo errors, and ``seml_hydra.slurm.client.SlurmError``
    when squeue (or the cluster's name) cannot be asked: the caller cannot confirm the KILLED
    then."""
    docs = list(
        collection.find(
            {"_id": {"$in": list(ids)}, "status": states.KILLED},
            {"_id": 1, "slurm": 1, "execution": 1},
        )
    )
    tasks = {d["_id"]: t for d in docs if is_slurm_task(t := task_of(d))}
    if not tasks:
        return []
    named = {t[0] for t in tasks.values()} - set(UNNAMED_CLUSTERS)
    here = slurm.cluster_name() if named else None
    tasks = {i: t for i, t in tasks.items() if t[0] in UNNAMED_CLUSTERS or t[0] == here}
    if not tasks:
        return []
    arrays = sorted({t[1].split("_")[0] for t in tasks.values()}, key=int)
    alive = squeue_alive(slurm.squeue_jobs(job_ids=arrays, all_users=True, expand_arrays=True))
    return sorted((i for i, t in tasks.items() if is_listed(t[1], alive)), key=id_sort_key)


def mark_dead_jobs(
    collection: Collection[dict[str, Any]], jobs: MutableMapping[str, tuple[Any, Sequence[int]]]
) -> list[int]:
    """Mark KILLED the experiments of finished submitit jobs that are still PENDING/RUNNING
    (the launcher's wait, for its local jobs).

    ``jobs``: job id -> (submitit Job, experiment ids); the jobs found done are removed from
    it. Only a job submitit reports as done counts; the update filter requires an active state,
    so a result written meanwhile wins. ``fail_trace``: the job's end, then the last lines of
    its stderr and stdout files (``track.outputs.killed_trace``; read as ``read_output_tail``
    allows, inside the job's submitit folder). Returns the ids marked.
    """
    marked: list[int] = []
    for job_id, (job, ids) in list(jobs.items()):
        try:
            done = job.done()
        except Exception:  # the scheduler could not be asked: decide nothing
            continue
        if not done:
            continue
        active = [
            d["_id"]
            for d in collection.find(
                {"_id": {"$in": list(ids)}, "status": {"$in": sorted(states.ACTIVE)}}, {"_id": 1}
            )
        ]
        if active:
            folder = str(job.paths.folder)
            trace = killed_trace(
                f"The job {job_id} ended (submitit state {job.state}) while the experiment was "
                "not finished.",
                [
                    (str(path), read_output_tail(str(path), folder))
                    for path in (job.paths.stderr, job.paths.stdout)
                ],
            )
            result = collection.update_many(
                {"_id": {"$in": active}, "status": {"$in": sorted(states.ACTIVE)}},
                {"$set": {"status": states.KILLED, "fail_trace": trace, **INCOMPLETE_OUTPUT}},
            )
            if result.modified_count:
                marked.extend(active)
        del jobs[job_id]
    return marked
