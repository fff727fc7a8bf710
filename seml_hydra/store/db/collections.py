"""Collections: which names may hold experiments, where their metrics live, and the atomic id
counters (:func:`next_ids`). (Opening one: :func:`seml_hydra.store.db.client.get_collection`.)

Experiment ids are handed out by :func:`next_ids`, an atomic counter that never collides with
ids that SEML itself wrote (SEML 0.5 uses ``max(_id) + 1``, starting at 1). ``pymongo`` is
imported inside the functions that need it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from seml_hydra.core.shell import seml_for
from seml_hydra.store.errors import CollectionNotFound, InvalidCollectionName

if TYPE_CHECKING:
    from seml_hydra.core.schema import Collection, Database, ExperimentCollection

__all__ = [
    "CLI_WORDS",
    "CENSUS_FIELDS",
    "CENSUS_INDEX",
    "COUNTERS_COLLECTION",
    "JOB_INDEXES",
    "METRICS_PREFIX",
    "RESERVED_COLLECTIONS",
    "RESERVED_PREFIXES",
    "ensure_job_indexes",
    "is_reserved_collection",
    "metrics_collection_name",
    "must_exist",
    "next_ids",
    "validate_collection_name",
]

#: Collection that holds the id counters of :func:`next_ids`.
COUNTERS_COLLECTION = "seml_hydra_counters"

#: collections that hold something else than experiments: our id counters, Sacred's shared
#: metrics collection (where runs before per-collection metrics wrote), GridFS's bucket
RESERVED_COLLECTIONS = frozenset({COUNTERS_COLLECTION, "metrics", "fs"})
#: the metrics of experiments collection ``C`` are in ``METRICS_PREFIX + C``
#: (:func:`metrics_collection_name`); no experiments collection may start with it
METRICS_PREFIX = "seml_hydra_metrics."
#: name prefixes of collections that hold something else than experiments: GridFS's files and
#: chunks, MongoDB's own (``system.*``), the metrics collections
RESERVED_PREFIXES = ("fs.", "system.", METRICS_PREFIX)


def is_reserved_collection(name: str) -> bool:
    """Whether collection ``name`` holds something else than experiments (counters, GridFS,
    metrics, MongoDB's ``system.*``: :data:`RESERVED_COLLECTIONS`, :data:`RESERVED_PREFIXES`),
    so that it is neither listed nor accepted as an experiments collection. Pure."""
    return name in RESERVED_COLLECTIONS or name.startswith(RESERVED_PREFIXES)


def metrics_collection_name(collection: str) -> str:
    """The metrics collection of experiments collection ``collection``:
    ``"seml_hydra_metrics.<collection>"`` (documents ``{run_id, name, steps, values,
    timestamps}``, Sacred's format; ``run_id`` is the experiment's ``_id``). It is Omniboard's
    ``metricsCollectionName`` for runs collection ``collection``. Pure."""
    return METRICS_PREFIX + collection


#: the ``seml`` command's own first words: a collection so named could not be reached by
#: ``seml NAME COMMAND``
CLI_WORDS = frozenset({"list", "queue", "drop", "configure", "clean-db"})


def must_exist(db: Database, collection: str) -> None:
    """Raise :class:`~seml_hydra.store.errors.CollectionNotFound` when ``db`` (a pymongo
    database) has no collection ``collection``: a misspelt name reads as an error, not as a
    collection without results or experiments (``get_results``, ``get_metrics``, every ``seml
    <collection>`` command). One ``listCollections`` of that name."""
    if collection not in db.list_collection_names(filter={"name": collection}):
        raise CollectionNotFound(collection, db.name)


def validate_collection_name(name: str) -> str:
    """Check a collection name before it reaches MongoDB.

    Rules (MongoDB's naming restrictions, plus a length cap): a non-empty string of at most
    100 characters, without ``$`` or a control character (below 0x20: null, newline, carriage
    return, tab...; or 0x7f: the name reaches the sbatch script as ``--comment`` and
    ``--job-name``, where a newline would end the ``#SBATCH`` block and inject a shell line),
    not starting with ``system.``
    (reserved), without a leading or trailing dot, none of the collections the database
    already uses for other things (:data:`RESERVED_COLLECTIONS`, GridFS's ``fs.*``, the metrics
    collections ``seml_hydra_metrics.*``), and not a
    first word of the ``seml`` command (:data:`CLI_WORDS`, or starting with ``-``).

    Args:
        name: the collection name, e.g. ``"my_sweep"``.

    Returns:
        ``name`` unchanged.

    Raises:
        InvalidCollectionName: (a ``DatabaseError`` and ``ValueError``) saying which rule
            the name breaks.
    """

    def bad(why: str) -> InvalidCollectionName:
        return InvalidCollectionName(f"Invalid collection name {name!r}: {why}.")

    if not isinstance(name, str):
        raise InvalidCollectionName(
            f"Invalid collection name {name!r}: it must be a string, not {type(name).__name__}."
        )
    if not name:
        raise bad("it is empty")
    if len(name) > 100:
        raise bad(f"it has {len(name)} characters, at most 100 are allowed")
    if "$" in name:
        raise bad("it must not contain '$'")
    control = next((c for c in name if ord(c) < 0x20 or ord(c) == 0x7F), None)
    if control is not None:
        raise bad(
            f"it contains the control character {control!r}; use printable characters only "
            "(the name goes into the Slurm job script)"
        )
    if name.startswith("system."):
        raise bad("names starting with 'system.' are reserved by MongoDB")
    if name.startswith(".") or name.endswith("."):
        raise bad("it must not start or end with '.'")
    if name in CLI_WORDS or name.startswith("-"):
        raise bad(
            f"`{seml_for(name)} ...` is the seml command's own, so the collection could not be "
            "managed; choose another name (hydra.launcher.collection=...)"
        )
    if is_reserved_collection(name):
        raise bad(
            "it is used by seml-hydra, GridFS or Sacred (seml_hydra_counters, fs.*, metrics, "
            f"{METRICS_PREFIX}*); choose another name (hydra.launcher.collection=...)"
        )
    return name


def next_ids(
    db: Database,
    counter_name: str,
    n: int,
    floor: Callable[[], int | None] | None = None,
) -> range:
    """Atomically reserve ``n`` new integer ids from a counter.

    The counter is the document ``{_id: counter_name, value: <last id handed out>}`` in the
    collection ``seml_hydra_counters`` of ``db``. Concurrent callers (threads, processes,
    hosts) always get disjoint ranges because every reservation is one ``$inc`` that returns
    the new value (``find_one_and_update`` with ``ReturnDocument.AFTER``).

    When the counter does not exist yet, ``floor()`` is called once (e.g. the largest ``_id``
    SEML already wrote to the collection, since SEML 0.5 numbers experiments ``max + 1``
    starting at 1) and the counter is created with ``$max: {value: floor()}`` before the
    ``$inc``. ``$max`` never lowers the value, so two processes creating the counter at once
    still never get the same ids. Without ``floor`` a new counter starts at 0 (first id 1).

    Args:
        db: the database (from :func:`seml_hydra.store.db.client.connect`).
        counter_name: counter key, e.g. the experiment collection's name.
        n: number of ids to reserve (``>= 0``; 0 returns an empty range).
        floor: called only when the counter does not exist; returns the largest id already
            in use (``None`` counts as 0).

    Returns:
        ``range(first, first + n)`` of ids nobody else got.

    Raises:
        ValueError: ``n`` is negative or ``floor()`` returned a non-integer.
        pymongo.errors.PyMongoError: the database operation failed.
    """
    from pymongo import ReturnDocument  # lazy: pymongo is slow to import
    from pymongo.errors import DuplicateKeyError

    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"next_ids: n must be a non-negative integer, got {n!r}")
    counters = db[COUNTERS_COLLECTION]
    query = {"_id": counter_name}
    inc = {"$inc": {"value": n}}

    doc = None
    if floor is not None:
        doc = counters.find_one_and_update(query, inc, return_document=ReturnDocument.AFTER)
        if doc is None:  # the counter does not exist yet: create it at the floor
            start = floor()
            start = 0 if start is None else start
            if isinstance(start, bool) or not isinstance(start, int):
                raise ValueError(f"next_ids: floor() must return an int, got {start!r}")
            for attempt in range(2):
                try:
                    counters.update_one(query, {"$max": {"value": start}}, upsert=True)
                    break
                except DuplicateKeyError:  # created concurrently; $max again on the doc
                    if attempt:
                        raise
    if doc is None:
        for attempt in range(2):
            try:
                doc = counters.find_one_and_update(
                    query, inc, upsert=True, return_document=ReturnDocument.AFTER
                )
                break
            except DuplicateKeyError:  # concurrent upsert of a new counter; retry once
                if attempt:
                    raise
    assert doc is not None
    last = int(doc["value"])
    return range(last - n + 1, last + 1)


#: the indexes of an experiments collection on the fields the ``seml`` commands filter by
#: (path, sparse), beside the :data:`CENSUS_INDEX` (whose first field, ``status``, serves the
#: queries by state: the active experiments of ``status`` / ``cancel``): the Slurm array of a submission or a run (``seml queue``, ``cancel``: the experiments of
#: the jobs squeue lists) and the mark of a submission under way (``slurm.0.submitting``, which
#: every ``status`` looks for: ``launch.recovery.recover_interrupted_submissions``; sparse: only
#: the experiments being submitted have it) and the step of an experiment stopped early
#: (``pruned.step``, which ``status`` counts apart; sparse); created by :func:`ensure_job_indexes`
JOB_INDEXES = (
    ("slurm.array_id", False),
    ("execution.array_id", False),
    ("slurm.0.submitting", True),
    ("pruned.step", True),
)


#: the paths of the :data:`CENSUS_INDEX`, in its order: what ``status`` and ``queue`` count the
#: experiments by (``track.census``). ``slurm`` is a list, so ``slurm.array_id`` would make an
#: index multikey (never covering); the positional ``slurm.0.*`` paths keep it a plain one, whose
#: keys MongoDB reads without fetching a document
CENSUS_FIELDS = (
    "status",
    "seml.description",
    "slurm.0.array_id",
    "slurm.0.task_id",
    "slurm.0.cluster",
    "slurm.0.job_id",
    "slurm.0.num_tasks",
    "execution.array_id",
)
#: the name of the compound index on :data:`CENSUS_FIELDS` and ``_id``
CENSUS_INDEX = "seml_hydra_census"
#: indexes earlier versions created that :func:`ensure_job_indexes` drops: ``status`` alone
#: (the census index's prefix answers its queries; every write of a state paid for both, and a
#: ``delete`` of 100,000 experiments took up to half as long again with it)
RETIRED_INDEXES = ("status_1",)


def ensure_job_indexes(collection: ExperimentCollection | Collection) -> bool:
    """Create the :data:`JOB_INDEXES` and the :data:`CENSUS_INDEX` of ``collection`` unless they
    exist (one ``createIndexes``
    round trip; building them once on a large collection takes a moment, after that MongoDB
    answers at once), and drop the :data:`RETIRED_INDEXES` an earlier version made (one
    ``listIndexes``; a ``dropIndexes`` only when one is there). Returns False when MongoDB
    refused (e.g. a user who may only read: the commands then work without them), True
    otherwise."""
    import pymongo
    from pymongo.errors import OperationFailure

    try:
        census = [(path, 1) for path in (*CENSUS_FIELDS, "_id")]
        collection.create_indexes(
            [pymongo.IndexModel([(path, 1)], sparse=sparse) for path, sparse in JOB_INDEXES]
            + [pymongo.IndexModel(census, name=CENSUS_INDEX)]
        )
        names = {index["name"] for index in collection.list_indexes()}
        for name in RETIRED_INDEXES:
            if name in names:
                collection.drop_index(name)
    except OperationFailure:
        return False
    return True
