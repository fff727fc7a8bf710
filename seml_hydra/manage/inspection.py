"""What the ``seml`` commands show: ``list`` (counts per collection), ``status`` (the ids per
state; its table: ``manage.status_view``), ``queue``, ``print-output``, ``print-fail-trace``,
and ``restore-sources`` (the code snapshot)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from seml_hydra.core import states
from seml_hydra.core.paths import unsafe_path_part
from seml_hydra.manage.describe import (
    DESCRIPTION,
    description_of,
    projected,
    without_collisions,
)
from seml_hydra.manage.selection import ManageError, id_ranges_by_state
from seml_hydra.slurm import client as slurm
from seml_hydra.store.db.collections import ensure_job_indexes
from seml_hydra.store.snapshot.node import SourceSnapshotError, load_snapshot, write_sources
from seml_hydra.store.snapshot.node import foreign_files as foreign
from seml_hydra.track import census
from seml_hydra.track.cache import is_listed_collection, refresh_collection_cache
from seml_hydra.track.groups import task_groups
from seml_hydra.track.jobs import array_of, row_jobs, state_of, task_of
from seml_hydra.track.outputs import OUTPUT_TAIL_BYTES, output_file, read_document_output
from seml_hydra.track.query import PROJECTION, select

if TYPE_CHECKING:
    from pymongo.database import Database


@dataclass
class CollectionCounts:
    """One row of ``seml list``: the collection ``name`` and ``{state: number}`` of its
    experiments (``track.jobs.state_of`` names the states)."""

    name: str
    counts: dict[str, int]

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def list_collections(db: Any, pattern: str | None = None) -> list[CollectionCounts]:
    """Experiment collections (names matching ``pattern`` with ``re.search``) with counts per
    state. Refreshes the completion cache with every experiment collection."""
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error as error:
        raise ManageError(f"Bad regular expression {pattern!r}: {error}") from None
    names = sorted(n for n in db.list_collection_names() if is_listed_collection(n))
    refresh_collection_cache(names)
    out = []
    for name in names:
        if regex is not None and not regex.search(name):
            continue
        pipeline = [{"$group": {"_id": "$status", "n": {"$sum": 1}}}]
        counts: dict[str, int] = {}
        for row in db[name].aggregate(pipeline):
            status = state_of(row["_id"])
            counts[status] = counts.get(status, 0) + row["n"]
        out.append(CollectionCounts(name, counts))
    return out


def status(collection: Any, query: Mapping[str, Any] | None = None) -> dict[str, list[int]]:
    """``{state: ids}`` of the experiments matching ``query``."""
    return id_ranges_by_state(select(collection, dict(query or {}), {"_id": 1, "status": 1}))


def _snapshot_name(seml: Any) -> tuple | None:
    """What tells a document's code snapshot apart (pure): its manifest's id
    (``seml.source_manifest``), else the list documents of earlier versions carry
    (``seml.source_files``), else None."""
    if not isinstance(seml, Mapping):
        return None
    if seml.get("source_manifest") is not None:
        return ("manifest", str(seml["source_manifest"]))
    files = seml.get("source_files")
    if files:
        return tuple((str(rel), str(fid)) for rel, fid in files)
    return None


def snapshot_of(docs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The ``seml`` block naming the one code snapshot the documents share (pure): its
    manifest (``seml.source_manifest``) or, for documents of earlier versions, its list
    (``seml.source_files``); ``store.snapshot.node.load_snapshot`` reads it.

    Returns ``None`` when none of them has one. Raises :class:`ManageError` listing the batch
    ids when they have different snapshots: the filter must pick one.
    """
    snapshots: dict[tuple[Any, ...], list[int | None]] = {}
    first: dict[tuple[Any, ...], Mapping[str, Any]] = {}
    for doc in docs:
        name = _snapshot_name(doc.get("seml"))
        if name is not None:
            snapshots.setdefault(name, []).append(doc.get("batch_id"))
            first.setdefault(name, doc["seml"])
    if not snapshots:
        return None
    if len(snapshots) > 1:
        batches = sorted({b for ids in snapshots.values() for b in ids if b is not None})
        raise ManageError(
            f"The selected experiments have {len(snapshots)} different code snapshots (batches "
            f"{', '.join(map(str, batches))}); pick one with -b BATCH_ID or -id ID."
        )
    return next(iter(first.values()))


