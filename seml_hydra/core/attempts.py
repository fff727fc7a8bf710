"""An experiment's attempt history: what each earlier run of it was, kept in the document's
``attempts`` array when the experiment runs again (``reset`` + ``start``, a new launch of the
same config, a requeue). Pure: the MongoDB expressions that move the current run into the
history within the very update that starts the next one, and the reading of it.

One entry (the oldest first; the last :data:`HISTORY_LIMIT` are kept)::

    {"attempt": 1, "status": "FAILED", "start_time": ..., "stop_time": ..., "heartbeat": ...,
     "host": "node1", "cluster": "slurm", "array_id": 17, "task_id": 3, "restart": 0,
     "output_file": ".../17_3_0_log.out", "fail_trace_tail": ["...", "ValueError: x"],
     "reason": <a KILLED run's: its fail trace's first line, how its job ended>,
     "pruned": {...}, "moved_by": "reset", "moved_time": ...}

A field the run never had is left out. ``attempt`` numbers the runs from 1; the current run is
number :func:`current_number` (the last entry's number + 1). The metric documents of an entry's
run are kept, tagged ``attempt_of`` (the experiment's ``_id``) and ``attempt`` (its number):
``seml_hydra.store.metrics.tag_metrics``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: entries kept per experiment (the newest)
HISTORY_LIMIT = 20
#: lines of ``fail_trace`` kept per entry (its end: the exception and the lines before it)
TRACE_TAIL_LINES = 20
#: how an entry got into the history (``moved_by``)
BY_RESET, BY_LAUNCH, BY_REQUEUE = "reset", "launch", "requeue"

#: the last entry's ``attempt`` (missing without history)
LAST_NUMBER = {"$arrayElemAt": ["$attempts.attempt", -1]}
#: the number of the last entry, 0 without history or when it is not an integer (aggregation
#: expression; a garbled one must not fail the whole update)
_LAST_NUMBER = {"$cond": [{"$in": [{"$type": LAST_NUMBER}, ["int", "long"]]}, LAST_NUMBER, 0]}


def entry_expression(moved_by: str) -> dict[str, Any]:
    """Aggregation expression of the history entry of the document's current run (pure), as
    it stands before the update it is part of. Fields the run never wrote are missing (left
    out of the entry)."""
    return {
        "attempt": {"$add": [_LAST_NUMBER, 1]},
        "status": "$status",
        "start_time": "$start_time",
        # a run fail-fast stopped has the stop's time only (``fail_fast.stop_time``)
        "stop_time": {"$ifNull": ["$stop_time", "$fail_fast.stop_time"]},
        "heartbeat": "$heartbeat",
        # Sacred's host block is {hostname, os, cpu, ...}; SEML 0.5 may store a plain name
        "host": {"$ifNull": ["$host.hostname", "$host"]},
        "cluster": "$execution.cluster",
        "array_id": "$execution.array_id",
        "task_id": "$execution.task_id",
        "restart": "$execution.restart",
        "output_file": "$execution.slurm_output_file",
        "fail_trace_tail": {
            "$cond": [
                {"$isArray": "$fail_trace"},
                {"$slice": ["$fail_trace", -TRACE_TAIL_LINES]},
                "$$REMOVE",
            ]
        },
        "reason": {
            "$cond": [
                {"$and": [{"$eq": ["$status", "KILLED"]}, {"$isArray": "$fail_trace"}]},
                {"$arrayElemAt": ["$fail_trace", 0]},
                "$$REMOVE",
            ]
        },
        "pruned": "$pruned",
        "moved_by": {"$literal": moved_by},
        "moved_time": "$$NOW",
    }


def ran_expression() -> dict[str, Any]:
    """Aggregation expression: whether the document holds a run to keep (pure): it left STAGED
    (a STAGED or QUEUED one never ran; a reset of it moves nothing)."""
    return {"$not": [{"$in": ["$status", ["STAGED", "QUEUED"]]}]}


def history_expression(moved_by: str, when: Any = None) -> dict[str, Any]:
    """Aggregation expression of the ``attempts`` array after moving the current run into it
    (pure): the entry (:func:`entry_expression`) appended, only the last
    :data:`HISTORY_LIMIT` kept, when ``when`` (an aggregation expression; default
    :func:`ran_expression`) holds; else ``attempts`` as it is."""
    pushed = {
        "$slice": [
            {
                "$concatArrays": [
                    {"$ifNull": ["$attempts", []]},
                    [entry_expression(moved_by)],
                ]
            },
            -HISTORY_LIMIT,
        ]
    }
    return {"$cond": [ran_expression() if when is None else when, pushed, "$attempts"]}


def move_pipeline(
    moved_by: str, set_fields: Mapping[str, Any], unset_fields: Sequence[str]
) -> list[dict[str, Any]]:
    """An update pipeline (MongoDB 4.2+) that moves the current run into ``attempts``
    (:func:`history_expression`), sets ``set_fields`` (plain values, taken literally) and
    removes ``unset_fields`` (dotted paths; a path through an array, ``slurm.array_id``,
    removes the field from every element), in one atomic write per document (pure)."""
    values = {name: {"$literal": value} for name, value in set_fields.items()}
    pipeline: list[dict[str, Any]] = [{"$set": {"attempts": history_expression(moved_by)}}]
    if values:
        pipeline.append({"$set": values})
    if unset_fields:
        pipeline.append({"$unset": list(unset_fields)})
    return pipeline


def history(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The history entries of ``doc`` (pure; ``[]`` when it has none or ``attempts`` is not a
    list; entries that are not documents are left out)."""
    found = doc.get("attempts")
    if not isinstance(found, list):
        return []
    return [dict(e) for e in found if isinstance(e, Mapping)]


