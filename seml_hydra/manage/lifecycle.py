"""``reset``, ``delete`` and ``drop``: putting experiments back to STAGED, and removing them
with what they left in the database (Sacred's files, metrics, code snapshots, payloads)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from seml_hydra.core import attempts, states
from seml_hydra.core.parallel import run_at_once
from seml_hydra.core.ranges import id_filter, id_slices
from seml_hydra.launch.stage import RUN_FIELDS
from seml_hydra.manage.cancel import CancelResult, cancel
from seml_hydra.manage.selection import ManageError
from seml_hydra.store.db.collections import COUNTERS_COLLECTION, metrics_collection_name
from seml_hydra.store.metrics import delete_metrics, tag_metrics
from seml_hydra.store.payload import delete_orphan_payloads, payload_ids, restricted_to
from seml_hydra.store.snapshot import sources
from seml_hydra.track.cache import forget_cached_collections, is_listed_collection
from seml_hydra.track.census import id_block
from seml_hydra.track.query import and_, select

#: the ``slurm[i]`` fields a submission writes (ours, and SEML 0.5's ``reschedule_file``);
#: cleared on reset (a reset experiment has no job)
SLURM_JOB_FIELDS = (
    "array_id",
    "task_id",
    "job_id",
    "num_tasks",
    "output_files_template",
    "reschedule_file",
    "submitting",
)

#: sbatch options a submission sets itself; removed on reset, as SEML's ``reset_slurm_dict``
SUBMISSION_SBATCH_OPTIONS = ("job-name", "output", "array", "comment")


@dataclass
class ResetResult:
    """What :func:`reset` did: ``ids``, the experiments set back to STAGED; ``moved``, those
    of them whose run went into their attempt history (every one that had left STAGED)."""

    ids: list[int] = field(default_factory=list)
    moved: list[int] = field(default_factory=list)


#: the fields :func:`reset` reads of each experiment: the number of its current run (the last
#: history entry's + 1, computed by the server: the entries themselves are not read) and the
#: metric ids of SEML's runs
_RESET_FIELDS = {
    "_id": 1,
    "status": 1,
    "info.metrics": 1,
    "last_attempt": attempts.LAST_NUMBER,
}


def reset_unset_fields() -> list[str]:
    """The fields a reset removes (pure): the run's (``launch.stage.RUN_FIELDS``), the job of
    every ``slurm`` entry (:data:`SLURM_JOB_FIELDS`) and the sbatch options the submission set
    (:data:`SUBMISSION_SBATCH_OPTIONS`); the ``slurm`` paths go through the array, so they
    apply to every entry (SEML 0.5 writes the job into the entry it submitted with)."""
    return [
        *RUN_FIELDS,
        *(f"slurm.{name}" for name in SLURM_JOB_FIELDS),
        *(f"slurm.sbatch_options.{o}" for o in SUBMISSION_SBATCH_OPTIONS),
    ]


def reset(collection: Any, query: Mapping[str, Any]) -> ResetResult:
    """Set the matching experiments back to STAGED, clearing what their run wrote (Sacred's
    fields, ``execution``, the job of every ``slurm`` entry and the sbatch options the
    submission set: what SEML 0.5's reset keeps is kept). Active experiments are never reset.

    The run of each one that had left STAGED is moved into its ``attempts`` history
    (``core.attempts``: status, times, host, job, output file, the fail trace's tail; the
    last 20 kept) by the same write that resets it: one ``update_many`` with an update
    pipeline. Its metrics are kept, tagged with the attempt's number
    (``store.metrics.tag_metrics``): the next run's start new documents. Returns a
    :class:`ResetResult`. Raises pymongo errors."""

    q = and_(query, {"status": {"$nin": sorted(states.ACTIVE)}})
    docs = select(collection, q, _RESET_FIELDS)
    ids = [d["_id"] for d in docs]
    if not ids:
        return ResetResult()
    collection.update_many(
        and_(id_filter(ids), {"status": {"$nin": sorted(states.ACTIVE)}}),
        attempts.move_pipeline(attempts.BY_RESET, {"status": states.STAGED}, reset_unset_fields()),
    )
    ran = [
        {**d, "attempt": attempts.number_after(d.get("last_attempt"))}
        for d in docs
        if states.ALIASES.get(str(d.get("status")), d.get("status")) != states.STAGED
    ]
    tag_metrics(collection.database, collection.name, ran)
    return ResetResult(ids, [d["_id"] for d in ran])


@dataclass
class DeleteResult:
    """What :func:`delete` did: the ids deleted, and the :class:`CancelResult` of cancelling
    them first (None with ``cancel_first=False`` or when nothing matched)."""

    ids: list[int] = field(default_factory=list)
    cancel: CancelResult | None = None


#: a ``delete`` of more experiments than this sends its ``delete_many`` as several, of
#: consecutive id slices of at least this many experiments each, at most
#: :data:`DELETE_PARTS` at once (:func:`delete_ids`)
DELETE_PART_MIN = 10_000
#: at most this many ``delete_many`` of one ``delete`` run at once
DELETE_PARTS = 4


def delete(collection: Any, query: Mapping[str, Any], *, cancel_first: bool = True) -> DeleteResult:
    """Delete the matching experiments (cancelling the active ones first unless
    ``cancel_first`` is False) and the GridFS payloads no experiment refers to any more.

    The cancel (``manage.cancel.cancel`` with ``mark_held=False``) marks INTERRUPTED only the
    experiments whose Slurm task is not held: those of a held task cannot be claimed before its
    ``scancel``, and a ``delete`` killed half-way leaves them PENDING for the next one.

    The experiments are selected once, then cancelled and deleted by id: cancelling changes
    their status (INTERRUPTED), so a selection by state (``delete -s RUNNING``) made again
    after the cancel would match none of them. The ids go to MongoDB as ranges
    (``core.ranges.id_filter``: a selection of 100,000 experiments is a few ``_id`` ranges, not
    a 0.8 MB ``$in`` the server seeks id by id). The selection is read once, by the aggregate
    of what the experiments left in the database (:func:`run_leftovers`), which also counts
    them and gives their smallest and largest ``_id``: when they are consecutive integers (the
    usual selection: a whole collection, a launch) their ids are that range and no document is
    read for its id; otherwise, and for a selection by a field an experiment's state changes
    (``status``: an aggregate is no snapshot, one that moves in the index while it is read is
    counted twice, which could make a gap look filled), the ids are read (``_id`` only). A
    filter with ``$where`` (not allowed in an aggregate) reads its ids first. The documents
    of the runs that stored files or metrics are read for these; the metrics of every deleted experiment (by ``run_id`` and
    ``attempt_of``) are deleted by id ranges. The documents go by :func:`delete_ids` (several
    ``delete_many`` at once for a large selection). Raises ``ManageError`` (Slurm could not be
    asked: nothing is deleted) and pymongo errors."""
    # $where is not allowed in an aggregate's $match: such a selection's ids are read first
    ids: Sequence[Any] | None = _read_ids(collection, query) if "$where" in query else None
    selection = query if ids is None else id_filter(ids)
    leftovers = run_leftovers(collection, selection, span=_selects_by_fixed_fields(query))
    if ids is None:
        ids = leftovers.ids if leftovers.ids is not None else _read_ids(collection, query)
    if not ids:
        return DeleteResult()
    by_id = id_filter(ids)
    # experiments of held tasks are not marked INTERRUPTED first: they go a moment later
    cancelled = (
        cancel(collection, by_id, mark_held=False, within=ids, whole=not query)
        if cancel_first
        else None
    )
    delete_ids(collection, ids)
    # only files the deleted experiments used: a launch staging into the collection right
    # now has uploaded its payload and snapshot before inserting the documents using them
    snapshot = {str(e[1]) for d in leftovers.seml for e in _source_files(d) if len(e) > 1}
    snapshot |= {str(d["seml"]["source_manifest"]) for d in leftovers.seml if _manifest(d)}
    delete_orphan_payloads(collection.database, collection.name, payload_ids(leftovers.seml))
    _delete_run_files(collection.database, collection.name, leftovers.runs, ids)
    delete_orphan_sources(collection.database, collection.name, snapshot)
    return DeleteResult(list(ids), cancelled)


#: the fields of an experiment no command changes once it is stored: a selection by them
#: matches the same experiments while it is read
_FIXED_FIELDS = frozenset({"_id", "batch_id"})


def _selects_by_fixed_fields(query: Mapping[str, Any]) -> bool:
    """Whether ``query`` reads only fields no command changes (:data:`_FIXED_FIELDS`; the
    whole collection too), so that an aggregate over it counts each experiment once (pure)."""
    return set(query) <= _FIXED_FIELDS


def _read_ids(collection: Any, query: Mapping[str, Any]) -> list[Any]:
    """The ``_id`` s of the experiments matching ``query``, sorted (one find, ``_id`` only)."""
    return [d["_id"] for d in collection.find(dict(query), {"_id": 1}).sort("_id", 1)]


def delete_ids(collection: Any, ids: Sequence[Any]) -> None:
    """Delete the documents of ``collection`` whose ``_id`` is one of ``ids`` (sorted): by id
    ranges (``core.ranges.id_filter``), in one ``delete_many``, or, for at least twice
    :data:`DELETE_PART_MIN` ids, in up to :data:`DELETE_PARTS` ``delete_many`` of consecutive
    id slices (``core.ranges.id_slices``) sent at once (``core.parallel.run_at_once``): mongod
    deletes each document and its index keys one by one on one CPU per command (100,000
    experiments on the 2-CPU test machine in a quiet moment: 1.8-2.5 s as one command,
    0.85-1.0 s as two). The end state is that of one ``delete_many`` (which is not atomic
    either). Raises the first pymongo error of the parts, after every part ended."""
    parts = id_slices(ids, min(DELETE_PARTS, len(ids) // DELETE_PART_MIN))
    run_at_once([partial(collection.delete_many, id_filter(part)) for part in parts], DELETE_PARTS)


@dataclass
class Leftovers:
    """What the experiments of a ``delete`` refer to outside their documents: ``seml``, one
    ``{"seml": {payload_file, source_files, source_manifest}}`` per distinct triple (a launch's
    experiments share one); ``runs``, the documents (``_id``, ``experiment.sources``, ``artifacts``,
    ``info.metrics``) of the experiments that have any of these (those that ran); ``ids``,
    the ids of every experiment matched, as a ``range``, when they are consecutive integers
    (``track.census.id_block``), else None (the caller reads them)."""

    seml: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    ids: range | None = None


#: the fields of a run ``_delete_run_files`` reads
_RUN_FILES = {"_id": 1, "experiment.sources": 1, "artifacts": 1, "info.metrics": 1}


#: whether a document may hold files or metrics of a run (Sacred's sources, artifacts,
#: metrics), as an aggregation expression: one of these fields is there, whatever its type
_RAN_EXPR = {
    "$or": [
        {"$ne": [{"$type": f"${path}"}, "missing"]}
        for path in ("experiment.sources", "artifacts", "info.metrics")
    ]
}


def seml_files_pipeline(query: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The aggregation pipeline of the distinct ``{payload_file, source_files, source_manifest}``
    of the documents matching ``query`` (pure): one ``$group`` by them, straight after the
    ``$match``; a row's ``_id`` is the triple, a field the documents lack absent from it,
    ``ran`` the ``_id`` s of its documents that may hold files of a run (:data:`_RAN_EXPR`),
    ``n`` how many documents it has, ``ints`` how many of them have an integer ``_id``, and
    ``lo`` / ``hi`` their smallest and largest ``_id`` (the caller's ids when they are
    consecutive: ``track.census.id_block``).

    No ``$project`` and no ``$sort`` before the ``$group``, and no other ids collected:
    projecting the ``seml.source_files`` of 100,000 documents (a launch's snapshot: 72
    ``[path, id]`` pairs in each) into documents to sort them took mongod 3 s of a 7 s
    ``delete``; the ``$group`` alone reads each array once, and the runs are found in the same
    pass (a second pass over 100,000 documents cost ~0.5 s)."""
    pair = {
        "payload_file": "$seml.payload_file",
        "source_files": "$seml.source_files",
        "source_manifest": "$seml.source_manifest",
    }
    integer = {"$cond": [{"$in": [{"$type": "$_id"}, ["int", "long"]]}, 1, 0]}
    return [
        {"$match": dict(query)},
        {
            "$group": {
                "_id": pair,
                "ran": {"$push": {"$cond": [_RAN_EXPR, "$_id", "$$REMOVE"]}},
                "n": {"$sum": 1},
                "ints": {"$sum": integer},
                "lo": {"$min": "$_id"},
                "hi": {"$max": "$_id"},
            }
        },
    ]


def run_leftovers(collection: Any, query: Mapping[str, Any], *, span: bool = True) -> Leftovers:
    """:class:`Leftovers` of the experiments matching ``query``: one aggregate for the payloads,
    snapshots, the ids of the runs that may have stored files or metrics and the span of the
    experiments' ids (:func:`seml_files_pipeline`), then those runs' documents (by id), when
    there are any. (One aggregate: cut into parts of the ``_id`` span sent at once, it took
    longer, each part an index scan, than the one collection scan.) ``span``: whether the
    experiments' ids may be taken from their count and span (``Leftovers.ids``; only for a
    query no experiment can enter or leave while it is read). Raises pymongo errors."""
    rows = list(collection.aggregate(seml_files_pipeline(query), allowDiskUse=True))
    seml = [{"seml": dict(row["_id"])} for row in rows]
    ran = [i for row in rows for i in row["ran"]]
    ids = None
    if not rows:
        ids = range(0)
    elif span and all(row["ints"] == row["n"] for row in rows):
        lo, hi = min(row["lo"] for row in rows), max(row["hi"] for row in rows)
        count = sum(row["n"] for row in rows)
        ids = id_block(int(lo), int(hi), count, count)
    if not ran:
        return Leftovers(seml, [], ids)
    return Leftovers(seml, select(collection, and_(query, id_filter(ran)), _RUN_FILES), ids)


def _manifest(doc: Mapping[str, Any]) -> bool:
    """Whether a document names its launch's snapshot manifest (``seml.source_manifest``)."""
    seml = doc.get("seml")
    return isinstance(seml, Mapping) and seml.get("source_manifest") is not None


def _source_files(doc: Mapping[str, Any]) -> list[Any]:
    """``seml.source_files`` of a document (``[]`` when it has none)."""
    seml = doc.get("seml")
    return list(seml.get("source_files") or []) if isinstance(seml, Mapping) else []


def _delete_run_files(
    db: Any, name: str, docs: Sequence[Mapping[str, Any]], ids: Sequence[Any] | None = None
) -> None:
    """Delete what Sacred stored for the runs ``docs`` of collection ``name`` (already
    deleted): the files of ``experiment.sources`` that no remaining run refers to (Sacred shares
    one file between runs with the same source) and of ``artifacts``, as SEML's delete, and
    their metrics (``store.metrics.delete_metrics``; with ``ids``, those of every experiment
    of ``ids``: the deleted ones)."""
    import gridfs

    files = []
    for doc in docs:
        files += [s[1] for s in (doc.get("experiment") or {}).get("sources") or [] if len(s) > 1]
        files += [a.get("file_id") for a in doc.get("artifacts") or [] if isinstance(a, Mapping)]
    files = [f for f in files if f is not None]
    if files:
        # Sacred stores a source file once per content (any run, any collection may share it)
        shared: set[str] = set()
        for other in db.list_collection_names():
            if not is_listed_collection(other):
                continue
            for doc in db[other].find(
                {"experiment.sources": {"$elemMatch": {"$elemMatch": {"$in": files}}}},
                {"experiment.sources": 1},
            ):
                shared.update(str(s[1]) for s in doc["experiment"]["sources"] if len(s) > 1)
        fs = gridfs.GridFS(db)
        for file_id in files:
            if str(file_id) not in shared:
                fs.delete(file_id)
    delete_metrics(db, name, docs, ids)


def _named_snapshots(collection: Any) -> tuple[set[str], set[str]]:
    """``(manifest ids, file ids)``, as strings, that the experiments of ``collection`` name:
    their ``seml.source_manifest`` and the entries of the lists documents of earlier versions
    carry (``seml.source_files``). One pass over the collection, grouped by distinct pair (a
    launch's experiments share one)."""
    named = {"$or": [{f"seml.{k}": {"$exists": True}} for k in ("source_manifest", "source_files")]}
    pair = {"m": "$seml.source_manifest", "f": "$seml.source_files"}
    manifests, files = set(), set()
    for row in collection.aggregate(
        [{"$match": named}, {"$group": {"_id": pair}}], allowDiskUse=True
    ):
        if row["_id"].get("m") is not None:
            manifests.add(str(row["_id"]["m"]))
        entries = row["_id"].get("f")
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, list) and len(entry) > 1:
                files.add(str(entry[1]))
    return manifests, files