def snapshot_for(collection: Any, query: Mapping[str, Any]) -> list[list[Any]]:
    """The code snapshot's files (``[[relative path, GridFS id], ...]``) of the selected
    experiments (for ``restore-sources``), from their launch's manifest or, for documents of
    earlier versions, their own list.

    Raises :class:`ManageError` when nothing matches, nothing has a snapshot, several
    snapshots match or the manifest is gone.
    """
    fields = {"seml.source_files": 1, "seml.source_manifest": 1, "batch_id": 1}
    docs = select(collection, query, fields)
    if not docs:
        raise ManageError("No experiments match the filters.")
    seml = snapshot_of(docs)
    try:
        found = load_snapshot(collection.database, seml) if seml is not None else None
    except SourceSnapshotError as error:
        raise ManageError(f"Cannot restore the sources: {error}.") from None
    if found is None or not found.files:
        raise ManageError("The selected experiments have no code snapshot.")
    return found.files


def check_restore_target(target: Path) -> None:
    """Refuse a ``restore-sources`` target that another user could redirect: a symbolic link
    or a directory of another user (not root) on its path, or a directory others can write
    without the sticky bit (``core.paths.unsafe_path_part``; e.g. ``/tmp/restore`` planted as
    a link to your project, whose files the restore would overwrite). Raises
    :class:`ManageError` saying which part."""
    problem = unsafe_path_part(target)
    if problem is not None:
        raise ManageError(
            f"Not writing the sources into {target}: {problem}, who could redirect the files "
            "elsewhere; choose a directory of yours."
        )


def restore_sources(collection: Any, files: Sequence[Sequence[Any]], target: Path) -> list[Path]:
    """Write a snapshot from :func:`snapshot_for` into ``target`` (SEML's ``restore-sources``,
    later ``download-sources``); returns the files written: files already there with the
    snapshot's content are kept (``sources.write_sources``). The target is checked with
    :func:`check_restore_target` before and after its directories are created. Raises
    :class:`ManageError`, also when the directory cannot be made (the system's reason)."""

    check_restore_target(target)
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as error:  # a file on the path, /proc, no permission, a full disk
        raise ManageError(
            f"cannot write the sources into {target}: {error.strerror or error}"
        ) from None
    check_restore_target(target)  # another user may have created a missing part meanwhile
    try:
        return write_sources(collection.database, files, target)
    except SourceSnapshotError as error:
        raise ManageError(str(error)) from None


def foreign_files(collection: Any, files: Sequence[Sequence[Any]], target: Path) -> list[Path]:
    """The files in ``target`` that are not the snapshot's (``sources.foreign_files``): a
    restore there mixes with or overwrites them. Raises :class:`ManageError`, also for a
    target :func:`check_restore_target` refuses or one whose files cannot be read."""

    check_restore_target(target)
    try:
        return foreign(collection.database, files, target)
    except SourceSnapshotError as error:
        raise ManageError(str(error)) from None
    except OSError as error:  # e.g. /proc/self: files that cannot be read (nor written)
        raise ManageError(
            f"cannot write the sources into {target}: reading what is there failed: "
            f"{error.strerror or error}"
        ) from None


@dataclass
class Output:
    """One experiment's output for ``print-output``: ``text`` (``None`` when there is none, then
    ``problem`` says why), the ``path`` it came from, and ``skipped`` bytes left out at the
    start of a file longer than :data:`OUTPUT_TAIL_BYTES`."""

    exp_id: int
    status: str | None
    path: str | None
    text: str | None
    problem: str | None = None
    skipped: int = 0
    #: the text is a ``captured_out`` its document marks incomplete (``captured_out_incomplete``)
    incomplete: bool = False