def current_number(doc: Mapping[str, Any]) -> int:
    """The number of ``doc``'s current run (pure): the last entry's ``attempt`` + 1 (1 without
    history, or when that is not an integer: :func:`number_after`)."""
    entries = history(doc)
    return number_after(entries[-1].get("attempt") if entries else None)


def number_after(last: Any) -> int:
    """The number of the run after the one numbered ``last`` (pure; 1 when ``last`` is
    missing or not an integer, as the update pipeline numbers it)."""
    return (last if isinstance(last, int) and not isinstance(last, bool) else 0) + 1


def check_selector(selector: Any) -> int:
    """``selector`` when it can name an attempt (pure): a non-zero integer. Raises
    ``ValueError`` saying what to give otherwise."""
    if isinstance(selector, bool) or not isinstance(selector, int) or selector == 0:
        raise ValueError(
            f"attempt={selector!r}: give an attempt number (1 = the first run) or a negative "
            "index (-1 = the current run, -2 = the one before)."
        )
    return selector


def resolve_attempt(selector: int, current: int) -> int:
    """The attempt number ``selector`` means for an experiment whose current run is number
    ``current`` (pure): a positive ``selector`` is the number itself (1 = the first run), a
    negative one counts back from the current run (-1 = the current run, -2 = the one before).
    Raises ``ValueError`` for 0, a non-integer, or a number outside ``1..current``."""
    check_selector(selector)
    number = selector if selector > 0 else current + 1 + selector
    if not 1 <= number <= current:
        raise ValueError(
            f"attempt={selector}: the experiment has attempts 1 to {current} (the current run "
            f"is {current})."
        )
    return number


def trace_tail(lines: Any, count: int = 3) -> str:
    """The last ``count`` non-blank lines of a stored trace (a list of lines), joined by
    `` | `` (pure; ``""`` for none)."""
    if not isinstance(lines, list):
        return ""
    kept = [str(line).strip() for line in lines if str(line).strip()]
    return " | ".join(kept[-count:])


def _fail_fast_stop(doc: Mapping[str, Any]) -> Any:
    """When fail-fast stopped ``doc``'s run: ``fail_fast.stop_time`` (the stop writes no
    ``stop_time``, which Sacred writes when a run ends on its own), else None (pure)."""
    fail_fast = doc.get("fail_fast")
    return fail_fast.get("stop_time") if isinstance(fail_fast, Mapping) else None


