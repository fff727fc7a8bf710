"""What one save of the experiment's Sacred run sends to MongoDB (pure).

Sacred 0.8.7's ``MongoObserver`` writes its whole run entry with ``$set`` on every heartbeat
(every 10 s) and at the end: the captured output (up to :data:`MAX_CAPTURED_CHARS`), ``info``,
``host``, ``experiment``, ... A task printing 10 KB/s for 60 s sent 5.7 times what it printed,
and a long one resends the whole 1 MB cap with every beat. Here a save sends only what changed
since the last save the server acknowledged (``status`` and ``heartbeat`` always), and the new
output as a chunk the server appends to ``captured_out`` (an update pipeline, MongoDB >= 4.2),
trimming it to the cap itself exactly as :func:`bounded_output` does: the document holds the
same ``captured_out`` string as with Sacred's own saves at every moment (Omniboard, SEML's CLI
and ``seml <col> print-output`` read it while the run is RUNNING), and the bytes per beat are
O(output printed since the last beat), whatever the run's length.

An append is not idempotent (a save that reached the server but whose answer was lost, then
sent again, would double the chunk), so it is guarded: its filter also requires the
``heartbeat`` the last acknowledged save wrote, and each append writes a new one
(:func:`save_update` sends the whole entry instead when the heartbeat did not move on, at the
millisecond MongoDB stores). A guarded update that matches nothing means the server holds
something else: the caller then sends the whole entry (:func:`full_update`).
"""

from __future__ import annotations

import copy
import datetime
from collections.abc import Mapping
from typing import Any

#: ``captured_out`` keeps at most this many characters, the last ones: a MongoDB document holds
#: at most 16 MB, and Sacred's final save of a bigger run fails (the run would end KILLED)
MAX_CAPTURED_CHARS = 1_000_000

#: the line :func:`bounded_output` puts before the kept characters once some were dropped
DROPPED_MARKER = (
    "[seml-hydra: earlier output dropped from captured_out; the job's output file has it]\n"
)

#: fields every save sends even when unchanged: ``heartbeat`` (the sign of life), ``status``
#: (a heartbeat re-asserts RUNNING, as Sacred's do)
ALWAYS_SENT = ("heartbeat", "status")

#: characters of the end of the stored output searched for in the new one (:func:`output_chunk`;
#: at most a quarter of it)
PROBE_CHARS = 16_384
#: candidate overlaps :func:`output_chunk` checks from each side before it gives up (output
#: repeating one short pattern)
PROBE_TRIES = 16


def bounded_output(text: str, cap: int = MAX_CAPTURED_CHARS) -> str:
    """Sacred's ``captured_out_filter``: ``text`` or, above ``cap`` characters, the line
    :data:`DROPPED_MARKER` followed by the last ``cap`` characters (the job's output file keeps
    everything). Sacred calls it with its last result followed by the new output, so a marker
    already in front is dropped before the cut."""
    if len(text) <= cap:
        return text
    if text.startswith(DROPPED_MARKER):
        text = text[len(DROPPED_MARKER) :]
    return DROPPED_MARKER + text[-cap:]


def appended(stored: str, chunk: str, cap: int = MAX_CAPTURED_CHARS) -> str:
    """``captured_out`` after the server appended ``chunk`` to ``stored``: what
    :func:`append_expression` computes in MongoDB, i.e. ``bounded_output(stored + chunk)``
    for a ``stored`` that :func:`bounded_output` made."""
    return bounded_output(stored + chunk, cap)