def delete_orphan_sources(
    db: Any, name: str, only: set[str] | None = None, dry_run: bool = False
) -> list[Any]:
    """Delete the code snapshots of collection ``name`` that no experiment of the collection
    refers to any more: first the launches' manifests (``store.snapshot.sources.MANIFEST_TYPE``) no
    experiment names, then the snapshot files (``metadata.type: source_file``, written by SEML
    0.5 or by us) neither a remaining manifest nor an experiment's own list (documents of
    earlier versions) names. With ``only`` (ids as strings), just those manifests and files,
    and the files of those manifests. A file or manifest a launch has just stored or reused
    (leased, ``sources.delete_unused_files``) is kept. Returns the ids of the snapshot files
    deleted, not of the manifests (with ``dry_run``: those it would delete, deleting
    nothing)."""
    act = sources.unused_files if dry_run else sources.delete_unused_files
    collection = {"metadata.collection_name": name}
    if only is not None:  # the files of the manifests named, read before these go
        named = sources.manifest_files(db, restricted_to(collection, only))
        only = set(only) | {f for ids in named.values() for f in ids}
    manifests = act(
        db,
        restricted_to({**collection, "metadata.type": sources.MANIFEST_TYPE}, only),
        lambda: _named_snapshots(db[name])[0],
    )
    gone = {str(m) for m in manifests}

    def used() -> set[str]:
        listed = _named_snapshots(db[name])[1]
        kept = sources.manifest_files(db, collection)
        return listed | {f for m, ids in kept.items() if m not in gone for f in ids}

    return act(db, restricted_to({**collection, "metadata.type": "source_file"}, only), used)