def current_entry(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The current run of ``doc`` as a history entry would hold it (pure; the fields of
    :func:`entry_expression` but ``moved_by``/``moved_time``, plus ``current: True``), for
    showing it after the history. A field the run has not written is left out."""
    execution = doc.get("execution")
    if not isinstance(execution, Mapping):
        execution = {}
    host = doc.get("host")
    trace = doc.get("fail_trace")
    found = {
        "attempt": current_number(doc),
        "status": doc.get("status"),
        "start_time": doc.get("start_time"),
        "stop_time": doc.get("stop_time") or _fail_fast_stop(doc),
        "heartbeat": doc.get("heartbeat"),
        "host": host.get("hostname", host) if isinstance(host, Mapping) else host,
        "cluster": execution.get("cluster"),
        "array_id": execution.get("array_id"),
        "task_id": execution.get("task_id"),
        "restart": execution.get("restart"),
        "output_file": execution.get("slurm_output_file"),
        "fail_trace_tail": trace[-TRACE_TAIL_LINES:] if isinstance(trace, list) else None,
        "reason": trace[0] if doc.get("status") == "KILLED" and isinstance(trace, list) else None,
        "pruned": doc.get("pruned"),
    }
    return {k: v for k, v in found.items() if v is not None} | {"current": True}


def job_label(entry: Mapping[str, Any]) -> str:
    """``<array>_<task>`` of an entry's job (``restart N`` appended after a requeue), or ``""``
    (pure)."""
    if entry.get("array_id") is None:
        return ""
    label = f"{entry.get('array_id')}_{entry.get('task_id', '?')}"
    restart = entry.get("restart")
    return f"{label} (restart {restart})" if isinstance(restart, int) and restart else label


def why_it_ended(entry: Mapping[str, Any], lines: int = 1) -> str:
    """What an entry says of how its run ended (pure): its ``pruned`` step and value, else its
    ``reason`` (a KILLED run's), else the last ``lines`` lines of its fail trace
    (:func:`trace_tail`), else ``""``."""
    pruned = entry.get("pruned")
    if isinstance(pruned, Mapping):
        return f"pruned at step {pruned.get('step')} ({pruned.get('rule')}: {pruned.get('value')})"
    if entry.get("reason"):
        return str(entry["reason"]).strip()
    return trace_tail(entry.get("fail_trace_tail"), lines)


def time_label(value: Any) -> str:
    """A stored time as ``YYYY-MM-DD HH:MM:SS`` (UTC, as stored), ``""`` for none; a value
    that is not a ``datetime`` as its text (pure)."""
    from datetime import datetime

    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M:%S")
    return "" if value is None else str(value)


def stop_label(start: Any, stop: Any) -> str:
    """How ``print-attempts`` shows a run's stop time (pure): ``HH:MM:SS`` on the day it
    started, else as :func:`time_label` shows it."""
    from datetime import datetime

    if isinstance(stop, datetime) and isinstance(start, datetime) and start.date() == stop.date():
        return stop.strftime("%H:%M:%S")
    return time_label(stop)


def ended_lines(entries: Sequence[Mapping[str, Any]], width: int) -> list[str]:
    """What ``print-attempts`` prints under an experiment's table (pure): for each entry that
    says how its run ended (:func:`why_it_ended`), ``  #<attempt> <status>: <why>`` wrapped to
    ``width`` columns (at least 40), continuation lines indented; a word longer than a line
    (a path) is cut across lines, so no line is longer than ``width``."""
    import textwrap

    width = max(40, width)
    out: list[str] = []
    for entry in entries:
        why = why_it_ended(entry)
        if not why:
            continue
        head = f"  #{entry.get('attempt', '?')} {entry.get('status', '')}: "
        out += textwrap.wrap(
            head + why,
            width=width,
            subsequent_indent=" " * 6,
            break_long_words=True,
            break_on_hyphens=False,
        )
    return out
