"""Read experiments back: configs and results of a collection, as dicts or a pandas DataFrame.

    from seml_hydra.store.results import get_results
    df = get_results("train", filter={"status": "COMPLETED"}, to_data_frame=True)

Stored results come back as plain data (numbers, strings, lists, dicts): the run step stores
them so (``seml_hydra.core.documents.storable_result``). Reading never runs code: a result stored by
Sacred's serializer that names an object to rebuild (``py/reduce``, ``py/object``...) comes
back as the plain dict it is stored as, with a :class:`StoredObjectWarning`
(``seml_hydra.core.documents.plain_result``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from seml_hydra.core import states as core_states
from seml_hydra.core.attempts import LAST_NUMBER, check_selector, number_after, resolve_attempt
from seml_hydra.core.documents import plain_result
from seml_hydra.store.db.client import connect
from seml_hydra.store.db.collections import (
    metrics_collection_name,
    must_exist,
    validate_collection_name,
)
from seml_hydra.store.db.settings import resolve_db_settings

if TYPE_CHECKING:
    from seml_hydra.core.schema import Database

#: fields returned when ``fields`` is not given
DEFAULT_FIELDS = ("_id", "batch_id", "status", "config", "result")


class StoredObjectWarning(UserWarning):
    """A stored result holds an object that would need code to rebuild; it was returned as the
    plain dict it is stored as (see :func:`restore_results`)."""


def restore_results(docs: Sequence[dict[str, Any]], collection: str) -> None:
    """Replace each ``doc["result"]`` of ``docs`` (in place) by its plain form
    (``seml_hydra.core.documents.plain_result``: no code runs). When some part would need code to
    rebuild, warns once for the whole read with a :class:`StoredObjectWarning` naming each
    experiment (``collection`` and ``_id``) and key."""
    found: list[str] = []
    for _ in plain_results(docs, found):
        pass
    warn_stored_objects(found, collection, stacklevel=4)


def plain_results(docs: Iterable[dict[str, Any]], found: list[str]) -> Iterator[dict[str, Any]]:
    """Each of ``docs`` with its ``result`` replaced by its plain form (in place,
    ``seml_hydra.core.documents.plain_result``: no code runs), yielded as it comes; what
    would need code to rebuild is appended to ``found`` (``"experiment 3: result.model ..."``,
    for :func:`warn_stored_objects`)."""
    for doc in docs:
        if "result" in doc:
            doc["result"], problems = plain_result(doc["result"])
            found.extend(f"experiment {doc.get('_id')}: {p}" for p in problems)
        yield doc


def read_results(
    collection: Any,
    query: Mapping[str, Any],
    projection: Mapping[str, Any],
    found: list[str],
    *,
    batch_size: int = 0,
) -> Iterator[dict[str, Any]]:
    """The documents of ``collection`` (a pymongo collection) matching ``query``, with the
    fields of ``projection``, sorted by ``_id``, yielded as MongoDB hands them over
    (``batch_size`` documents per batch; 0: MongoDB's default) with their results in plain
    form (:func:`plain_results`, what would need code appended to ``found``): the read of
    :func:`get_results` and of the ``results`` command (``manage.results_table``)."""
    cursor = collection.find(query, projection, batch_size=batch_size).sort("_id", 1)
    return plain_results(cursor, found)


def warn_stored_objects(found: Sequence[str], collection: str, stacklevel: int = 3) -> None:
    """One :class:`StoredObjectWarning` for a read of ``collection`` whose results held stored
    objects, ``found`` naming each (``"experiment 3: result.model is a ..."``); nothing when
    ``found`` is empty. ``stacklevel`` as ``warnings.warn``'s, counted from the caller."""
    if not found:
        return
    import warnings

    warnings.warn(
        f"Results of collection {collection!r} hold stored objects that would need code to "
        f"rebuild; they are returned as stored (plain dicts), not rebuilt: {'; '.join(found)}",
        StoredObjectWarning,
        stacklevel=stacklevel,
    )


def get_results(
    collection: str,
    filter: Mapping[str, Any] | Sequence[str] | None = None,
    fields: Sequence[str] | None = None,
    to_data_frame: bool = False,
    db: Database | None = None,
    metrics: bool = False,
    *,
    states: Sequence[str] | None = None,
    filter_dict: Mapping[str, Any] | None = None,
    progress: bool = False,
) -> Any:
    """Configs and results of the experiments of ``collection``, sorted by ``_id``.

    Args:
        collection: the collection name.
        filter: a MongoDB filter, e.g. ``{"status": "COMPLETED", "config.model.name": "small"}``
            (default: COMPLETED experiments only). A list of strings here is taken as
            ``fields`` (SEML's ``get_results(collection, fields)`` order).
        fields: the fields to return, dotted paths allowed (``"config.optimizer.lr"``); default
            ``_id``, ``batch_id``, ``status``, ``config``, ``result``.
        to_data_frame: return a ``pandas.DataFrame`` whose columns are the flattened fields
            (``config.optimizer.lr``); requires pandas (``pip install 'seml-hydra[pandas]'``).
        db: a pymongo database (default: resolved like the launcher and the ``seml`` command).
        metrics: also return each experiment's metrics as ``metrics`` (see :func:`get_metrics`:
            ``{name: {"steps": [...], "values": [...], "timestamps": [...]}}``).
        states: only experiments in these states (SEML's ``states``; ``QUEUED`` is
            ``STAGED``); it replaces a ``status`` of the filter. Default: the filter's own
            ``status``, or COMPLETED when no filter is given.
        filter_dict: SEML's name of ``filter`` (give one of the two).
        progress: show a progress bar on stderr while reading (SEML's ``progress``; rich).

    Returns:
        A list of dicts (nested as stored; results as plain data, see
        :func:`restore_results`), or a DataFrame.

    Raises:
        ImportError: ``to_data_frame=True`` without pandas.
        ValueError: an unknown state in ``states``, or both ``filter`` and ``filter_dict``.
        seml_hydra.store.errors.CollectionNotFound: the database has no such collection.
        seml_hydra.store.errors.DatabaseError: the database cannot be reached.
    """
    pandas = need_pandas("get_results") if to_data_frame else None
    if filter is not None and not isinstance(filter, Mapping):
        if fields is not None:
            raise ValueError("get_results: a list as `filter` is taken as `fields`; not both.")
        fields = list(filter)
        filter = None
    if filter_dict is not None:
        if filter is not None:
            raise ValueError("get_results: give `filter` or `filter_dict`, not both.")
        filter = filter_dict
    query = results_filter(filter, states)
    validate_collection_name(collection)
    if db is None:
        db = connect(resolve_db_settings(None))
    must_exist(db, collection)
    wanted = list(fields) if fields else list(DEFAULT_FIELDS)
    projection = {name: 1 for name in wanted}
    if "_id" not in wanted and not metrics:
        projection["_id"] = 0
    found: list[str] = []
    cursor: Iterable[dict[str, Any]] = read_results(db[collection], query, projection, found)
    if progress:
        from rich.console import Console
        from rich.progress import track

        total = db[collection].count_documents(query)
        cursor = track(cursor, total=total, description="Reading", console=Console(stderr=True))
    docs = list(cursor)
    warn_stored_objects(found, collection)
    if metrics:
        by_id = get_metrics(collection, [d["_id"] for d in docs], db=db)
        for doc in docs:
            doc["metrics"] = by_id.get(doc["_id"], {})
            if "_id" not in wanted:
                del doc["_id"]
    if pandas is None:
        return docs
    return pandas.DataFrame([flatten(doc) for doc in docs])


def need_pandas(caller: str) -> Any:
    """The ``pandas`` module, for ``caller(to_data_frame=True)``; raises ``ImportError`` naming
    the extra to install when it is missing."""
    try:
        import pandas
    except ImportError:
        raise ImportError(
            f"{caller}(to_data_frame=True) needs pandas: pip install 'seml-hydra[pandas]'"
        ) from None
    return pandas


def results_filter(
    filter: Mapping[str, Any] | None, states: Sequence[str] | None
) -> dict[str, Any]:
    """The MongoDB filter of :func:`get_results`, pure: ``filter`` (default: COMPLETED only
    when ``states`` is not given either) with its ``status`` replaced by ``states`` when
    ``states`` is non-empty (SEML's rule; ``QUEUED`` is ``STAGED``, and STAGED also matches a
    stored ``QUEUED``). Raises ``ValueError`` for an unknown state."""
    if filter is None and states is None:
        return {"status": core_states.COMPLETED}
    query = dict(filter or {})
    if states:
        names = []
        for state in states:
            name = core_states.ALIASES.get(str(state).upper(), str(state).upper())
            if name not in core_states.ALL:
                raise ValueError(
                    f"Unknown state {state!r}; the states are {', '.join(core_states.ALL)}."
                )
            names.append(name)
        names += [old for old, new in core_states.ALIASES.items() if new in names]
        query["status"] = {"$in": names}
    return query


def get_metrics(
    collection: str,
    ids: Sequence[Any] | None = None,
    db: Database | None = None,
    attempt: int | None = None,
) -> dict[Any, dict[str, dict[str, list[Any]]]]:
    """The metrics logged by experiments of ``collection`` (``seml_hydra.job.metrics.log_scalar``).

    They are read from the collection's own metrics collection
    (``collections.metrics_collection_name``: ``seml_hydra_metrics.<collection>``, by ``run_id``);
    a metric listed in an experiment's ``info.metrics`` but not found there (a run from before
    per-collection metrics, or SEML's) is read from the shared ``metrics`` collection by the id
    ``info.metrics`` gives (never by ``run_id``, which is ambiguous across collections).

    Args:
        collection: the experiments collection name.
        ids: the experiments' ``_id`` s (default: every experiment of the collection).
        db: a pymongo database (default: resolved like the launcher and the ``seml`` command).
        attempt: which run of each experiment (``core.attempts``): None, the current one (the
            one the document holds now); a positive number, that attempt (1 = the first run,
            as ``seml <col> print-attempts`` numbers them); a negative one counts back (-1 =
            the current run, -2 = the one before). Earlier attempts' metrics are those a
            ``reset`` or a new launch kept (``store.metrics.tag_metrics``); an experiment
            without that attempt (never ran so often, or it fell out of the last 20) is left
            out, and when none of the experiments read has it, ``LookupError`` says which
            attempts they have.

    Returns:
        ``{experiment _id: {metric name: {"steps": [...], "values": [...], "timestamps":
        [...]}}}`` (timestamps are ``datetime``); experiments without metrics are left out.

    Raises:
        ValueError: ``attempt`` is 0 or not an integer.
        LookupError: no experiment read has attempt ``attempt`` (e.g. ``attempt=3`` of
            experiments that ran twice); the message names the attempts there are.
        seml_hydra.store.errors.InvalidCollectionName: a bad ``collection``.
        seml_hydra.store.errors.CollectionNotFound: the database has no such collection.
        seml_hydra.store.errors.DatabaseError: the database cannot be reached.
    """
    from bson import ObjectId
    from bson.errors import InvalidId

    if attempt is not None:
        check_selector(attempt)
    validate_collection_name(collection)
    if db is None:
        db = connect(resolve_db_settings(None))
    must_exist(db, collection)
    query = {} if ids is None else {"_id": {"$in": list(ids)}}
    fields: dict[str, Any] = {"_id": 1, "info.metrics": 1}
    if attempt is not None:
        fields["last_attempt"] = LAST_NUMBER
    docs = list(db[collection].find(query, fields))
    out: dict[Any, dict[str, dict[str, list[Any]]]] = {}
    if attempt is not None:
        docs = _earlier_attempts(db, collection, docs, attempt, out)

    def add(run_id: Any, metric: Mapping[str, Any]) -> None:
        _add_metric(out, run_id, metric)

    own = db[metrics_collection_name(collection)]
    for metric in own.find({"run_id": {"$in": [d["_id"] for d in docs]}}):
        add(metric["run_id"], metric)
    legacy: dict[ObjectId, Any] = {}
    for doc in docs:
        for entry in (doc.get("info") or {}).get("metrics") or []:
            if not isinstance(entry, Mapping) or entry.get("name") in out.get(doc["_id"], {}):
                continue
            try:
                legacy[ObjectId(str(entry.get("id")))] = doc["_id"]
            except (InvalidId, TypeError):
                continue
    if legacy:
        for metric in db["metrics"].find({"_id": {"$in": list(legacy)}}):
            add(legacy[metric["_id"]], metric)
    return out


def _earlier_attempts(
    db: Database,
    collection: str,
    docs: list[dict[str, Any]],
    attempt: int,
    out: dict[Any, dict[str, dict[str, list[Any]]]],
) -> list[dict[str, Any]]:
    """For :func:`get_metrics` with ``attempt``: add to ``out`` the metrics of the experiments
    ``docs`` (each with ``last_attempt``, the number of its last history entry) whose
    ``attempt`` is an earlier run, from the metric documents tagged with it (the collection's
    own, and the shared ``metrics`` ones tagged with ``collection``); returns the documents
    whose ``attempt`` is their current run (read as usual)."""
    current: list[dict[str, Any]] = []
    wanted: dict[int, list[Any]] = {}
    for doc in docs:
        now = number_after(doc.get("last_attempt"))
        try:
            number = resolve_attempt(attempt, now)
        except ValueError:
            continue  # this experiment has no such attempt
        if number == now:
            current.append(doc)
        else:
            wanted.setdefault(number, []).append(doc["_id"])
    if docs and not current and not wanted:
        raise LookupError(missing_attempt_message(attempt, docs, collection))
    if wanted:
        tagged = [{"attempt_of": {"$in": ids}, "attempt": n} for n, ids in wanted.items()]
        for metric in db[metrics_collection_name(collection)].find({"$or": tagged}):
            _add_metric(out, metric["attempt_of"], metric)
        shared = {"$or": tagged, "collection": collection}
        for metric in db["metrics"].find(shared):
            if metric["name"] not in out.get(metric["attempt_of"], {}):
                _add_metric(out, metric["attempt_of"], metric)
    return current


def missing_attempt_message(
    attempt: int, docs: Sequence[Mapping[str, Any]], collection: str
) -> str:
    """The error of a :func:`get_metrics` ``attempt`` that none of ``docs`` (each with
    ``last_attempt``) has (pure): the attempts they have, e.g. ``attempt=3: no experiment read
    of collection 'c' has it; they have attempts 1 to 2 (at most)``."""
    most = max(number_after(doc.get("last_attempt")) for doc in docs)
    have = "attempt 1" if most == 1 else f"attempts 1 to {most}"
    return (
        f"attempt={attempt}: no experiment read of collection {collection!r} has it; they "
        f"have {have} (at most; print-attempts lists each one's)."
    )


def _add_metric(
    out: dict[Any, dict[str, dict[str, list[Any]]]], run_id: Any, metric: Mapping[str, Any]
) -> None:
    """Put metric document ``metric`` into ``out[run_id][its name]``."""
    out.setdefault(run_id, {})[metric["name"]] = {
        key: list(metric.get(key) or []) for key in ("steps", "values", "timestamps")
    }


#: the types of stored values that are never mappings (:func:`flatten`)
_NOT_MAPPINGS = frozenset({str, int, float, bool, list, bytes})


def flatten(doc: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``doc`` with nested mappings flattened into dotted keys, pure:
    ``{"config": {"lr": 0.1}, "result": 1}`` -> ``{"config.lr": 0.1, "result": 1}`` (an empty
    mapping and lists stay values; the columns ``pandas.json_normalize`` gives, as SEML's
    ``get_results(to_data_frame=True)``)."""
    out: dict[str, Any] = {}
    for key, value in doc.items():
        name = f"{prefix}{key}"
        kind = type(value)  # plain values skip the (slow) abstract Mapping check
        if value and (kind is dict or (kind not in _NOT_MAPPINGS and isinstance(value, Mapping))):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out
