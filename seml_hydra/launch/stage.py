"""Staging: sweep points -> documents in MongoDB, with SEML's duplicate rule.

A point whose ``config_hash`` is already in the collection is not staged again (SEML 0.5's
``remove_duplicates``): STAGED experiments are submitted with this launch, PENDING/RUNNING/
RESCHEDULED/COMPLETED ones are awaited or returned, FAILED/KILLED/INTERRUPTED ones are reset to
STAGED and run again (their earlier run kept in their attempt history, ``core.attempts``, its
metrics tagged with it). ``force`` stages a new copy anyway. The check is
atomic with the insert: the documents of a launch without ``force`` carry :data:`UNIQUE_FIELD`,
on which a unique partial index (:data:`UNIQUE_INDEX`) admits one document per hash, so of two
launches of one sweep staging at the same time only one inserts each point and the other waits
for that one's experiment (:meth:`Stager.finish`). ``_id`` and ``batch_id`` come from atomic
counters (``collections.next_ids``), never from ``max + 1``. A launch is staged in chunks
(:class:`Stager`, :data:`STAGE_CHUNK` points at a time): the launcher never holds all of its
points or documents at once, and each chunk's insert runs in a worker thread while the next chunk
is composed (:func:`fewer_collections` keeps the garbage collector to what staging allocates).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from seml_hydra.core import states
from seml_hydra.core.attempts import BY_LAUNCH, LAST_NUMBER, move_pipeline, number_after
from seml_hydra.core.errors import UserError
from seml_hydra.store.db.collections import next_ids

log = logging.getLogger(__name__)

#: run fields Sacred and the run step write; cleared when a finished experiment is reset
RUN_FIELDS = (
    "execution",
    "start_time",
    "stop_time",
    "heartbeat",
    "captured_out",
    "captured_out_incomplete",
    "result",
    "fail_trace",
    "rank_failures",
    "rank_ends",
    "requeues",
    "host",
    "experiment",
    "meta",
    "info",
    "resources",
    "artifacts",
    "command",
    "format",
    "stats",
    "fail_fast",
    "pruning",
    "pruned",
)


#: MongoDB's largest document (``maxBsonObjectSize``), bytes
MAX_DOCUMENT_BYTES = 16 * 1024 * 1024


class DocumentTooLargeError(UserError):
    """A sweep point's document is above :data:`MAX_DOCUMENT_BYTES` (:func:`oversized_message`)."""


def oversized_message(docs: Iterable[Mapping[str, Any]]) -> str | None:
    """The refusal of the first of ``docs`` whose BSON is above :data:`MAX_DOCUMENT_BYTES`
    (its point's overrides, its size and the largest value of its ``config``, descending
    into mappings), or ``None`` when every one fits (pure; encodes every document, so it is
    called once an insert has failed)."""
    import bson

    for doc in docs:
        size = len(bson.encode(doc))
        if size <= MAX_DOCUMENT_BYTES:
            continue
        path, value = ["config"], doc.get("config")
        while isinstance(value, Mapping) and value:
            sizes = {k: len(bson.encode({"v": v})) for k, v in value.items()}
            key = max(sizes, key=sizes.__getitem__)
            path.append(str(key))
            value = value[key]
        largest = len(bson.encode({"v": value}))
        overrides = " ".join((doc.get("hydra") or {}).get("overrides") or []) or "(no overrides)"
        return (
            f"the sweep point {overrides} makes a document of {size / 2**20:.1f} MiB, above "
            f"MongoDB's {MAX_DOCUMENT_BYTES // 2**20} MiB limit; its largest config value is "
            f"{'.'.join(path)} ({largest / 2**20:.1f} MiB): keep large data in files and put "
            "their path in the config. Nothing was staged."
        )
    return None


#: the field (``true``) of the documents staged without ``force``: only they are in
#: :data:`UNIQUE_INDEX`, so forced copies, SEML 0.5's documents and those of earlier versions
#: (which may share a hash already) neither block its build nor are blocked by it
UNIQUE_FIELD = "config_hash_unique"
#: the name of the unique index on ``config_hash`` of the documents with :data:`UNIQUE_FIELD`
UNIQUE_INDEX = "config_hash_unique"


