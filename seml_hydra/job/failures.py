"""Failures of the ranks of a multi-task experiment: each failing rank appends its trace to the
document's ``rank_failures`` (a field Sacred's observer never holds), and a failure on any rank
fails the experiment with one ``fail_trace`` header per failing rank. Every write is
idempotent, so ``retrying`` it while MongoDB is unreachable adds nothing twice."""

from __future__ import annotations

import socket
import traceback
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from seml_hydra.core import states
from seml_hydra.store.db.retry import retrying

if TYPE_CHECKING:
    from seml_hydra.core.schema import ExperimentCollection


def record_rank_failure(
    collection: ExperimentCollection, exp_id: int, global_rank: Any, trace: str, restart: int = 0
) -> None:
    """Append this rank's failure in run ``restart`` (``execution.restart``: a requeued run
    counts its own ranks' failures only) to ``rank_failures`` (a field Sacred's observer never
    holds).

    The ``$push`` is made idempotent for :func:`~seml_hydra.store.db.retry.retrying`: the failure
    carries a random ``id`` and the filter requires it absent, so a retry of a push that reached
    the server before the connection dropped adds nothing."""
    import uuid

    failure = {
        "rank": global_rank,
        "host": socket.gethostname(),
        "trace": trace,
        "restart": restart,
        "id": uuid.uuid4().hex,
    }
    retrying(
        lambda: collection.update_one(
            {"_id": exp_id, "rank_failures.id": {"$ne": failure["id"]}},
            {"$push": {"rank_failures": failure}},
        ),
        f"recording the failure of rank {global_rank} of experiment {exp_id}",
    )


def trace_lines() -> list[str]:
    """The current exception's traceback as lines (Sacred's ``fail_trace`` format)."""
    return traceback.format_exc().splitlines(True)


def fail_if_a_rank_failed(
    collection: ExperimentCollection, exp_id: int, restart: int | None = None
) -> None:
    """Mark the experiment FAILED when ranks recorded failures (``rank_failures``; with
    ``restart``, only those of that run: :func:`in_run`); its
    ``fail_trace`` gets, once per failing rank, a header naming the rank followed by its trace.

    ``rank_failures`` only grows (``$push``), so reading it is safe; ``fail_trace`` is extended
    by one atomic pipeline update that appends a rank's lines only when its header is not in
    the stored trace yet, so ranks doing this at the same time (or Sacred's final save of the
    primary in between) never drop each other's headers. Retried as a whole while MongoDB is
    unreachable (a read, then an update that appends nothing twice).
    """
    retrying(
        lambda: _fail_if_a_rank_failed_once(collection, exp_id, restart),
        f"checking the other ranks of experiment {exp_id}",
    )


def _fail_if_a_rank_failed_once(
    collection: ExperimentCollection, exp_id: int, restart: int | None
) -> None:
    doc = collection.find_one({"_id": exp_id}, {"rank_failures": 1})
    entries = [
        [rank_failure_header(failure), *str(failure.get("trace", "")).splitlines(True)]
        for failure in (doc.get("rank_failures") if doc is not None else None) or []
        if restart is None or in_run(failure, restart)
    ]
    if not entries:
        return
    collection.update_one(
        {"_id": exp_id, "status": {"$in": [states.RUNNING, states.COMPLETED, states.FAILED]}},
        [{"$set": {"status": states.FAILED, "fail_trace": appended_once(entries)}}],
    )


def rank_failure_header(failure: Mapping[str, Any]) -> str:
    """The ``fail_trace`` line that starts failure ``{"rank", "host", ...}``'s trace (pure)."""
    return f"--- rank {failure.get('rank')} on {failure.get('host')} failed:\n"


def appended_once(entries: Sequence[Sequence[str]], field: str = "fail_trace") -> dict[str, Any]:
    """Aggregation expression (pure): the list ``field`` (missing = ``[]``) with each entry's
    lines appended unless the entry's first line (its header) is already in it. The lines go
    in as ``$literal``, so a line starting with ``$`` stays text."""
    return {
        "$reduce": {
            "input": {"$literal": [list(entry) for entry in entries]},
            "initialValue": {"$ifNull": [f"${field}", []]},
            "in": {
                "$cond": [
                    {"$in": [{"$arrayElemAt": ["$$this", 0]}, "$$value"]},
                    "$$value",
                    {"$concatArrays": ["$$value", "$$this"]},
                ]
            },
        }
    }