def append_expression(chunk: str, cap: int = MAX_CAPTURED_CHARS) -> dict[str, Any]:
    """The aggregation expression (for an update pipeline's ``$set``) of ``captured_out`` with
    ``chunk`` appended and cut to ``cap`` characters as :func:`appended` does (``$strLenCP`` and
    ``$substrCP`` count code points, as Python's ``len`` does). A missing ``captured_out``
    counts as empty."""
    marker = len(DROPPED_MARKER)
    text = {"$concat": [{"$ifNull": ["$captured_out", ""]}, {"$literal": chunk}]}
    body = {
        "$cond": [
            {"$eq": [{"$substrCP": ["$$text", 0, marker]}, DROPPED_MARKER]},
            {"$substrCP": ["$$text", marker, {"$strLenCP": "$$text"}]},
            "$$text",
        ]
    }
    start = {"$max": [0, {"$subtract": [{"$strLenCP": "$$body"}, cap]}]}
    cut = {"$let": {"vars": {"body": body}, "in": {"$substrCP": ["$$body", start, cap]}}}
    return {
        "$let": {
            "vars": {"text": text},
            "in": {
                "$cond": [
                    {"$lte": [{"$strLenCP": "$$text"}, cap]},
                    "$$text",
                    {"$concat": [DROPPED_MARKER, cut]},
                ]
            },
        }
    }