def read_outputs(
    collection: Any,
    query: Mapping[str, Any],
    *,
    tail: int | None = None,
    head: int | None = None,
    slurm: bool = False,
) -> list[Output]:
    """The output of each matching experiment, decoded as UTF-8 with invalid bytes as U+FFFD;
    ``tail`` keeps the last lines only, ``head`` the first ones (not both: ManageError).

    Which output, as SEML 0.5's ``print-output``: the experiment's own output, i.e. its own
    output file (``seml.output_file``, written by SEML) when there is one, else Sacred's
    ``captured_out`` (what the experiment printed, stored with the run), else the job's output
    file (``execution.slurm_output_file``: e.g. a job that died before Sacred stored anything).
    With ``slurm``, the job's Slurm output file (submitit's ``<job>_<task>_log.out``: all of
    the task's lines, its experiments' and the job's own), Sacred's ``captured_out`` only when
    that file is unreadable. Files are read as ``track.outputs.read_output_tail`` allows
    (inside the experiment's output folder, named as its own job's output, this user's,
    regular), at most their last (with ``head``: first) :data:`OUTPUT_TAIL_BYTES`."""
    if tail and head:
        raise ManageError("Give --head or --tail, not both.")
    out = []
    projection = {**PROJECTION, "captured_out": 1, "captured_out_incomplete": 1}
    for doc in select(collection, query, projection):
        exp_id, status = doc["_id"], doc.get("status")
        own = None if slurm else (doc.get("seml") or {}).get("output_file")
        captured = doc.get("captured_out")
        captured = captured if isinstance(captured, str) and captured else None
        if not own and not slurm and captured is not None:
            incomplete = doc.get("captured_out_incomplete") is True
            text = _lines(captured, head, tail)
            out.append(Output(exp_id, status, "captured_out", text, incomplete=incomplete))
            continue
        path = own or (output_file(doc) if (doc.get("execution") or {}) else None)
        if not path:
            out.append(Output(exp_id, status, None, None, "no output file yet"))
            continue
        path = str(path)
        read = read_document_output(
            doc,
            path,
            collection.name,
            seml_output_file=bool(own),
            max_bytes=OUTPUT_TAIL_BYTES,
            head=bool(head),
        )
        if read.data is not None:
            text = read.data.decode("utf-8", errors="replace")
        elif captured is not None:
            path = f"{path} ({read.problem}); Sacred's captured_out"
            text = captured
        else:
            out.append(Output(exp_id, status, path, None, read.problem))
            continue
        skipped = 0 if head else read.skipped
        incomplete = read.data is None and doc.get("captured_out_incomplete") is True
        lines = _lines(text, head, tail)
        out.append(Output(exp_id, status, path, lines, skipped=skipped, incomplete=incomplete))
    return out


def _lines(text: str, head: int | None, tail: int | None) -> str:
    """``text``, or only its first ``head`` / last ``tail`` lines."""
    if head:
        return "\n".join(text.splitlines()[:head])
    if tail:
        return "\n".join(text.splitlines()[-tail:])
    return text


@dataclass
class FailTrace:
    """One experiment of ``print-fail-trace``: ``trace`` (``""`` when none), its
    ``description`` (``seml.description``) and ``values``, ``(key, shown value)`` of each
    ``-p`` key (``manage.describe.projected``)."""

    exp_id: Any
    status: Any
    trace: str
    description: str | None = None
    values: list[tuple[str, str]] = field(default_factory=list)


def fail_traces(
    collection: Any, query: Mapping[str, Any], keys: Sequence[str] = ()
) -> list[FailTrace]:
    """The fail traces of the matching experiments, with the values of ``keys``."""
    fields = {"_id": 1, "status": 1, "fail_trace": 1, DESCRIPTION: 1, **{k: 1 for k in keys}}
    out = []
    for doc in select(collection, query, without_collisions(fields)):
        trace = doc.get("fail_trace") or []
        text = "".join(trace) if isinstance(trace, list) else str(trace)
        out.append(
            FailTrace(
                doc["_id"], doc.get("status"), text, description_of(doc), projected(doc, keys)
            )
        )
    return out


def queue_groups(collection: Any, arrays: Sequence[int]) -> list[tuple[dict[str, Any], Any]]:
    """The experiments of the Slurm ``arrays`` (their ``slurm.array_id`` or
    ``execution.array_id``), as ``(document, ids)`` groups that ``track.jobs.task_of`` and
    ``array_of`` take as they take each of their experiments. Counted from the census index
    (``track.census.array_groups``: no document read) but for the claimed experiments and those
    recorded in a later ``slurm`` entry only (:func:`track.census.unsubmitted_ids`), grouped
    from their documents (``track.groups.task_groups``); from the documents alone when the
    census cannot answer. Raises pymongo errors."""
    values = [*arrays, *(str(a) for a in arrays)]
    query: dict[str, Any] = {
        "$or": [{"slurm.array_id": {"$in": values}}, {"execution.array_id": {"$in": values}}]
    }
    try:
        groups, rest = census.array_groups(collection, arrays)
        unsubmitted = census.unsubmitted_ids(collection, values)
    except census.Unplain:
        return [(g.doc, g.ids) for g in task_groups(collection, query)]
    rest.append({"execution.array_id": {"$in": values}})
    if unsubmitted:
        rest.append({"_id": {"$in": unsubmitted}})
    return groups + [(g.doc, g.ids) for g in task_groups(collection, {"$or": rest})]


