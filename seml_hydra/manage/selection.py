"""What the ``seml`` commands' common options select, and opening the collection.

:class:`Selection` holds ``-id``, ``-b``, ``-s``, ``-fd`` (parsed by :func:`parse_states` and
:func:`parse_filter_dict`) and builds the MongoDB filter (:func:`build_filter`, pure). Every
problem a user can cause in this package raises :class:`ManageError` (a ``core.errors.UserError``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from seml_hydra.core import states
from seml_hydra.core.errors import UserError
from seml_hydra.core.ranges import format_ids, id_sort_key
from seml_hydra.store.db.client import connect
from seml_hydra.store.db.collections import must_exist as collection_must_exist
from seml_hydra.store.db.collections import validate_collection_name
from seml_hydra.store.db.settings import resolve_db_settings
from seml_hydra.track.jobs import state_of


class ManageError(UserError):
    """A problem explained for the user (the CLI prints ``str(err)`` in one line, exit 1)."""


def parse_states(values: Iterable[str] | None) -> list[str]:
    """Normalize ``-s`` values: ``["failed,killed", "Interrupted"]`` -> canonical state names.

    Commas and spaces separate states, case is ignored, SEML's ``QUEUED`` means ``STAGED``.
    Returns ``[]`` for no value. Raises :class:`ManageError` naming an unknown state.
    """
    out: list[str] = []
    for value in values or ():
        for part in re.split(r"[,\s]+", str(value).strip()):
            if not part:
                continue
            name = states.ALIASES.get(part.upper(), part.upper())
            if name not in states.ALL:
                raise ManageError(
                    f"Unknown state {part!r}; the states are {', '.join(states.ALL)}."
                )
            if name not in out:
                out.append(name)
    return out


def parse_filter_dict(text: str | None) -> dict[str, Any]:
    """Parse ``-fd``: a JSON or YAML mapping (``'{"config.model.name": "small"}'``,
    ``"{config.seed: 3}"``). ``None``/empty gives ``{}``; anything but a mapping raises
    :class:`ManageError`."""
    if text is None or not str(text).strip():
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        import yaml

        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise ManageError(f"--filter-dict is neither JSON nor YAML: {error}") from None
    if not isinstance(value, dict):
        raise ManageError(
            f"--filter-dict must be a mapping such as '{{\"config.seed\": 3}}', got {text!r}."
        )
    return value


def state_values(names: Iterable[str]) -> list[str]:
    """Stored values matching ``names`` (STAGED also matches SEML's old ``QUEUED``)."""
    values = list(names)
    values += [alias for alias, name in states.ALIASES.items() if name in values]
    return values


def build_filter(
    *,
    sacred_id: int | None = None,
    batch_id: int | None = None,
    filter_states: Sequence[str] | None = None,
    filter_dict: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The MongoDB filter of the common options (pure). All given parts must match (AND);
    ``filter_states`` empty or None means every state."""
    query: dict[str, Any] = dict(filter_dict or {})
    parts: list[dict[str, Any]] = []
    if sacred_id is not None:
        parts.append({"_id": sacred_id})
    if batch_id is not None:
        parts.append({"batch_id": batch_id})
    if filter_states:
        parts.append({"status": {"$in": state_values(filter_states)}})
    for part in parts:
        for key, value in part.items():
            if key in query:
                query["$and"] = [*query.get("$and", []), {key: value}]
            else:
                query[key] = value
    return query


@dataclass(frozen=True)
class Selection:
    """What the common options select: ``-id``, ``-b``, ``-s``, ``-fd``."""

    sacred_id: int | None = None
    batch_id: int | None = None
    filter_states: tuple[str, ...] = ()
    filter_dict: Mapping[str, Any] = field(default_factory=dict)

    def query(
        self, default_states: Iterable[str] = (), allowed: Iterable[str] | None = None
    ) -> dict[str, Any]:
        """The filter, with ``default_states`` when no ``-s`` was given. ``allowed`` (if given)
        limits the states a command may act on: a ``-s`` outside it raises ManageError."""
        chosen = list(self.filter_states) or list(default_states)
        if allowed is not None:
            allowed = list(allowed)
            bad = [s for s in chosen if s not in allowed]
            if bad:
                raise ManageError(
                    f"This command works on experiments in the states {', '.join(allowed)}, "
                    f"not {', '.join(bad)}."
                )
            chosen = chosen or allowed
        return build_filter(
            sacred_id=self.sacred_id,
            batch_id=self.batch_id,
            filter_states=chosen,
            filter_dict=self.filter_dict,
        )


def malformed_message(ids: Sequence[Any], what: str = "experiment(s)") -> str:
    """The one line telling about documents with a malformed ``status`` (pure)."""

    return (
        f"{len(ids)} {what} with a malformed status (not a state name): ids {format_ids(ids)}; "
        "they are left alone (fix their status, or remove them with `delete -id <id>`)."
    )


def id_ranges_by_state(docs: Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """``{state: sorted ids}`` in life-cycle order (unknown states after the known ones;
    :func:`state_of` names them; integer ids first, then the others by ``str``)."""
    by_state: dict[str, list[Any]] = {}
    for doc in docs:
        by_state.setdefault(state_of(doc.get("status")), []).append(doc.get("_id"))
    order = {s: i for i, s in enumerate(states.ALL)}
    return {
        s: sorted(by_state[s], key=id_sort_key)
        for s in sorted(by_state, key=lambda s: (order.get(s, len(order)), s))
    }


def connect_db() -> Any:
    """The pymongo database, resolved as everywhere (env, SEML config, embedded)."""

    return connect(resolve_db_settings(None))


def get_collection(db: Any, name: str, *, must_exist: bool = True) -> Any:
    """Collection ``name`` of ``db``. Raises ``store.errors.InvalidCollectionName`` for a bad
    name and, with ``must_exist``, ``store.errors.CollectionNotFound`` when it does not exist
    (``store.db.collections.must_exist``: what ``get_results`` raises too)."""

    validate_collection_name(name)
    if must_exist:
        collection_must_exist(db, name)
    return db[name]
