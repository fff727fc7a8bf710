"""The experiments counted from an index alone: ``status`` and ``queue`` without reading a
document (100,000 experiments feel like 100).

``store.db.collections.CENSUS_INDEX`` is a compound index on ``status``, ``seml.description``, the
positional ``slurm.0.*`` job fields, ``execution.array_id`` and ``_id``: not multikey, so
MongoDB answers from its keys. :func:`walk` lists the distinct keys (a skip scan: one indexed
look-up per distinct key, whatever the number of experiments); :func:`key_filter` turns a key
back into a query; :func:`census` counts the experiments of each key and gives their ids as a
``range`` when they are one (three indexed look-ups per key).

Two rules keep the decisions those of the documents themselves:

- What comes out of the index is only a candidate: the values are read back in the query
  language (:func:`key_filter`), whose meaning does not depend on the plan. (Aggregation
  *expressions* read ``$slurm.0.array_id`` as the index's value when the plan covers them and as
  ``[]`` otherwise: nothing here relies on that.)
- Only values of plain types (strings, integers, null) make a key (:func:`plain`); a multikey
  index, a missing index or any other value makes the census answer ``None``, and the caller
  takes the path that reads the documents (``track.groups.task_groups``).

What only a hand-made document can make differ (neither SEML nor this package writes one): a
``slurm`` that is an object with a key ``"0"`` instead of a list is counted under
``slurm["0"]``'s fields, where the decisions read ``slurm`` itself; a job field or an ``_id``
stored as a float or a decimal counts as the integer it equals (the index compares numbers by
value). Such an experiment may then be listed by ``queue`` or ``status`` under that key, or
left alone as its key's alive task is; it is never marked from a key: every experiment of a
key the census cannot vouch for is judged from its document. A ``slurm[0]`` that is not a document (a
string, null, a number) is indexed with null keys that a covered read matches and a read of the
document does not: :func:`read_back` sends such a collection to the documents' path.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seml_hydra.store.db.collections import CENSUS_FIELDS, CENSUS_INDEX

#: the census index's fields (``store.db.collections.CENSUS_FIELDS``)
FIELDS = CENSUS_FIELDS

#: at most this many distinct keys are walked; beyond, the census gives up (``None``): a
#: collection of that many Slurm tasks is judged by the path that reads the documents
MAX_KEYS = 512
#: ``(database, collection)`` names whose walk went past :data:`MAX_KEYS` in this process, with
#: the smallest depth it did at: a walk of all their keys at that depth or deeper gives up at
#: once (it would walk as many keys again: ``status`` asks twice, its detection then its
#: table, ~0.4 s per walk at 600 tasks)
_OVERFULL: dict[tuple[str, str], int] = {}


class Unplain(Exception):
    """An index key holds a value :func:`plain` refuses (or the index is multikey)."""


def plain(value: Any) -> bool:
    """Whether a key value is one the census stands for (pure): a string, an integer (not a
    bool) or None (null and a missing field index alike, and every decision reads them alike
    with ``dict.get``)."""
    return value is None or isinstance(value, str) or type(value) is int


def key_values(doc: Mapping[str, Any], fields: Sequence[str] = CENSUS_FIELDS) -> tuple[Any, ...]:
    """The values at ``fields`` (dotted paths) of a document read through the index (pure):
    MongoDB returns a covered ``slurm.0.array_id`` as ``{"slurm": {"0": {"array_id": ...}}}``;
    a part that is missing gives None. Raises :class:`Unplain` for a value :func:`plain`
    refuses (a list, as a fetched, not covered, document would give)."""
    out = []
    for field in fields:
        node: Any = doc
        for part in field.split("."):
            if isinstance(node, list):
                raise Unplain(field)
            node = node.get(part) if isinstance(node, Mapping) else None
        if not plain(node):
            raise Unplain(field)
        out.append(node)
    return tuple(out)


def pin(value: Any) -> Any:
    """The query condition that a field equals the key value ``value`` (pure): by equality, as
    the index compares (an integer matches ``7``, ``7.0`` and ``Int64(7)`` alike, None null and
    a missing field). Raises :class:`Unplain` for a value :func:`plain` refuses."""
    if not plain(value):
        raise Unplain(repr(value))
    return value


def key_filter(key: Sequence[Any], fields: Sequence[str] = CENSUS_FIELDS) -> dict[str, Any]:
    """The query matching the experiments whose first ``len(key)`` census fields hold ``key``
    (pure; :func:`pin`): every experiment of the key in the index, and maybe more (a document
    the query reads otherwise than the index, e.g. a ``slurm`` object with a key ``"0"``)."""
    return {field: pin(value) for field, value in zip(fields, key)}


def key_document(
    key: Sequence[Any], fields: Sequence[str] = CENSUS_FIELDS, **extra: Any
) -> dict[str, Any]:
    """A document holding ``key`` at ``fields`` as a find projection of a real one would (pure):
    ``slurm.0.x`` inside ``slurm: [{...}]``, None values left out (missing and null are read
    alike), then ``extra`` top-level keys (``_id``)."""
    doc: dict[str, Any] = {}
    for field, value in zip(fields, key):
        if value is None:
            continue
        parts = field.split(".")
        node = doc
        for i, part in enumerate(parts[:-1]):
            if part.isdigit():
                continue
            if i + 1 < len(parts) - 1 and parts[i + 1].isdigit():
                entries = node.setdefault(part, [{}])
                node = entries[0]
            else:
                node = node.setdefault(part, {})
        node[parts[-1]] = value
    doc.update(extra)
    return doc


def id_block(lo: Any, hi: Any, count: int, integers: int) -> range | None:
    """The ids of a group as a ``range`` when they are the integers ``lo`` to ``hi`` (pure):
    ``count`` ids in the group, ``integers`` of them int32/int64 (the group's smallest ``lo``
    and largest ``hi`` in index order); None otherwise."""
    if type(lo) is not int or type(hi) is not int:
        return None
    if count == integers == hi - lo + 1:
        return range(lo, hi + 1)
    return None


def _bound(prefix: Sequence[Any], fill: Any) -> list[tuple[str, Any]]:
    """An index bound (``cursor.min`` / ``max``): ``prefix`` then ``fill`` for the other fields
    and ``_id``."""
    values = list(prefix) + [fill] * (len(CENSUS_FIELDS) + 1 - len(prefix))
    return list(zip((*CENSUS_FIELDS, "_id"), values))


_PROJECTION = {**{f: 1 for f in CENSUS_FIELDS}, "_id": 1}


#: BSON element types of a census key value :func:`plain` stands for: string, int32, int64,
#: null, and the embedded documents a covered projection nests them in (not 0x06, undefined,
#: which pymongo also decodes as None but the index orders below null)
_KEY_TYPES = frozenset({0x02, 0x10, 0x12, 0x0A, 0x03})
#: the byte length of the fixed-size BSON types an ``_id`` may have
_FIXED = {0x01: 8, 0x07: 12, 0x08: 1, 0x09: 8, 0x0A: 0, 0x10: 4, 0x11: 8, 0x12: 8, 0x13: 16}


def plain_bson(data: bytes) -> bool:
    """Whether every value of the BSON document ``data`` (a covered census entry) but its
    ``_id`` is of a type in :data:`_KEY_TYPES`, nested documents included (pure). An ``_id``
    of a type this does not know how to skip makes it False (the caller then reads the
    documents)."""
    i, end = 4, len(data) - 1
    while i < end:
        kind = data[i]
        name_end = data.index(0, i + 1)
        name = data[i + 1 : name_end]
        i = name_end + 1
        if kind in (0x02, 0x0D, 0x0E):  # string-like: int32 length, then the bytes
            size = 4 + int.from_bytes(data[i : i + 4], "little")
        elif kind in (0x03, 0x04):  # document, array: int32 length including itself
            size = int.from_bytes(data[i : i + 4], "little")
        elif kind == 0x05:  # binary: int32 length, subtype, bytes
            size = 5 + int.from_bytes(data[i : i + 4], "little")
        elif kind in _FIXED:
            size = _FIXED[kind]
        else:
            return False
        if name != b"_id":
            if kind not in _KEY_TYPES:
                return False
            if kind == 0x03 and not plain_bson(data[i : i + size]):
                return False
        i += size
    return True


def _first(collection: Any, lo: list[Any], hi: list[Any]) -> dict[str, Any] | None:
    """The first index entry in ``[lo, hi)`` (covered: no document is read), or None. Raises
    :class:`Unplain` for an entry holding a value of another type (:func:`plain_bson`)."""
    import bson
    from bson.codec_options import CodecOptions
    from bson.raw_bson import RawBSONDocument

    raw = collection.with_options(codec_options=CodecOptions(document_class=RawBSONDocument))
    cursor = raw.find({}, _PROJECTION).hint(CENSUS_INDEX).min(lo).max(hi).limit(1)
    found = next(iter(cursor), None)
    if found is None:
        return None
    if not plain_bson(found.raw):
        raise Unplain("a key value of another type")
    return bson.decode(found.raw)


def covered(collection: Any) -> bool:
    """Whether ``collection`` has the census index and it is not multikey (a plan reading index
    keys only). Raises pymongo errors but the one of a missing index (False)."""
    from bson import MaxKey, MinKey
    from pymongo.errors import OperationFailure

    try:
        plan = (
            collection.find({}, _PROJECTION)
            .hint(CENSUS_INDEX)
            .min(_bound((), MinKey()))
            .max(_bound((), MaxKey()))
            .limit(1)
            .explain()
        )
    except OperationFailure:
        return False
    stage = plan.get("queryPlanner", {}).get("winningPlan", {})
    stage = stage.get("queryPlan", stage)
    while stage and stage.get("stage") != "IXSCAN":
        stage = stage.get("inputStage")
    return bool(stage) and stage.get("isMultiKey") is False


@dataclass(frozen=True)
class Entry:
    """A distinct key of the census index: the values of its first ``len(key)`` fields and the
    ``_id`` of its first experiment in index order (its smallest)."""

    key: tuple[Any, ...]
    first_id: Any


def walk(collection: Any, prefixes: Iterable[Sequence[Any]], depth: int) -> list[Entry]:
    """The distinct ``depth``-field keys of the census index under each of ``prefixes`` (tuples
    of the first fields' values), in index order: one covered look-up per key, plus one per
    prefix. Raises :class:`Unplain` (a value :func:`plain` refuses, more than
    :data:`MAX_KEYS` keys; at once for the single prefix ``()`` of a collection that had more
    than that at this depth or less in an earlier walk of this process, :data:`_OVERFULL`) and
    pymongo errors."""
    from bson import MaxKey, MinKey

    prefixes = [tuple(p) for p in prefixes]
    name = (collection.database.name, collection.name)
    if prefixes == [()] and depth >= _OVERFULL.get(name, depth + 1):  # more than some had
        raise Unplain(f"more than {MAX_KEYS} keys")
    out: list[Entry] = []
    for prefix in prefixes:
        prefix = tuple(prefix)
        top = _bound(prefix, MaxKey())
        start = _bound(prefix, MinKey())
        while True:
            doc = _first(collection, start, top)
            if doc is None:
                break
            key = key_values(doc)[:depth]
            out.append(Entry(key, doc["_id"]))
            if len(out) > MAX_KEYS:
                _OVERFULL[name] = min(depth, _OVERFULL.get(name, depth))
                raise Unplain(f"more than {MAX_KEYS} keys")
            start = _bound(key, MaxKey())
    return out


def count(collection: Any, query: Mapping[str, Any], index: str = CENSUS_INDEX) -> int:
    """How many experiments match ``query``, counted on ``index``: the ``count`` command
    (MongoDB's COUNT_SCAN when the bounds allow, twice as fast as ``count_documents`` 's
    aggregate); with a query, so never the collection's metadata. Raises pymongo errors."""
    reply = collection.database.command("count", collection.name, query=dict(query), hint=index)
    return int(reply["n"])


def last_id(collection: Any, entry: Entry) -> Any:
    """The largest ``_id`` (index order) of the experiments of ``entry`` (one covered look-up;
    None when it has none any more). Raises pymongo errors."""
    backwards = [(f, -1) for f in (*CENSUS_FIELDS, "_id")]
    query = key_filter(entry.key)
    cursor = collection.find(query, {"_id": 1}).hint(CENSUS_INDEX).sort(backwards).limit(1)
    last = next(iter(cursor), None)
    return last["_id"] if last else None


#: the census fields on positional ``slurm.0`` paths
_POSITIONAL = tuple(i for i, f in enumerate(CENSUS_FIELDS) if f.startswith("slurm.0."))


def read_back(collection: Any, entries: Sequence[Entry]) -> None:
    """Check that the documents of each key whose ``slurm.0`` fields are all null match its
    query (:func:`key_filter`) when MongoDB reads them, as it does from the index. A
    ``slurm[0]`` that is not a document (a string, a number, null, an empty list: a hand edit)
    is indexed with null ``slurm.0.*`` keys, which a covered read of ``{"slurm.0.array_id":
    null}`` matches but a read of the document does not: such an experiment, counted here,
    would be missed by a caller that reads the documents of the key (``track.killed``'s full
    path). The documents of these keys are read (the caller reads them anyway: their
    experiments name no task to vouch for). Raises :class:`Unplain` when the counts differ (the
    caller then reads all documents) and pymongo errors."""
    for entry in entries:
        if any(entry.key[i] is not None for i in _POSITIONAL if i < len(entry.key)):
            continue
        query = key_filter(entry.key)
        fetched = collection.find(query, {"slurm": 1}).hint(CENSUS_INDEX)
        if sum(1 for _ in fetched) != count(collection, query):
            raise Unplain("an experiment whose slurm[0] is not a document")


def tiles(spans: Sequence[tuple[Any, Any]], total: int) -> list[range] | None:
    """The ids of each key as a ``range`` from the ``(first, last)`` ``_id`` of every key of a
    collection (pure), when they tile: all integers, the spans disjoint and as many ids in them
    as the collection holds (``total``), so that every integer of each span is an experiment of
    its key. None otherwise. (A float ``_id`` filling a gap of a span, which only a hand edit
    writes, counts as the integer it replaces.)"""
    if not all(type(lo) is int and type(hi) is int and lo <= hi for lo, hi in spans):
        return None
    ordered = sorted(spans)
    if any(a[1] >= b[0] for a, b in zip(ordered, ordered[1:])):
        return None
    if sum(hi - lo + 1 for lo, hi in spans) != total:
        return None
    return [range(lo, hi + 1) for lo, hi in spans]


def ids_of_key(collection: Any, entry: Entry) -> tuple[int, Sequence[Any]]:
    """``(count, ids)`` of the experiments of ``entry`` (a :func:`walk` key): its index entries
    counted (no document read) and its last ``_id`` looked up; the ids are
    ``range(first, last + 1)`` when that many (:func:`id_block`), else listed from the index in
    ``_id`` order. Integer keys are counted by value (``7`` and ``7.0`` alike: a document
    holding a job field as a float, which only a hand edit writes, is counted with the
    integer's). Raises pymongo errors."""
    from seml_hydra.core.ranges import id_sort_key

    query = key_filter(entry.key)
    number = count(collection, query)
    if not number:
        return 0, []
    block = id_block(entry.first_id, last_id(collection, entry), number, number)
    if block is not None:
        return number, block
    ids = [d["_id"] for d in collection.find(query, {"_id": 1}).hint(CENSUS_INDEX)]
    return len(ids), sorted(ids, key=id_sort_key)


def key_ids(collection: Any, entries: Sequence[Entry], whole: bool) -> list[Sequence[Any]]:
    """The ids of each of ``entries`` (:func:`walk` keys), in ``_id`` order: when ``whole`` (the
    entries are every key of the collection) and their spans :func:`tiles` the collection (one
    count of its ``_id`` index), as ranges from two look-ups per key; else counted key by key
    (:func:`ids_of_key`). Raises pymongo errors."""
    if whole:
        spans = [(e.first_id, last_id(collection, e)) for e in entries]
        from bson import MinKey

        total = count(collection, {"_id": {"$gte": MinKey()}}, "_id_")
        ranges = tiles(spans, total)
        if ranges is not None:
            return list(ranges)
    return [ids_of_key(collection, e)[1] for e in entries]


def state_groups(collection: Any) -> list[tuple[dict[str, Any], Sequence[Any]]]:
    """``status`` 's table from the census index: the groups ``track.query.grouped`` gives for
    the fields ``status``, ``seml.description`` and ``slurm[0].array_id`` (``[(document,
    ids), ...]``; one per key of the index, several may share a document), ids in ``_id``
    order, as ranges when consecutive (:func:`key_ids`). Raises :class:`Unplain` (no usable
    index, a value of another type, more than :data:`MAX_KEYS` keys) and pymongo errors."""
    if not covered(collection):
        raise Unplain("no census index")
    entries = walk(collection, [()], len(FIELDS))
    ids = key_ids(collection, entries, whole=True)
    return [(key_document(e.key[:3]), i) for e, i in zip(entries, ids) if i]


def array_groups(
    collection: Any, arrays: Sequence[int]
) -> tuple[list[tuple[dict[str, Any], Sequence[Any]]], list[dict[str, Any]]]:
    """The experiments whose ``slurm[0].array_id`` is one of ``arrays`` (integers, or their
    strings), from the census index: ``(groups, rest)``. ``groups`` as ``track.groups`` gives
    them (``[(key document, ids), ...]``) for the keys without ``execution.array_id``; ``rest``
    the :func:`key_filter` s of the others (claimed experiments: their task is in
    ``execution``, which the index does not hold). The keys are those of the whole collection
    when there are at most :data:`MAX_KEYS` (then :func:`key_ids` tiles), else those of the
    arrays only. Raises :class:`Unplain` and pymongo errors."""
    if not covered(collection):
        raise Unplain("no census index")
    values = {*arrays, *(str(a) for a in arrays)}
    try:
        entries, whole = walk(collection, [()], len(FIELDS)), True
    except Unplain:  # many keys: those of the arrays only
        heads = walk(collection, [()], 2)
        prefixes = [(*h.key, a) for h in heads for a in sorted(values, key=str)]
        entries, whole = walk(collection, prefixes, len(FIELDS)), False
    array_at = FIELDS.index("slurm.0.array_id")
    claim_at = FIELDS.index("execution.array_id")
    ids = key_ids(collection, entries, whole)
    groups, rest = [], []
    for entry, entry_ids in zip(entries, ids):
        if entry.key[array_at] not in values:
            continue
        if entry.key[claim_at] is not None:
            rest.append(key_filter(entry.key))
        elif entry_ids:
            groups.append((key_document(entry.key), entry_ids))
    return groups, rest


def unsubmitted_ids(collection: Any, arrays: Sequence[Any]) -> list[Any]:
    """The ids of the PENDING experiments without ``slurm[0].array_id`` whose other ``slurm``
    entries name one of ``arrays`` (SEML 0.5 submits an experiment once per ``slurm`` entry):
    found by the census index (PENDING, no ``slurm[0]`` array), then read. Raises pymongo
    errors."""
    from seml_hydra.core import states

    query = {
        "status": states.PENDING,
        "slurm.0.array_id": None,
        "slurm.array_id": {"$in": list(arrays)},
    }
    return [d["_id"] for d in collection.find(query, {"_id": 1}).hint(CENSUS_INDEX)]
