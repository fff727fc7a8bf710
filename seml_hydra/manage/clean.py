"""``clean-db``: remove what no experiment references any more (SEML's ``seml <collection>
clean-db``, ``database.clean_unreferenced_artifacts``).

Killed launches and interrupted ``delete``/``drop`` leave garbage behind: code snapshot files
and batch payloads in GridFS that no document names, Sacred artifacts of runs that are gone,
metrics of deleted experiments, and, for a collection dropped half-way, its metrics collection
and id counters. :func:`survey` says what there is (read only, for the question the CLI asks);
:func:`clean` removes it. Snapshot files and payloads go through the same lease-safe deletion
as ``delete`` (``store.snapshot.sources.delete_unused_files``): a file a launch is staging right now
(leased) is never touched, and a dropped collection's counters are kept while a launch holds a
lease on one of its files (it is being staged again).

GridFS chunks whose file is gone (a ``delete`` or ``clean-db`` killed between removing
``fs.files`` and ``fs.chunks``) belong to no collection any more: every ``clean-db`` removes
them once they are older than a launch's lease (``store.snapshot.sources.orphan_chunks``; younger ones
may be an upload under way, whose chunks GridFS writes before the file), reported as
``GridFS``.

Sacred's ``experiment.sources`` files are left alone: Sacred shares one file between runs of
every collection and records no collection on it (``delete`` removes them with their runs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from seml_hydra.manage.lifecycle import delete_orphan_sources
from seml_hydra.store.db.collections import (
    COUNTERS_COLLECTION,
    METRICS_PREFIX,
    metrics_collection_name,
)
from seml_hydra.store.payload import PAYLOAD_KIND, delete_orphan_payloads
from seml_hydra.store.snapshot.sources import (
    MANIFEST_TYPE,
    delete_unused_files,
    has_live_lease,
    orphan_chunks,
    unused_files,
)
from seml_hydra.track.cache import is_listed_collection

#: the GridFS file name Sacred's MongoObserver gives an artifact: artifact://<runs>/<_id>/<name>
ARTIFACT_PREFIX = "artifact://"
#: the name :func:`survey` and :func:`clean` report orphan GridFS chunks under
GRIDFS = "GridFS"
#: the counters of collection C (``store.db.collections.next_ids``)
COUNTER_SUFFIXES = ("._id", ".batch_id")


@dataclass
class Garbage:
    """What :func:`survey` found (or :func:`clean` removed) for one collection ``name``:
    GridFS file ids of ``source_files``, ``payloads`` and ``artifacts``, the number of
    ``metrics`` documents, and the ``counters`` (ids in ``seml_hydra_counters``). ``exists``:
    the collection itself is there (otherwise it was dropped, and its metrics collection goes
    whole). ``chunks``: ``{files_id: count}`` of GridFS chunks whose file is gone (only in the
    entry named :data:`GRIDFS`)."""

    name: str
    exists: bool = True
    source_files: list[Any] = field(default_factory=list)
    payloads: list[Any] = field(default_factory=list)
    artifacts: list[Any] = field(default_factory=list)
    metrics: int = 0
    counters: list[str] = field(default_factory=list)
    chunks: dict[Any, int] = field(default_factory=dict)

    def empty(self) -> bool:
        """Nothing to remove."""
        return not (
            self.source_files
            or self.payloads
            or self.artifacts
            or self.metrics
            or self.counters
            or self.chunks
        )

    def describe(self) -> str:
        """One line naming the counts (pure), e.g. ``"train: 3 source file(s), 1 payload(s)"``."""
        parts = [
            f"{len(self.source_files)} source file(s)" if self.source_files else "",
            f"{len(self.payloads)} payload(s)" if self.payloads else "",
            f"{len(self.artifacts)} artifact(s)" if self.artifacts else "",
            f"{self.metrics} metric(s)" if self.metrics else "",
            f"{len(self.counters)} id counter(s)" if self.counters else "",
            _chunks_text(self.chunks),
        ]
        where = self.name if self.exists else f"{self.name} (dropped)"
        return f"{where}: {', '.join(p for p in parts if p)}"


def _chunks_text(chunks: dict[Any, int]) -> str:
    """``"3 chunk(s) of 1 deleted file(s)"`` (pure; ``""`` for none)."""
    if not chunks:
        return ""
    return f"{sum(chunks.values())} chunk(s) of {len(chunks)} deleted file(s)"


def artifact_run_id(filename: str, name: str) -> Any:
    """The run ``_id`` in a Sacred artifact file name of collection ``name``
    (``artifact://<name>/<_id>/<artifact>``; an integer when it is one), or None when the name
    is not one of ``name``'s artifacts. Pure."""
    prefix = f"{ARTIFACT_PREFIX}{name}/"
    if not filename.startswith(prefix):
        return None
    run_id = filename[len(prefix) :].split("/", 1)[0]
    if not run_id:
        return None
    return int(run_id) if run_id.isdigit() else run_id


def counter_owner(counter_id: Any) -> str | None:
    """The collection a counter id belongs to (``"train._id"`` -> ``"train"``), pure."""
    for suffix in COUNTER_SUFFIXES:
        if isinstance(counter_id, str) and counter_id.endswith(suffix):
            return counter_id[: -len(suffix)] or None
    return None


def _artifacts(db: Any, name: str, dry_run: bool) -> list[Any]:
    """Artifacts of runs of ``name`` that are gone (their document deleted); an artifact of an
    existing run is kept, named or not (Sacred stores the file before naming it)."""
    candidates = {"filename": {"$regex": f"^{re.escape(f'{ARTIFACT_PREFIX}{name}/')}"}}
    files = list(db["fs.files"].find(candidates, {"_id": 1, "filename": 1}))
    if not files:
        return []
    run_ids = {artifact_run_id(f["filename"], name) for f in files}
    alive = {d["_id"] for d in db[name].find({"_id": {"$in": list(run_ids)}}, {"_id": 1})}

    def used() -> set[str]:
        return {str(f["_id"]) for f in files if artifact_run_id(f["filename"], name) in alive}

    act = unused_files if dry_run else delete_unused_files
    return act(db, {"_id": {"$in": [f["_id"] for f in files]}}, used)


def _metrics(db: Any, name: str, exists: bool, dry_run: bool) -> int:
    """Metrics documents of experiments of ``name`` that are gone (all of them when the
    collection was dropped)."""
    metrics = db[metrics_collection_name(name)]
    query: dict[str, Any] = {}
    if exists:  # the current run's (run_id) and the earlier attempts' (attempt_of)
        alive = db[name].distinct("_id")
        query = {"$nor": [{"run_id": {"$in": alive}}, {"attempt_of": {"$in": alive}}]}
    if dry_run:
        return metrics.count_documents(query)
    if not exists:
        count = metrics.estimated_document_count()
        db.drop_collection(metrics.name)
        return count
    return metrics.delete_many(query).deleted_count


def _counters(db: Any, name: str, exists: bool, dry_run: bool) -> list[str]:
    """The id counters of a dropped collection, unless a launch is staging into it (a live
    lease on one of its files)."""
    if exists:
        return []
    leased = has_live_lease(
        db,
        {
            "$or": [
                {"metadata.collection_name": name},
                {"metadata.collection": name, "metadata.kind": PAYLOAD_KIND},
            ]
        },
    )
    ids = [f"{name}{suffix}" for suffix in COUNTER_SUFFIXES]
    found = [c["_id"] for c in db[COUNTERS_COLLECTION].find({"_id": {"$in": ids}}, {"_id": 1})]
    if leased or not found:
        return []
    if not dry_run:
        db[COUNTERS_COLLECTION].delete_many({"_id": {"$in": found}})
    return found


def _garbage(db: Any, name: str, dry_run: bool) -> Garbage:
    exists = name in db.list_collection_names()
    return Garbage(
        name,
        exists,
        source_files=delete_orphan_sources(db, name, dry_run=dry_run),
        payloads=delete_orphan_payloads(db, name, dry_run=dry_run),
        artifacts=_artifacts(db, name, dry_run),
        metrics=_metrics(db, name, exists, dry_run),
        counters=_counters(db, name, exists, dry_run),
    )


def _every(db: Any, names: Iterable[str], dry_run: bool) -> list[Garbage]:
    found = [_garbage(db, n, dry_run) for n in names]
    found.append(Garbage(GRIDFS, chunks=orphan_chunks(db, dry_run=dry_run)))
    return [g for g in found if not g.empty()]


def survey(db: Any, names: Iterable[str]) -> list[Garbage]:
    """What :func:`clean` would remove for each collection of ``names`` now, and the orphan
    GridFS chunks (entry :data:`GRIDFS`), read only; entries with nothing to remove are left
    out."""
    return _every(db, names, dry_run=True)


def clean(db: Any, names: Iterable[str]) -> list[Garbage]:
    """Remove the garbage of each collection of ``names`` (see the module docstring), then the
    orphan GridFS chunks; returns what was removed (entries with nothing removed left out).
    Raises pymongo errors."""
    return _every(db, names, dry_run=False)


def every_collection(db: Any) -> list[str]:
    """The experiment collections of the database, and the names of dropped ones that left
    something behind (snapshot files, payloads, artifacts, a metrics collection, counters)."""
    names = set(db.list_collection_names())
    found = {n for n in names if is_listed_collection(n)}
    found.update(n[len(METRICS_PREFIX) :] for n in names if n.startswith(METRICS_PREFIX))
    files = db["fs.files"]
    snapshots = {"metadata.type": {"$in": ["source_file", MANIFEST_TYPE]}}
    found.update(files.distinct("metadata.collection_name", snapshots))
    found.update(files.distinct("metadata.collection", {"metadata.kind": PAYLOAD_KIND}))
    for f in files.find({"filename": {"$regex": f"^{ARTIFACT_PREFIX}"}}, {"filename": 1}):
        found.add(f["filename"][len(ARTIFACT_PREFIX) :].split("/", 1)[0])
    for counter in db[COUNTERS_COLLECTION].find({}, {"_id": 1}):
        found.add(counter_owner(counter["_id"]) or "")
    return sorted(n for n in found if isinstance(n, str) and n and is_listed_collection(n))
