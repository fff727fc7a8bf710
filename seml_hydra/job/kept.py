"""Writes a job keeps in memory while MongoDB stays unreachable past ``SEML_MONGODB_RETRY_S``,
and writes later (:func:`write_kept`: after the job's next claim, and at its end).

An outage longer than the retry budget (``seml_hydra.store.db.retry.retrying``) used to lose the
experiment's outcome, its captured output included. Here the job goes on with the write kept
(one log line says so), and writes it, in order, as soon as MongoDB answers again before the
job ends. What cannot be written by then is lost (one log line each): the experiment stays
RUNNING until ``detect-killed`` or a waiting launcher finds its job gone and marks it KILLED,
noting that its ``captured_out`` is incomplete.

Only idempotent updates (``$set``/``$unset``, or a filter that no longer matches once applied)
may be kept: a kept write may have reached the server before the connection dropped.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from seml_hydra.store.db.retry import ENV_RETRY, is_connection_error, retrying, short_reason

if TYPE_CHECKING:
    from seml_hydra.core.schema import ExperimentCollection

log = logging.getLogger(__name__)


@dataclass
class KeptWrite:
    """One ``update_one(filter, update)`` of ``collection`` not written yet; ``what`` names it
    for the log (e.g. ``"saving the outcome of experiment 3 (COMPLETED)"``)."""

    collection: ExperimentCollection
    filter: dict[str, Any]
    update: Any
    what: str


#: the writes of this process waiting for MongoDB, oldest first
_KEPT: list[KeptWrite] = []


def write_or_keep(
    collection: ExperimentCollection, filter: Mapping[str, Any], update: Any, what: str
) -> Any | None:
    """``collection.update_one(filter, update)``, retried while MongoDB is unreachable
    (``retrying``, up to ``SEML_MONGODB_RETRY_S``), after the writes kept earlier (so a kept
    outcome never lands after a later write of the same experiment). Past the budget the write
    is kept (:func:`keep`) and None returned; otherwise pymongo's ``UpdateResult``. Raises
    errors other than connection errors."""
    if _KEPT and not write_kept(budget_s=0):
        keep(collection, filter, update, what)
        return None
    try:
        return retrying(lambda: collection.update_one(dict(filter), update), what)
    except Exception as error:
        if not is_connection_error(error):
            raise
        keep(collection, filter, update, what, error)
        return None


def keep(
    collection: ExperimentCollection,
    filter: Mapping[str, Any],
    update: Any,
    what: str,
    error: BaseException | None = None,
) -> None:
    """Keep a write that could not be made (MongoDB unreachable past the budget) for
    :func:`write_kept`; logs one warning."""
    _KEPT.append(KeptWrite(collection, dict(filter), update, what))
    reason = f" ({short_reason(error)})" if error is not None else ""
    log.warning(
        "MongoDB unreachable for longer than %s%s: %s is kept in memory and written when "
        "MongoDB is back before the job ends.",
        ENV_RETRY,
        reason,
        what,
    )


def write_kept(budget_s: float | None = None) -> bool:
    """Write the kept writes, oldest first, each retried for ``budget_s`` seconds (None:
    ``SEML_MONGODB_RETRY_S``; 0: one attempt). Stops at the first that still cannot be
    written (it and the later ones stay kept). Returns whether none is left. Raises errors
    other than connection errors (that write is dropped first)."""
    while _KEPT:
        write = _KEPT[0]
        try:
            retrying(
                functools.partial(write.collection.update_one, write.filter, write.update),
                write.what,
                budget_s=budget_s,
            )
        except Exception as error:
            if not is_connection_error(error):
                _KEPT.pop(0)
                raise
            return False
        _KEPT.pop(0)
        log.warning("MongoDB is back: %s, kept until now, is written.", write.what)
    return True


def drop_kept() -> list[str]:
    """Forget the kept writes (the job ends and MongoDB did not come back); logs each as lost
    and returns what they were."""
    lost = [write.what for write in _KEPT]
    _KEPT.clear()
    for what in lost:
        log.error("MongoDB did not come back before the job ended: %s is lost.", what)
    return lost