@dataclass
class QueueRow:
    """One row of ``seml queue``: a Slurm job (``job_id``, ``state``, pending ``reason``,
    ``nodes``, ``elapsed_s`` in seconds, ``name``), its ``collection`` (None when its comment
    names none), the ids of the experiments it runs and its remaining ``dependency``."""

    collection: str | None
    job_id: str
    state: str
    reason: str | None
    nodes: str | None
    elapsed_s: float | None
    name: str
    exp_ids: list[int]
    #: the job's dependencies not yet satisfied (squeue's %E), e.g. ``afterok:12_*(failed)``
    dependency: str | None = None
    #: an array of a batch of the collection that no experiment names (:func:`orphan_arrays`)
    orphan: bool = False
    #: the job's array id (its own id when it is no array)
    array_id: str = ""


def batch_of_job(name: str | None, collection_name: str) -> int | None:
    """The batch id in a job name ``[<prefix>_]<collection>_<batch_id>``
    (``launch.sbatch.job_name``, also SEML 0.5's), None for any other name (pure)."""
    base = f"{collection_name}_"
    if not name or base not in name:
        return None
    head, _, tail = str(name).rpartition(base)
    if not tail.isdigit() or (head and not head.endswith("_")):
        return None
    return int(tail)


def orphan_arrays(collection: Any, arrays: Mapping[str, str | None]) -> set[str]:
    """Of the Slurm ``arrays`` (``{array id: job name}``) whose jobs squeue lists with this
    collection as comment, those that no experiment names (``slurm.array_id`` in any entry,
    ``execution.array_id``), whose job name is one of the batches this database's counter
    handed out for the collection (:func:`batch_of_job`, ``store.db.collections.next_ids``) and
    whose batch has no experiment marked by a live submitter (an array its submitter is about to
    record): what a ``delete`` during a launch's submission left (the launcher cancels it itself
    since then). An array of a collection of the same name in another database, of a batch
    number this one handed out too, looks the same. Three queries, by index. Raises pymongo
    errors."""
    from seml_hydra.launch.marks import submitter_gone
    from seml_hydra.store.db.collections import COUNTERS_COLLECTION

    counter = collection.database[COUNTERS_COLLECTION].find_one(
        {"_id": f"{collection.name}.batch_id"}
    )
    last = (counter or {}).get("value")
    if not isinstance(last, int):  # no launch of ours staged into it
        return set()
    all_batches = {a: batch_of_job(n, collection.name) for a, n in arrays.items()}
    batches = {a: b for a, b in all_batches.items() if b is not None and b <= last}
    candidates = set(batches)
    if not candidates:
        return set()
    values = [*(int(a) for a in candidates), *candidates]
    named = {
        str(entry.get("array_id"))
        for d in collection.find(
            {"$or": [{"slurm.array_id": {"$in": values}}, {"execution.array_id": {"$in": values}}]},
            {"slurm.array_id": 1, "execution.array_id": 1},
        )
        for entry in [*(d.get("slurm") or []), d.get("execution") or {}]
        if isinstance(entry, Mapping)
    }
    marked = collection.find(
        {
            "batch_id": {"$in": sorted({batches[a] for a in candidates})},
            "slurm.0.submitting": {"$exists": True},
        },
        {"batch_id": 1, "slurm": 1},
    )
    busy = {d.get("batch_id") for d in marked if not submitter_gone(d["slurm"][0]["submitting"])}
    return {a for a in candidates if a not in named and batches[a] not in busy}


