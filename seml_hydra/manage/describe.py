"""Descriptions and projections: what ``description set|delete|list`` do (SEML's
``seml.commands.description``), the description and ``-p/--projection`` columns of ``status``,
the descriptions ``list`` shows, and the keys ``print-fail-trace -p`` prints beside an id.

A description is SEML's ``seml.description``: one string per experiment, set at launch
(``hydra.launcher.description``) or by ``description set``. As in SEML, ``${...}`` in a
description set here is resolved against the experiment's document (``"lr ${config.optimizer.lr}"``:
plain key lookups only, no resolvers; :func:`resolve_description`), unless ``resolve=False``. Pure functions but those taking a
collection or a database.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

from seml_hydra.core import states
from seml_hydra.manage.selection import ManageError, id_sort_key
from seml_hydra.track.jobs import state_of
from seml_hydra.track.query import and_, grouped, select

#: where SEML stores an experiment's description
DESCRIPTION = "seml.description"
_MISSING = object()


def get_path(doc: Mapping[str, Any], dotted: str) -> Any:
    """The value at ``dotted`` (``"config.optimizer.lr"``) of ``doc``; a list index may be a
    path part (``"slurm.0.array_id"``). Returns the module's ``_MISSING`` marker when absent."""
    node: Any = doc
    for part in dotted.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def description_of(doc: Mapping[str, Any]) -> str | None:
    """``seml.description`` of ``doc`` when it is a non-empty string, else None."""
    value = get_path(doc, DESCRIPTION)
    return value if isinstance(value, str) and value else None


def shown_value(value: Any) -> str:
    """A projected value as one short line: strings as they are, other values as compact JSON
    (``{"a":1}``), an absent key as ``-``."""
    if value is _MISSING:
        return "-"
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


def projection_fields(keys: Iterable[str]) -> list[str]:
    """The ``-p`` keys, split on commas and spaces, duplicates and keys under another given key
    dropped (``config`` and ``config.lr`` -> ``config``: MongoDB refuses both in one
    projection). Raises :class:`ManageError` for a key starting with ``$`` or an empty part."""
    out: list[str] = []
    for value in keys:
        for key in str(value).replace(",", " ").split():
            if key.startswith("$") or "" in key.split("."):
                raise ManageError(f"{key!r} is not a document key such as config.optimizer.lr.")
            if key not in out:
                out.append(key)
    return [k for k in out if not any(k.startswith(f"{o}.") for o in out if o != k)]


def projected(doc: Mapping[str, Any], keys: Sequence[str]) -> list[tuple[str, str]]:
    """``(key, shown value)`` of each of ``keys`` in ``doc`` (:func:`shown_value`)."""
    return [(key, shown_value(get_path(doc, key))) for key in keys]


_ORDER = {s: i for i, s in enumerate(states.ALL)}


def state_key(state: str) -> tuple[int, str]:
    """Sort key of a state name: life-cycle order (``core.states.ALL``), unknown ones after."""
    return (_ORDER.get(state, len(_ORDER)), state)


@dataclass
class StateRow:
    """One row of ``status``: the experiments in ``state``, their ``ids``, their distinct
    ``descriptions`` and, per ``-p`` key, the distinct shown values (``values[key]``)."""

    state: str
    ids: list[Any] = field(default_factory=list)
    descriptions: list[str] = field(default_factory=list)
    values: dict[str, list[str]] = field(default_factory=dict)


def state_rows(docs: Iterable[Mapping[str, Any]], keys: Sequence[str] = ()) -> list[StateRow]:
    """Group ``docs`` by state (life-cycle order, then unknown states by name;
    ``track.jobs.state_of`` names them), ids sorted, descriptions and values in the order of
    the ids they first appear with (pure)."""
    rows: dict[str, StateRow] = {}
    for doc in sorted(docs, key=lambda d: id_sort_key(d.get("_id"))):
        state = state_of(doc.get("status"))
        row = rows.setdefault(state, StateRow(state, values={k: [] for k in keys}))
        row.ids.append(doc.get("_id"))
        text = description_of(doc)
        if text is not None and text not in row.descriptions:
            row.descriptions.append(text)
        for key, value in projected(doc, keys):
            if value not in row.values[key]:
                row.values[key].append(value)
    return [rows[s] for s in sorted(rows, key=state_key)]


def status_groups(
    collection: Any, query: Mapping[str, Any], keys: Sequence[str] = ()
) -> list[tuple[dict[str, Any], list[Any]]]:
    """The experiments matching ``query`` grouped by their status, description, ``keys`` and
    Slurm arrays (``slurm.array_id``, for ``manage.status_view.pending_arrays``): one aggregate
    (``track.query.grouped``), so ``status`` grows with its rows, not with the experiments."""
    fields = {"_id": 1, "status": 1, DESCRIPTION: 1, "slurm.array_id": 1, **{k: 1 for k in keys}}
    return grouped(collection, query, without_collisions(fields))