def ensure_unique_index(collection: Any) -> bool:
    """Create :data:`UNIQUE_INDEX` on ``collection`` unless it exists (one ``createIndexes``
    round trip). Returns False, with a warning logged, when MongoDB refused it (a user without
    the right to create indexes, or a database with documents of this version that share a
    hash already): staging then works as before it, without telling apart two launches that
    stage one point at the same time."""
    from pymongo.errors import OperationFailure

    try:
        collection.create_index(
            [("config_hash", 1)],
            name=UNIQUE_INDEX,
            unique=True,
            partialFilterExpression={UNIQUE_FIELD: True},
        )
    except OperationFailure as error:
        log.warning(
            "Could not create the unique index %s of collection %s (%s): two launches of one "
            "sweep staging at the same time may both stage its points",
            UNIQUE_INDEX,
            collection.name,
            error,
        )
        return False
    return True


def is_hash_conflict(write_error: Mapping[str, Any]) -> bool:
    """Whether one of ``insert_many``'s ``writeErrors`` is a duplicate key in
    :data:`UNIQUE_INDEX` (pure): another launch inserted a document with this hash first."""
    pattern = write_error.get("keyPattern") or {}
    return write_error.get("code") == 11000 and list(pattern) == ["config_hash"]


#: points composed, hashed, built and inserted at a time (:class:`Stager`); the environment
#: variable ``SEML_HYDRA_STAGE_CHUNK`` overrides it (:func:`stage_chunk_size`)
STAGE_CHUNK = 2000
#: ids per ``$in`` of the writes that undo a half-staged launch
DELETE_CHUNK = 10_000


def stage_chunk_size(environ: Mapping[str, str] = os.environ) -> int:
    """Points per staging chunk: ``SEML_HYDRA_STAGE_CHUNK`` when it is a positive integer, else
    :data:`STAGE_CHUNK` (pure but for reading ``environ``). The launcher holds one chunk's
    composed points and documents at a time, so its memory grows with this, not with the
    sweep."""
    text = environ.get("SEML_HYDRA_STAGE_CHUNK", "").strip()
    if text.isdigit() and int(text) > 0:
        return int(text)
    return STAGE_CHUNK


#: the youngest generation's threshold of the garbage collector while a launch stages
#: (:func:`fewer_collections`; Python's default is 700 allocations)
STAGE_GC_THRESHOLD = 10_000


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """Let CPython's garbage collector look only at what staging allocates, within the block.

    A launch keeps many objects alive (Hydra's override list of every point, the imported
    modules), and a chunk's points and documents live long enough to reach the oldest
    generation, so the collector traverses everything alive every chunk or two (100,000
    points: ~50 full collections, ~4 s of CPU). Here the objects alive at the start are
    frozen out of the collections (``gc.freeze``) and the youngest generation is collected
    every :data:`STAGE_GC_THRESHOLD` allocations: cyclic garbage made while staging is still
    collected. The thresholds are restored and the objects unfrozen at the end. Leaves the
    collector alone when it is disabled (threshold 0) or something froze objects already."""
    import gc

    before = gc.get_threshold()
    if before[0] == 0 or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    gc.set_threshold(max(before[0], STAGE_GC_THRESHOLD), *before[1:])
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


T = TypeVar("T")