def queue(
    db: Database[dict[str, Any]] | None,
    job_ids: Sequence[str] | None = None,
    *,
    all_jobs: bool = False,
    slurm_states: Sequence[str] | None = None,
) -> list[QueueRow]:
    """The user's Slurm jobs, with the collection of their ``--comment`` and the experiments
    they run. Without ``all_jobs`` only jobs whose comment names an experiment collection of
    ``db`` are kept. One squeue call, one MongoDB aggregate per collection (over the
    experiments of the arrays squeue lists, found by index: ``store.db.collections.JOB_INDEXES``);
    the arrays of a collection whose rows run no experiment are checked by
    :func:`orphan_arrays` (``QueueRow.orphan``)."""

    rows = slurm.squeue_jobs(
        job_ids=list(job_ids) if job_ids else None, states=slurm_states, extra_fields=("E",)
    )
    names: set[str] = set()
    exp_of: dict[tuple[str, str], list[int]] = {}
    if db is not None:
        names = {n for n in db.list_collection_names() if is_listed_collection(n)}
        exp_of = _experiments_by_task(db, rows, names)
    out = []
    for row in rows:
        known = row.comment if row.comment in names else None
        if known is None and not all_jobs:
            continue
        ids: list[int] = []
        if known is not None:
            for job in row_jobs(row):
                ids.extend(exp_of.get((known, job), []))
            if row.state == "PENDING" and row.array_job_id is not None:
                ids.extend(exp_of.get((known, f"{row.array_job_id}_*"), []))
        out.append(
            QueueRow(
                collection=known,
                job_id=row.job_id,
                state=row.state,
                reason=row.reason,
                nodes=row.nodelist,
                elapsed_s=row.elapsed_s,
                name=row.name,
                exp_ids=sorted(set(ids)),
                dependency=row.dependency,
                array_id=str(row.array_job_id or row.job_id_raw),
            )
        )
    if db is not None:  # without a database no row has a collection
        _mark_orphans(db, out)
    return out


def _mark_orphans(db: Database[dict[str, Any]], out: Sequence[QueueRow]) -> None:
    """Set ``orphan`` on the rows of ``out`` whose array no row of theirs runs an experiment of
    and :func:`orphan_arrays` finds orphaned."""
    busy = {(r.collection, r.array_id) for r in out if r.exp_ids}
    idle: dict[str, dict[str, str | None]] = {}
    for r in out:
        if r.collection is not None and (r.collection, r.array_id) not in busy:
            idle.setdefault(r.collection, {})[r.array_id] = r.name
    for name, arrays in idle.items():
        orphans = orphan_arrays(db[name], arrays)
        for r in out:
            if r.collection == name and r.array_id in orphans:
                r.orphan = True


def _experiments_by_task(
    db: Database[dict[str, Any]], rows: Sequence[Any], names: set[str]
) -> dict[tuple[str, str], list[int]]:
    """``{(collection, Slurm task): experiment ids}`` of the squeue ``rows`` whose comment is
    one of the collections ``names``, one aggregate per collection (:func:`queue_groups`); a
    pending experiment of SEML 0.5 is under ``(collection, "<array>_*")``."""
    by_collection: dict[str, list[Any]] = {}
    for row in rows:
        if row.comment in names:
            by_collection.setdefault(row.comment, []).append(row)
    exp_of: dict[tuple[str, str], list[int]] = {}
    for name, crows in by_collection.items():
        arrays = sorted({r.array_job_id or r.job_id_raw for r in crows})
        if not arrays:
            continue
        ensure_job_indexes(db[name])  # the arrays' experiments are found by index
        for doc, ids in queue_groups(db[name], arrays):  # per Slurm task, not per experiment
            task = task_of(doc)
            if task is not None:
                exp_of.setdefault((name, task[1]), []).extend(ids)
            elif doc.get("status") == states.PENDING and array_of(doc):
                # SEML 0.5: a pending experiment waits for any pending task of its array
                exp_of.setdefault((name, f"{array_of(doc)}_*"), []).extend(ids)
    return exp_of


#: the fields :func:`attempt_histories` reads (the whole history, the current run's fields)
_ATTEMPT_FIELDS = {
    "_id": 1,
    "status": 1,
    "attempts": 1,
    "start_time": 1,
    "stop_time": 1,
    "heartbeat": 1,
    "host": 1,
    "execution": 1,
    "fail_trace": 1,
    "pruned": 1,
}


def attempt_histories(
    collection: Any, query: Mapping[str, Any], limit: int = 0
) -> list[tuple[Any, list[dict[str, Any]]]]:
    """``(_id, entries)`` of each matching experiment (ascending ``_id``, at most ``limit``;
    0 = all): its attempt history, oldest first, then its current run
    (``core.attempts.history`` and ``current_entry``; the current one has ``current: True``).
    Raises pymongo errors."""
    from seml_hydra.core.attempts import current_entry, history

    cursor = collection.find(dict(query), _ATTEMPT_FIELDS).sort("_id", 1)
    if limit:
        cursor = cursor.limit(limit)
    return [(doc["_id"], [*history(doc), current_entry(doc)]) for doc in cursor]