def output_chunk(stored: str, new: str, cap: int = MAX_CAPTURED_CHARS) -> str | None:
    """The text whose append to ``stored`` gives ``new`` (``appended(stored, chunk) == new``),
    as short as found, or None when none is found (then ``new`` is sent whole).

    ``stored`` and ``new`` are two successive ``captured_out`` values of one run (the one the
    server holds and the current one). Below the cap the chunk is ``new``'s tail after
    ``stored``. Once the cap cuts the front, ``new``'s kept text starts inside ``stored``'s:
    the overlap is found by searching the end of ``stored`` in ``new`` (from the right) and the
    start of ``new`` in ``stored`` (from the left), :data:`PROBE_CHARS` characters (at most a
    quarter of ``stored``), :data:`PROBE_TRIES` candidates each, every candidate checked whole
    (any overlap that checks gives the right result). When more than ``cap - PROBE_CHARS`` new
    characters came since ``stored``, no overlap is left and None says to send ``new`` whole,
    which is then O(new output) too; so it is for output that repeats one short pattern over
    more than the candidates tried on both sides. O(len(new)) per candidate, C-level string
    operations only."""
    if new == stored:
        return ""
    if new.startswith(stored):
        chunk = new[len(stored) :]
        return chunk if appended(stored, chunk, cap) == new else None
    if not new.startswith(DROPPED_MARKER):
        return None
    old = stored[len(DROPPED_MARKER) :] if stored.startswith(DROPPED_MARKER) else stored
    kept = new[len(DROPPED_MARKER) :]
    size = min(len(old) // 4, PROBE_CHARS)
    if size == 0:
        return None
    for overlap in (*_by_end(old, kept, size), *_by_start(old, kept, size)):
        if old.endswith(kept[:overlap]) and appended(stored, kept[overlap:], cap) == new:
            return kept[overlap:]
    return None


def _by_end(old: str, kept: str, size: int) -> list[int]:
    """Candidate overlaps (longest first): where the last ``size`` characters of ``old`` end in
    ``kept``."""
    probe, end = old[len(old) - size :], min(len(old), len(kept))
    out: list[int] = []
    while len(out) < PROBE_TRIES and (start := kept.rfind(probe, 0, end)) >= 0:
        out.append(start + size)
        end = start + size - 1
    return out


def _by_start(old: str, kept: str, size: int) -> list[int]:
    """Candidate overlaps (longest first): where the first ``size`` characters of ``kept``
    start in ``old``."""
    probe, begin = kept[:size], max(0, len(old) - len(kept))
    out: list[int] = []
    while len(out) < PROBE_TRIES and (start := old.find(probe, begin)) >= 0:
        out.append(len(old) - start)
        begin = start + 1
    return out


def _millis(value: Any) -> Any:
    """``value`` as MongoDB stores it: a datetime truncated to the millisecond (BSON dates)."""
    if isinstance(value, datetime.datetime):
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    return value


def full_update(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The update that writes the whole ``entry`` (Sacred's own save: ``{"$set": entry}``)."""
    return {"$set": dict(entry)}


def save_update(
    stored: Mapping[str, Any] | None,
    entry: Mapping[str, Any],
    cap: int = MAX_CAPTURED_CHARS,
    *,
    append: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """The update of one save of the run entry ``entry`` and the filter it needs in addition to
    the document's own (``{}``, or the guard ``{"heartbeat": ...}`` of an append).

    Args:
        stored: the entry of the last save the server acknowledged (:func:`snapshot`), or None
            when unknown (the first save, or after a save that matched nothing).
        entry: the run entry to store (Sacred's ``run_entry`` without ``config``).
        cap: the characters ``captured_out`` keeps (:func:`bounded_output`).
        append: False for a server without update pipelines (MongoDB < 4.2): a changed
            ``captured_out`` is then sent whole.
    Returns:
        ``(update, guard)``: ``full_update(entry)`` and ``{}`` when ``stored`` is None;
        otherwise a ``$set`` of the fields that differ from ``stored`` and of
        :data:`ALWAYS_SENT`, where a changed ``captured_out`` becomes, when
        :func:`output_chunk` finds the new text and the heartbeat moved on (milliseconds), an
        update pipeline appending the chunk (values as ``$literal``); either is guarded by
        ``stored``'s heartbeat (:func:`stored_guard`: a document that no longer holds
        ``stored`` gets the whole entry instead). A ``captured_out`` that is not a string is
        sent whole.
    """
    if stored is None:
        return full_update(entry), {}
    changed = {
        key: value
        for key, value in entry.items()
        if key in ALWAYS_SENT or key not in stored or stored[key] != value
    }
    guard = stored_guard(stored)
    if "captured_out" not in changed:
        return {"$set": changed}, guard
    before, after = stored.get("captured_out"), changed["captured_out"]
    moved_on = _millis(entry.get("heartbeat")) != _millis(stored.get("heartbeat"))
    chunk = None
    if append and isinstance(before, str) and isinstance(after, str) and moved_on:
        chunk = output_chunk(before, after, cap)
    if chunk is None:
        return {"$set": changed}, guard
    fields = {key: {"$literal": value} for key, value in changed.items() if key != "captured_out"}
    fields["captured_out"] = append_expression(chunk, cap)
    return [{"$set": fields}], guard


def stored_guard(stored: Mapping[str, Any]) -> dict[str, Any]:
    """The filter that a document still holds the save ``stored`` (pure): its ``heartbeat``,
    which only this run's saves write; a null one (Sacred's first save) must be there as
    null, not missing. A partial save is right only on top of ``stored``: a document rewritten
    meanwhile (SEML 0.5.7's ``reset`` of a RUNNING experiment keeps only SEML's fields) would
    otherwise end without ``start_time``, ``host``, ``experiment`` and the earlier output."""
    beat = stored.get("heartbeat")
    return {"heartbeat": {"$type": "null"} if beat is None else beat}


def snapshot(entry: Mapping[str, Any]) -> dict[str, Any] | None:
    """A copy of ``entry`` that later changes to the entry leave alone (Sacred appends to
    ``info["metrics"]`` in place), for :func:`save_update`'s ``stored``; None when it cannot be
    copied (then the next save sends the whole entry)."""
    try:
        return copy.deepcopy(dict(entry))
    except Exception:
        return None


def next_heartbeat(previous: Any, now: datetime.datetime) -> datetime.datetime:
    """A heartbeat for the final save that differs from ``previous`` at the millisecond MongoDB
    stores (so the final save's append can be guarded, :func:`save_update`): ``now``, or one
    millisecond after ``previous`` when ``now`` is not later."""
    now = _millis(now)
    if isinstance(previous, datetime.datetime) and now <= _millis(previous):
        return _millis(previous) + datetime.timedelta(milliseconds=1)
    return now