def matching_collections(db: Any, pattern: str) -> list[str]:
    """Experiment collections whose name matches ``pattern`` (``re.fullmatch``, as SEML)."""
    try:
        regex = re.compile(pattern)
    except re.error as error:
        raise ManageError(f"Bad regular expression {pattern!r}: {error}") from None
    return sorted(
        n for n in db.list_collection_names() if is_listed_collection(n) and regex.fullmatch(n)
    )


def drop(db: Any, names: Sequence[str]) -> None:
    """Drop collections: cancel their active experiments, drop them, their payloads, their
    metrics (``database.metrics_collection_name``, and their entries in the shared ``metrics``)
    and their id counters, and forget them in the completion cache."""

    for name in names:
        if not is_listed_collection(name):
            raise ManageError(f"{name!r} is not an experiment collection; it is not dropped.")
        cancel(db[name], {})
        # the runs that stored files or metrics (the metrics collection goes as a whole)
        runs = run_leftovers(db[name], {}).runs
        db.drop_collection(name)
        delete_orphan_payloads(db, name)
        _delete_run_files(db, name, runs)
        db.drop_collection(metrics_collection_name(name))
        # earlier attempts' metrics of SEML's runs, kept in the shared collection (tag_metrics)
        db["metrics"].delete_many({"collection": name, "attempt_of": {"$exists": True}})
        delete_orphan_sources(db, name)
        db[COUNTERS_COLLECTION].delete_many({"_id": {"$in": [f"{name}._id", f"{name}.batch_id"]}})
    forget_cached_collections(names)