def chunked(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in consecutive lists of ``size`` (the last one shorter; none for no items).
    Pure and lazy: the next list is taken from ``items`` only when asked for. Raises
    ``ValueError`` for ``size < 1``."""
    if size < 1:
        raise ValueError(f"chunk size must be at least 1, not {size}")
    iterator = iter(items)
    while True:
        part = list(itertools.islice(iterator, size))
        if not part:
            return
        yield part


@dataclass
class StagePlan:
    """What to do with each point (pure result of :func:`plan_staging` / :func:`plan_chunk`).

    Attributes:
        new: indices of points to insert as new documents.
        existing: point index -> the existing document (``_id``, ``status``) it maps to, or
            ``{"_id": None, "same_as": i}`` for a repeat of new point ``i`` of this launch.
        rerun: indices (subset of ``existing``) whose experiment is reset and run again.
        resubmit: indices (subset of ``existing``) that are STAGED and get submitted now.
    """

    new: list[int] = field(default_factory=list)
    existing: dict[int, Mapping[str, Any]] = field(default_factory=dict)
    rerun: list[int] = field(default_factory=list)
    resubmit: list[int] = field(default_factory=list)


def plan_chunk(
    hashes: Sequence[str],
    found: Sequence[Mapping[str, Any]],
    force: bool,
    seen: dict[str, int | Mapping[str, Any]],
    start: int = 0,
) -> StagePlan:
    """Decide per point of one chunk: new, awaited, re-run or re-submitted (pure but for
    updating ``seen``).

    Args:
        hashes: ``config_hash`` per point of the chunk, in input order.
        found: existing documents (``_id``, ``status``, ``config_hash``) with any of those
            hashes (documents this launch inserted included: ``seen`` knows them first).
        force: stage every point as new (``hydra.launcher.force=true``); ``seen`` is not used.
        seen: what the launch's earlier points (earlier chunks included) decided per hash: the
            index of the new point, or the existing document; updated in place.
        start: the launch-wide index of the chunk's first point (indices in the plan are
            launch-wide).

    Two points of one sweep with the same hash map to the same experiment, in one chunk or
    across chunks. When several documents share a hash, the newest (highest ``_id``) wins.
    """
    plan = StagePlan()
    by_hash: dict[str, Mapping[str, Any]] = {}
    for doc in sorted(found, key=lambda d: d["_id"]):
        by_hash[doc["config_hash"]] = doc
    for offset, h in enumerate(hashes):
        index = start + offset
        if force:
            plan.new.append(index)
            continue
        earlier = seen.get(h)
        if isinstance(earlier, int):  # a repeat of a new point of this launch: one experiment
            plan.existing[index] = {"_id": None, "same_as": earlier}
            continue
        stored = earlier if earlier is not None else by_hash.get(h)
        if stored is None:
            seen[h] = index
            plan.new.append(index)
            continue
        seen[h] = stored
        plan.existing[index] = stored
        status = states.ALIASES.get(stored["status"], stored["status"])
        if status in states.RERUNNABLE:
            plan.rerun.append(index)
        elif status == states.STAGED:
            plan.resubmit.append(index)
    return plan


def plan_staging(
    hashes: Sequence[str], found: Sequence[Mapping[str, Any]], force: bool
) -> StagePlan:
    """:func:`plan_chunk` of a whole sweep as one chunk (pure)."""
    return plan_chunk(hashes, found, force, {})


@dataclass(frozen=True)
class StagedElsewhere:
    """The experiment another launch staged for a point of this one (:meth:`Stager.finish`):
    its id, and that launch's payload file and batch id (None when the document has none), with
    which this launch submits it as that launch would have."""

    exp_id: int
    payload_id: Any
    batch_id: Any


@dataclass
class StageResult:
    """Outcome of a launch's staging (:meth:`Stager.finish`): the experiment id of every point
    (input order), and which ids this launch must submit."""

    ids: list[int]
    batch_id: int
    new_ids: list[int]
    rerun_ids: list[int]
    resubmit_ids: list[int]
    awaited: dict[str, list[int]]  # status -> ids of existing experiments we only wait for
    #: ids of the experiments another launch staged at the same time for points of this one
    #: (:meth:`Stager.finish`): awaited, and submitted here too, should they still be STAGED
    #: when this launch submits (that launch died before its sbatch, or has not reached it:
    #: the move to PENDING lets one submission take each, ``submit.submit_group``)
    concurrent: list[int] = field(default_factory=list)
    #: the id this launch reserved for such a point -> the other launch's experiment
    taken: dict[int, StagedElsewhere] = field(default_factory=dict)

    @property
    def to_submit(self) -> list[int]:
        """ids to submit now, ascending."""
        return sorted({*self.new_ids, *self.rerun_ids, *self.resubmit_ids})


def _max_of(collection: Any, field_name: str) -> Callable[[], int]:
    """``floor`` for ``next_ids``: the largest integer ``field_name`` in the collection (ids SEML
    wrote as ``max + 1`` stay below ours)."""

    def largest() -> int:
        doc = collection.find_one({}, {field_name: 1}, sort=[(field_name, -1)])
        value = (doc or {}).get(field_name)
        return value if isinstance(value, int) else 0

    return largest


def next_batch_id(db: Any, collection_name: str) -> int:
    """A new ``batch_id`` for a launch into ``collection_name`` (atomic counter)."""
    collection = db[collection_name]
    return next_ids(db, f"{collection_name}.batch_id", 1, floor=_max_of(collection, "batch_id"))[0]


def _refuse_oversized(docs: Iterable[Mapping[str, Any]]) -> None:
    """Raise :class:`DocumentTooLargeError` when one of ``docs`` is too large to store."""
    message = oversized_message(docs)
    if message is not None:
        raise DocumentTooLargeError(message) from None


class Stager:
    """Write the documents of one launch, chunk by chunk (:meth:`add_chunk`), then re-run and
    re-submit the existing experiments the points map to (:meth:`finish`).

    Args:
        db: pymongo database.
        collection_name: the collection.
        batch_id: from :func:`next_batch_id`.
        force: see :func:`plan_chunk`.
        recover: ``hashes -> None``, called with a chunk's hashes before its duplicates are
            decided when some experiment with one of them is PENDING (the launcher puts
            experiments an interrupted submission left PENDING without a job back to STAGED:
            ``recovery.recover_interrupted_submissions``).
        overlap: insert each chunk in a worker thread while the caller composes and builds
            the next one (pymongo waits for MongoDB without holding the GIL, and MongoDB
            shares the machine's CPUs: the launcher's work and MongoDB's overlap); False:
            each insert is done before :meth:`add_chunk` returns.

    Per chunk: one ``find`` of the documents with its hashes (again after the recovery, when
    it ran), new ids from the atomic counter, and one unordered ``insert_many`` of the chunk's
    new documents: at most two chunks' documents are held at a time (one being inserted, one
    being built), and at most one insert is under way. A new document that
    :data:`UNIQUE_INDEX` refuses (a concurrent launch inserted its hash between the ``find`` and
    the insert) is not inserted: :meth:`finish` maps its points to the other launch's
    experiment, which this launch waits for and does not submit. Duplicates are told across chunks
    (:func:`plan_chunk` with the launch's ``seen`` hashes). The writes to existing documents
    (re-run: reset to STAGED, the earlier run moved into the attempt history; re-submission) wait for :meth:`finish`, once
    every point has been composed and checked: a bad point in a later chunk leaves existing
    experiments as they were, and :meth:`undo` removes the new documents (a sweep with a bad
    point stages nothing), once the insert under way has ended.
    """

    def __init__(
        self,
        db: Any,
        collection_name: str,
        batch_id: int,
        force: bool,
        recover: Callable[[Sequence[str]], None] | None = None,
        overlap: bool = True,
    ) -> None:
        self.db = db
        self.collection_name = collection_name
        self.collection = db[collection_name]
        self.batch_id = batch_id
        self.force = force
        self.recover = recover
        self.seen: dict[str, int | Mapping[str, Any]] = {}
        self.ids: list[int] = []  # per point of the launch, in input order
        self.new_ids: list[int] = []
        #: existing documents to write in finish(): _id -> (document, rerun?, refreshed fields)
        self.updates: dict[int, tuple[Mapping[str, Any], bool, dict[str, Any]]] = {}
        self.awaited_docs: dict[int, Mapping[str, Any]] = {}
        self._indexed = False
        #: id reserved for a new document -> its hash, for those :data:`UNIQUE_INDEX` refused
        self.lost: dict[int, str] = {}
        self._overlap = overlap
        self._worker: Any = None  # concurrent.futures.ThreadPoolExecutor, one thread
        #: (the Future of the insert under way, its ids)
        self._inserting: tuple[Any, list[int]] | None = None

    def _existing(self, hashes: Sequence[str]) -> list[dict[str, Any]]:
        return list(
            self.collection.find(
                {"config_hash": {"$in": sorted(set(hashes))}},
                {
                    "_id": 1,
                    "status": 1,
                    "config_hash": 1,
                    "info.metrics": 1,
                    "last_attempt": LAST_NUMBER,
                },
            )
        )

    def _insert(self, docs: list[dict[str, Any]], ids: list[int]) -> dict[int, str]:
        """Insert one chunk's documents (unordered); returns ``{id: hash}`` of those
        :data:`UNIQUE_INDEX` refused (:func:`is_hash_conflict`: another launch inserted the
        hash first). On any other error (Ctrl-C included) the ones written are removed again
        before it is raised: no half-staged chunk. Of a write error (a duplicate ``_id``: SEML
        0.5's ``seml add`` numbers ``max + 1`` and may take an id reserved here before this
        insert) the document refused is not ours: only the ones written are removed."""
        from pymongo.errors import BulkWriteError, PyMongoError

        try:
            self.collection.insert_many(docs, ordered=False)
        except BulkWriteError as error:
            errors = error.details.get("writeErrors") or []
            if errors and all(is_hash_conflict(e) for e in errors):
                if not error.details.get("writeConcernErrors"):
                    return {ids[e["index"]]: docs[e["index"]]["config_hash"] for e in errors}
            refused = {e["index"] for e in errors}
            inserted = [exp_id for i, exp_id in enumerate(ids) if i not in refused]
            self.collection.delete_many({"_id": {"$in": inserted}, "status": states.STAGED})
            _refuse_oversized(docs)
            raise
        except BaseException as error:
            self.collection.delete_many({"_id": {"$in": ids}, "status": states.STAGED})
            if isinstance(error, PyMongoError):  # the driver's or the server's size check
                _refuse_oversized(docs)
            raise
        return {}

    def _take_lost(self, lost: Mapping[int, str]) -> None:
        """Record the refused documents of :meth:`_insert` (none: nothing to do)."""
        if lost:
            self.lost.update(lost)
            self.new_ids = [i for i in self.new_ids if i not in lost]

    def _settle(self) -> None:
        """Wait for the insert under way, if any; raise its error (its documents are removed
        already, and its ids are taken out of :attr:`new_ids`). A Ctrl-C while waiting
        leaves it under way (:meth:`undo` waits for it again)."""
        if self._inserting is None:
            return
        from concurrent.futures import wait

        future, ids = self._inserting
        wait([future])
        self._inserting = None
        if future.exception() is not None:
            del self.new_ids[-len(ids) :]
            future.result()  # raises the insert's error
        self._take_lost(future.result())

    def _shutdown(self) -> None:
        if self._worker is not None:
            self._worker.shutdown(wait=True)
            self._worker = None

    def add_chunk(
        self,
        hashes: Sequence[str],
        make_document: Callable[[int, int], dict[str, Any]],
        refresh_existing: Callable[[int], dict[str, Any]],
    ) -> list[int]:
        """Stage the next chunk of points; returns the ids of its new documents (ascending).

        Args:
            hashes: ``config_hash`` per point of the chunk (the launch's next points).
            make_document: ``(chunk offset, exp_id) -> document`` of a new point.
            refresh_existing: ``chunk offset -> {field: value}`` set on a re-run or
                re-submitted document in :meth:`finish` (this launch's ``hydra``/``seml``).

        The chunk's documents are built here; with ``overlap`` they are inserted in the
        worker thread after the previous chunk's insert ended (whose error, if any, is raised
        here). On an error (Ctrl-C included) while inserting, the chunk's documents written
        are removed again (the caller :meth:`undo`es the earlier chunks). Raises pymongo
        errors.
        """
        collection = self.collection
        if not self._indexed:
            collection.create_index("config_hash")
            if not self.force:
                ensure_unique_index(collection)
            self._indexed = True
        found = self._existing(hashes)
        if self.recover is not None and any(d.get("status") == states.PENDING for d in found):
            self.recover(hashes)  # only PENDING experiments can need it: found them again
            found = self._existing(hashes)
        start = len(self.ids)
        plan = plan_chunk(hashes, found, self.force, self.seen, start)
        ids: list[int | None] = [None] * len(hashes)
        chunk_new: list[int] = []
        if plan.new:
            chunk_new = list(
                next_ids(
                    self.db,
                    f"{self.collection_name}._id",
                    len(plan.new),
                    floor=_max_of(collection, "_id"),
                )
            )
            docs = [make_document(i - start, e) for i, e in zip(plan.new, chunk_new)]
            if not self.force:  # one document per hash (UNIQUE_INDEX): see finish()
                for new_doc in docs:
                    new_doc[UNIQUE_FIELD] = True
            self._settle()  # one insert at a time, in id order
            self.new_ids.extend(chunk_new)
            if self._overlap:
                if self._worker is None:
                    from concurrent.futures import ThreadPoolExecutor

                    self._worker = ThreadPoolExecutor(1, thread_name_prefix="seml-stage")
                self._inserting = (self._worker.submit(self._insert, docs, chunk_new), chunk_new)
            else:
                try:
                    lost = self._insert(docs, chunk_new)
                except BaseException:
                    del self.new_ids[-len(chunk_new) :]
                    raise
                self._take_lost(lost)
            del docs
            for i, exp_id in zip(plan.new, chunk_new):
                ids[i - start] = exp_id
        rerun, resubmit = set(plan.rerun), set(plan.resubmit)
        for index, doc in plan.existing.items():
            offset = index - start
            if doc["_id"] is None:  # a repeat of a new point of this launch
                same_as = doc["same_as"]
                ids[offset] = ids[same_as - start] if same_as >= start else self.ids[same_as]
                continue
            exp_id = doc["_id"]
            ids[offset] = exp_id
            if exp_id in self.updates or exp_id in self.awaited_docs:
                continue  # two points of this sweep, one experiment
            if index in rerun or index in resubmit:
                self.updates[exp_id] = (doc, index in rerun, refresh_existing(offset))
            else:
                self.awaited_docs[exp_id] = doc
        self.ids.extend(int(i) for i in ids)  # type: ignore[arg-type]
        return chunk_new

    def undo(self) -> None:
        """Remove the new documents this launch inserted that are still STAGED (a later chunk
        failed), once the insert under way has ended (its own error is not raised: the
        caller's is); existing experiments were not written yet. Raises pymongo errors."""
        try:
            self._settle()
        except BaseException:  # noqa: S110  (its documents are removed already)
            pass
        self._shutdown()
        for part in chunked(self.new_ids, DELETE_CHUNK):
            self.collection.delete_many({"_id": {"$in": part}, "status": states.STAGED})
        self.new_ids = []

    def _concurrent(self) -> dict[int, StagedElsewhere]:
        """Map the points whose new document :data:`UNIQUE_INDEX` refused to the experiment
        another launch inserted for their hash (in :attr:`ids`); returns ``{reserved id: that
        experiment}``. A point whose other experiment is gone again (that launch undid its
        staging, or a ``delete``) keeps its id, which names no document: it ends as deleted."""
        if not self.lost:
            return {}
        winners: dict[str, StagedElsewhere] = {}
        for part in chunked(sorted(set(self.lost.values())), DELETE_CHUNK):
            for doc in self.collection.find(
                {"config_hash": {"$in": part}, UNIQUE_FIELD: True},
                {"config_hash": 1, "batch_id": 1, "seml.payload_file": 1},
            ):
                seml = doc.get("seml")
                payload = seml.get("payload_file") if isinstance(seml, Mapping) else None
                winners[doc["config_hash"]] = StagedElsewhere(
                    doc["_id"], payload, doc.get("batch_id")
                )
        taken = {i: winners[h] for i, h in self.lost.items() if h in winners}
        self.ids = [taken[i].exp_id if i in taken else i for i in self.ids]
        self.lost = {}
        return taken

    def finish(self) -> StageResult:
        """Reset the re-run experiments and refresh the re-submitted ones (each only while it
        still has the status it was found with; one that changed meanwhile is awaited), map
        the points another launch staged at the same time to its experiments
        (:attr:`StageResult.concurrent`), and return the launch's :class:`StageResult`, once
        every chunk is inserted. Raises pymongo errors, and the error of the last chunk's
        insert."""
        self._settle()
        self._shutdown()
        taken = self._concurrent()
        awaited: dict[str, list[int]] = {}
        for exp_id, doc in self.awaited_docs.items():
            awaited.setdefault(doc["status"], []).append(exp_id)
        rerun_ids: list[Any] = []
        resubmit_ids: list[Any] = []
        moved: list[dict[str, Any]] = []
        for exp_id, (doc, is_rerun, fields) in self.updates.items():
            # a re-run's earlier run goes into its attempt history in this same write
            result = self.collection.update_one(
                {"_id": exp_id, "status": doc["status"]},
                move_pipeline(BY_LAUNCH, {"status": states.STAGED, **fields}, RUN_FIELDS),
            )
            if not result.modified_count:
                awaited.setdefault(doc["status"], []).append(exp_id)
                continue
            if is_rerun:  # the earlier run's metrics are kept as its attempt's, apart
                moved.append({**doc, "attempt": number_after(doc.get("last_attempt"))})
            (rerun_ids if is_rerun else resubmit_ids).append(exp_id)
        if moved:
            from seml_hydra.store.metrics import tag_metrics

            tag_metrics(self.db, self.collection_name, moved)
        self.updates = {}
        return StageResult(
            self.ids,
            self.batch_id,
            self.new_ids,
            rerun_ids,
            resubmit_ids,
            awaited,
            sorted({t.exp_id for t in taken.values()}),
            taken,
        )