def group_rows(
    groups: Sequence[tuple[Mapping[str, Any], Sequence[Any]]], keys: Sequence[str] = ()
) -> list[StateRow]:
    """:func:`state_rows` of :func:`status_groups` (pure): each group counts as its first
    experiment for the order of descriptions and values, and brings all its ids."""
    rows = state_rows([{**doc, "_id": ids[0]} for doc, ids in groups], keys)
    by_state: dict[str, list[Sequence[Any]]] = {}
    for doc, ids in groups:
        by_state.setdefault(state_of(doc.get("status")), []).append(ids)
    for row in rows:
        row.ids = _merged(by_state[row.state])
    return rows


def _merged(parts: Sequence[Sequence[Any]]) -> list[Any]:
    """The ids of ``parts`` (each in ``_id`` order), sorted by ``id_sort_key``: joined when
    they are integer runs that do not overlap (one launch's arrays), sorted otherwise."""
    parts = sorted(parts, key=lambda ids: id_sort_key(ids[0]))
    ints = all(type(p[0]) is int and type(p[-1]) is int for p in parts)
    if ints and all(a[-1] < b[0] for a, b in zip(parts, parts[1:])):
        return list(chain(*parts))
    return sorted(chain(*parts), key=id_sort_key)


def status_rows(
    collection: Any, query: Mapping[str, Any], keys: Sequence[str] = ()
) -> list[StateRow]:
    """:func:`state_rows` of the experiments matching ``query`` (:func:`status_groups`)."""
    return group_rows(status_groups(collection, query, keys), keys)


def without_collisions(fields: Mapping[str, int]) -> dict[str, int]:
    """``fields`` without the paths under another one (``seml`` and ``seml.description``:
    MongoDB refuses both in one projection)."""
    return {k: 1 for k in fields if not any(k.startswith(f"{o}.") for o in fields if o != k)}