#: how long the primary rank waits, after its own task ended, for the other ranks to end
#: (:func:`await_other_ranks`); a rank that died without a word holds it no longer than this
OTHER_RANKS_WAIT_S = 120.0


class OtherRanksFailed(RuntimeError):
    """Raised into the primary rank's task when another rank of the experiment failed: Sacred
    then records the experiment FAILED at once (the other ranks' traces are appended to
    ``fail_trace`` by :func:`fail_if_a_rank_failed`)."""


def record_rank_end(
    collection: ExperimentCollection, exp_id: int, global_rank: int, restart: int, outcome: str
) -> None:
    """Append ``{rank, restart, outcome, id}`` to the document's ``rank_ends`` (a field Sacred's
    observer never holds): this rank's task of run ``restart`` (``execution.restart``) ended.
    Idempotent under :func:`~seml_hydra.store.db.retry.retrying`, as :func:`record_rank_failure`."""
    import uuid

    end = {"rank": global_rank, "restart": restart, "outcome": outcome, "id": uuid.uuid4().hex}
    retrying(
        lambda: collection.update_one(
            {"_id": exp_id, "rank_ends.id": {"$ne": end["id"]}}, {"$push": {"rank_ends": end}}
        ),
        f"recording the end of rank {global_rank} of experiment {exp_id}",
    )


def in_run(failure: Mapping[str, Any], restart: int) -> bool:
    """Whether a ``rank_failures`` entry belongs to run ``restart`` (pure): its ``restart``
    equals it; an entry without one (recorded before runs were told apart) counts for every
    run."""
    return failure.get("restart", restart) == restart


def ranks_outcome(doc: Mapping[str, Any], world_size: int, restart: int) -> tuple[list[Any], bool]:
    """``(failed ranks, every other rank ended)`` of run ``restart`` from a document's
    ``rank_failures`` and ``rank_ends`` (pure); rank 0 is the primary, which asks."""
    failed = [f.get("rank") for f in doc.get("rank_failures") or [] if in_run(f, restart)]
    ended = {e.get("rank") for e in doc.get("rank_ends") or [] if e.get("restart") == restart}
    return failed, set(range(1, world_size)) <= ended


def await_other_ranks(
    collection: ExperimentCollection,
    exp_id: int,
    world_size: int,
    restart: int,
    *,
    timeout_s: float = OTHER_RANKS_WAIT_S,
    poll_s: float = 0.5,
) -> None:
    """The primary rank, its task done, before its final save: record its end
    (:func:`record_rank_end`) and wait until every other rank ended, one failed, or
    ``timeout_s`` seconds passed (then the primary saves COMPLETED, and a rank failing later
    turns it FAILED: :func:`fail_if_a_rank_failed`).

    So the document is never COMPLETED while another rank still runs to fail: the launcher, a
    later launch returning the stored result and ``seml status`` all read the outcome of every
    rank (SEML's multi-task rule: a failure on any rank fails the experiment).

    Raises:
        OtherRanksFailed: another rank recorded a failure (``rank_failures``).
    """
    import time

    record_rank_end(collection, exp_id, 0, restart, "COMPLETED")
    deadline = time.monotonic() + timeout_s
    while True:
        doc = retrying(
            lambda: collection.find_one({"_id": exp_id}, {"rank_failures": 1, "rank_ends": 1}),
            f"reading the other ranks of experiment {exp_id}",
        )
        failed, all_ended = ranks_outcome(doc or {}, world_size, restart)
        if failed:
            ranks = ", ".join(str(r) for r in failed)
            raise OtherRanksFailed(
                f"rank(s) {ranks} of experiment {exp_id} failed: their traces follow"
            )
        if all_ended or time.monotonic() >= deadline:
            return
        time.sleep(poll_s)