def _whole(collection: Any, query: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The whole documents matching ``query``, by ``_id``."""
    return list(collection.find(dict(query)).sort("_id", 1))


#: one ``${dotted.path}`` lookup of a description (``\\${`` is a literal ``${``)
_LOOKUP = re.compile(r"(\\*)\$\{([^{}]*)\}")
#: a plain document path: ``config.optimizer.lr``, ``slurm.0.array_id`` (no resolver, no
#: relative ``.key``, no nested ``${...}``)
_PATH = re.compile(r"[A-Za-z0-9_\-]+(?:\.[A-Za-z0-9_\-]+)*")


def resolve_description(text: str, doc: Mapping[str, Any]) -> str:
    """``text`` with each ``${dotted.path}`` replaced by ``doc``'s value there (SEML's
    ``seml.experiment.description.resolve_description`` for its ordinary use): ``"lr
    ${config.lr}"`` -> ``"lr 0.1"``. As in OmegaConf, ``\\${`` is a literal ``${`` and ``\\\\${`` a ``\\``
    then a lookup; text without ``${`` is returned as it is. Pure.

    Unlike SEML (which hands the whole document to OmegaConf), only the user's ``text`` is
    interpolated, once: a value of the document is inserted as its literal text even when it
    holds ``${...}`` itself, and no resolver runs (``${oc.env:...}`` in a forged document
    must not copy the user's environment into the database). A value is written as OmegaConf
    writes it in a string (``str``: ``0.1``, ``True``, ``None``, ``{'a': 1}``).

    Raises :class:`ManageError` naming the experiment when a ``${...}`` is not a plain path
    (a resolver such as ``${oc.env:X}``) or names a key the document does not have (``_id``
    included, as before).
    """
    if "${" not in text:
        return text
    values = {k: v for k, v in doc.items() if k != "_id"}

    def lookup(match: re.Match[str]) -> str:
        slashes, path = match.group(1), match.group(2)
        kept = slashes[: len(slashes) // 2]  # as OmegaConf: ``\\`` before ``${`` is one ``\``
        if len(slashes) % 2:  # an escaped ``\${``: literal
            return kept + "${" + path + "}"
        plain_key = _PATH.fullmatch(path.strip()) is not None
        value = get_path(values, path.strip()) if plain_key else _MISSING
        if value is _MISSING:
            why = "not a document key" if plain_key else "not a plain key"
            raise ManageError(
                f"The description does not resolve for experiment {doc.get('_id')}: "
                f"${{{path}}} is {why} such as config.lr (set it with --no-resolve to keep "
                "${...} as text)."
            )
        return kept + str(value)

    return _LOOKUP.sub(lookup, text)


def set_description(
    collection: Any, query: Mapping[str, Any], text: str, *, resolve: bool = True
) -> list[Any]:
    """Set ``seml.description`` of the experiments matching ``query`` to ``text`` (resolved per
    experiment by :func:`resolve_description` unless ``resolve`` is false); returns their ids.
    Raises :class:`ManageError` when nothing matches, a description does not resolve or a
    matching document's ``seml`` is not a document (then nothing is written)."""
    if not text.strip():
        raise ManageError("The description is empty; `description delete` removes one.")
    needs_doc = resolve and "${" in text
    docs = _whole(collection, query) if needs_doc else select(collection, query, {"_id": 1})
    if not docs:
        raise ManageError("No experiments match the filters.")
    texts = {d["_id"]: resolve_description(text, d) if resolve else text for d in docs}
    garbled = select(
        collection,
        and_(query, {"seml": {"$exists": True, "$not": {"$type": "object"}}}),
        {"_id": 1},
    )
    if garbled:  # $set seml.description would fail on these after writing the others
        raise ManageError(
            f"Experiment(s) {', '.join(str(d['_id']) for d in garbled)} have a `seml` field "
            "that is not a document (forged or garbled), where the description goes: fix or "
            "delete them, or leave them out of the selection. Nothing was written."
        )
    from pymongo import UpdateOne

    collection.bulk_write(
        [UpdateOne({"_id": i}, {"$set": {DESCRIPTION: t}}) for i, t in texts.items()]
    )
    return list(texts)


def delete_description(collection: Any, query: Mapping[str, Any]) -> list[Any]:
    """Remove ``seml.description`` from the matching experiments that have one; returns their
    ids (``[]`` when none has one)."""
    chosen = and_(query, {DESCRIPTION: {"$exists": True}})
    ids = [d["_id"] for d in select(collection, chosen, {"_id": 1})]
    if ids:
        collection.update_many({"_id": {"$in": ids}}, {"$unset": {DESCRIPTION: ""}})
    return ids


@dataclass
class DescriptionGroup:
    """One row of ``description list``: a ``description`` (None: experiments without one), the
    ``ids`` and ``batch_ids`` having it (sorted), and their ``states`` (life-cycle order)."""

    description: str | None
    ids: list[Any]
    batch_ids: list[Any]
    states: list[str]


def description_groups(docs: Iterable[Mapping[str, Any]]) -> list[DescriptionGroup]:
    """Group ``docs`` by description, those without one last (pure)."""
    groups: dict[str | None, DescriptionGroup] = {}
    for doc in docs:
        text = description_of(doc)
        group = groups.setdefault(text, DescriptionGroup(text, [], [], []))
        group.ids.append(doc.get("_id"))
        if doc.get("batch_id") is not None and doc.get("batch_id") not in group.batch_ids:
            group.batch_ids.append(doc.get("batch_id"))
        state = state_of(doc.get("status"))
        if state not in group.states:
            group.states.append(state)
    for group in groups.values():
        group.ids.sort(key=id_sort_key)
        group.batch_ids.sort(key=id_sort_key)
        group.states.sort(key=state_key)
    return sorted(groups.values(), key=lambda g: (g.description is None, g.description or ""))


def list_descriptions(collection: Any, query: Mapping[str, Any]) -> list[DescriptionGroup]:
    """:func:`description_groups` of the experiments matching ``query``."""
    fields = {"_id": 1, "batch_id": 1, "status": 1, DESCRIPTION: 1}
    return description_groups(select(collection, query, fields))


def collection_descriptions(db: Any, names: Sequence[str]) -> dict[str, list[str]]:
    """``{collection: its distinct descriptions, sorted}`` for ``seml list`` (collections
    without any are left out); one aggregation per collection."""
    out: dict[str, list[str]] = {}
    for name in names:
        pipeline = [{"$group": {"_id": f"${DESCRIPTION}"}}]
        found = sorted(
            r["_id"] for r in db[name].aggregate(pipeline) if isinstance(r["_id"], str) and r["_id"]
        )
        if found:
            out[name] = found
    return out


#: the formats of ``print-experiment``
FORMATS = ("yaml", "json")


def plain(value: Any) -> Any:
    """``value`` (a document from pymongo) with only JSON types: datetimes as ISO 8601 text,
    ObjectIds and other objects as ``str``, tuples as lists (pure)."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


def experiment_text(doc: Mapping[str, Any], fmt: str = "yaml") -> str:
    """``doc`` as readable text for ``print-experiment``: YAML (block style, keys in the
    document's order) or JSON (indented), from :func:`plain` (pure). Raises
    :class:`ManageError` for another ``fmt``."""
    data = plain(doc)
    if fmt == "json":
        return json.dumps(data, indent=2, ensure_ascii=False)
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100).rstrip()
    raise ManageError(f"Unknown format {fmt!r}; the formats are {', '.join(FORMATS)}.")


def experiments(
    collection: Any, query: Mapping[str, Any], keys: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """The documents matching ``query`` (whole, or only ``_id``, ``batch_id``, ``status`` and
    ``keys``). Raises :class:`ManageError` when none match."""
    fields = {"_id": 1, "batch_id": 1, "status": 1, **{k: 1 for k in keys}} if keys else None
    if fields:
        docs = select(collection, query, without_collisions(fields))
    else:
        docs = _whole(collection, query)
    if not docs:
        raise ManageError("No experiments match the filters.")
    return docs
