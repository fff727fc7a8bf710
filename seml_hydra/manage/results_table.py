"""``seml <collection> results``: one row per experiment with the config keys that vary across
the selection and the result fields, sorted, as a table, CSV, Markdown or JSON.

The middle is pure (:func:`varying_keys`, :func:`table_columns`, :func:`sort_rows`,
:func:`to_csv`, :func:`to_markdown`, :func:`to_json`, :func:`to_text`, :func:`cell`); :func:`results_table`
reads the documents (``store.results.get_results``) and builds the table, for the CLI and for
Python (``to_data_frame=True``: a ``pandas.DataFrame`` with the very same columns).

SEML has no such command: its users call ``get_results(..., to_data_frame=True)`` and drop the
constant columns by hand; this is that, done once.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seml_hydra.core.documents import task_config
from seml_hydra.core.shell import seml_for
from seml_hydra.core.states import COMPLETED
from seml_hydra.manage.selection import ManageError
from seml_hydra.store.results import flatten, get_results, need_pandas
from seml_hydra.track.outputs import terminal_safe

#: the prefixes of the columns: config keys (only those that vary) and result fields (all)
CONFIG = "config."
RESULT = "result"
#: the column of the step an experiment was stopped early at (``seml_hydra.report``)
PRUNED_STEP = "pruned.step"


def _canonical(value: Any) -> str:
    """A value's comparable form (lists and dicts are not hashable; 1 and 1.0 are equal)."""
    return json.dumps(value, sort_keys=True, default=repr)


_MISSING = object()


def varying_keys(rows: Sequence[Mapping[str, Any]], prefix: str = CONFIG) -> list[str]:
    """The keys starting with ``prefix`` whose value is not the same in every row of ``rows``
    (flattened documents, ``store.results.flatten``); a key missing from some rows but present
    in others varies. Pure.

    Args:
        rows: flattened documents, e.g. ``[{"config.lr": 0.1, "config.seed": 1}, ...]``.
        prefix: which keys are candidates (``"config."``; ``""`` for all).

    Returns:
        The varying keys, in the order they first appear in ``rows``. One row (or none) gives
        ``[]``: nothing varies.
    """
    order = dict.fromkeys(key for key in _keys(rows) if key.startswith(prefix))
    out = []
    for key in order:
        seen: set[Any] = set()
        for row in rows:
            seen.add(_same_key(row[key]) if key in row else _MISSING)
            if len(seen) > 1:  # varies: the other rows need not be looked at
                out.append(key)
                break
    return out


#: the types whose values :func:`_same_key` compares without JSON
_SCALARS = (str, int, bool, type(None))


def _same_key(value: Any) -> Any:
    """A hashable key equal for two values exactly when their :func:`_canonical` forms are
    (pure): ``(type, value)`` for strings, integers, booleans and None (``json.dumps`` tells
    ``1``, ``1.0`` and ``true`` apart), ``(float, repr)`` for floats (``-0.0`` is not ``0.0``,
    every NaN is NaN), the JSON form for the rest."""
    kind = type(value)
    if kind in _SCALARS:
        return (kind, value)
    if kind is float:
        return (float, repr(value))
    return _canonical(value)


def _keys(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every key of ``rows``, in first-seen order (pure; rows of one shape are read once)."""
    shapes: set[tuple[str, ...]] = set()
    order: dict[str, None] = {}
    for row in rows:
        shape = tuple(row)
        if shape not in shapes:
            shapes.add(shape)
            order.update(dict.fromkeys(shape))
    return list(order)


def table_columns(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """The columns of the results table of ``rows`` (flattened documents), pure: ``_id``;
    ``status`` when the rows are in more than one state; ``pruned.step`` (where it was stopped
    early: ``seml_hydra.report``) when a row was; the config keys that vary
    (:func:`varying_keys`); every result field (``result`` when a result is a plain value,
    ``result.<field>...`` for a mapping), in first-seen order."""
    columns = ["_id"]
    if len({row.get("status") for row in rows}) > 1:
        columns.append("status")
    if any(PRUNED_STEP in row for row in rows):
        columns.append(PRUNED_STEP)
    columns += varying_keys(rows, CONFIG)
    results = [key for key in _keys(rows) if key == RESULT or key.startswith(RESULT + ".")]
    return columns + results


def _sort_value(value: Any) -> tuple[int, Any]:
    """Numbers before strings before anything else (by its JSON form); booleans as numbers."""
    if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
        return (0, value)
    if isinstance(value, str):
        return (1, value)
    return (2, _canonical(value))


def sort_rows(
    rows: Sequence[Mapping[str, Any]], key: str | None = None, descending: bool = False
) -> list[Mapping[str, Any]]:
    """``rows`` sorted by the column ``key`` (default ``_id``), pure. Rows without the key (or
    with ``None``/NaN there) come last in either direction; ties keep their order.

    Raises:
        ManageError: no row has ``key`` (the message lists the columns there are).
    """
    key = key or "_id"
    if rows and not any(key in row for row in rows):
        names = sorted({name for row in rows for name in row})
        raise ManageError(f"No column {key!r} to sort by; there are: {', '.join(names)}.")

    def missing(row: Mapping[str, Any]) -> bool:
        value = row.get(key)
        return value is None or (isinstance(value, float) and math.isnan(value))

    present = [row for row in rows if not missing(row)]
    absent = [row for row in rows if missing(row)]
    present.sort(key=lambda row: _sort_value(row[key]), reverse=descending)
    return present + absent


def cell(value: Any) -> str:
    """A value as table/CSV/Markdown text, pure: ``""`` for a missing value, floats with 6
    significant digits, lists and dicts as JSON, the rest ``str``."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value, default=repr)
    return str(value)


def to_csv(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    """The table as CSV with a header line (full float precision), pure."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(
            [repr(v) if isinstance(v, float) else cell(v) for v in (row.get(c) for c in columns)]
        )
    return out.getvalue()


def to_markdown(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    """The table as a GitHub Markdown pipe table (``|`` in cells escaped; escape sequences and
    control characters a document may hold removed: ``track.outputs.terminal_safe``), pure."""

    def line(cells: Sequence[str]) -> str:
        safe = (terminal_safe(c).replace("|", "\\|").replace("\n", " ") for c in cells)
        return "| " + " | ".join(safe) + " |"

    out = [line(columns), line(["---"] * len(columns))]
    out += [line([cell(row.get(c)) for c in columns]) for row in rows]
    return "\n".join(out) + "\n"


def to_text(columns: Sequence[str], rows: Sequence[Mapping[str, Any]], title: str = "") -> str:
    """The table as box-drawn text (the look of ``rich.table.Table`` with its default box:
    heavy head, columns right-aligned but ``status``), one line per row, every cell on one
    line (escape sequences and control characters removed: ``track.outputs.terminal_safe``;
    newlines and tabs as spaces), columns as wide as their widest cell (no fitting to the terminal:
    pipe it to ``less -S`` when wide). Pure; linear in the number of cells, where rich lays
    out the whole table first (minutes for 100,000 rows)."""
    from rich.cells import cell_len

    def text(value: Any) -> str:
        shown = cell(value)
        return (
            shown
            if shown.isprintable()
            else terminal_safe(shown).replace("\n", " ").replace("\t", " ")
        )

    def width(shown: str) -> int:
        return len(shown) if shown.isascii() else cell_len(shown)

    head = [text(c) for c in columns]
    body = [[text(row.get(c)) for c in columns] for row in rows]
    widths = [width(h) for h in head]
    for cells in body:
        widths = [max(w, width(c)) for w, c in zip(widths, cells)]
    left = [c == "status" for c in columns]

    def pad(c: str, w: int, is_left: bool) -> str:
        if c.isascii():
            return c.ljust(w) if is_left else c.rjust(w)
        return c + " " * (w - width(c)) if is_left else " " * (w - width(c)) + c

    def line(cells: Sequence[str], bar: str) -> str:
        padded = map(pad, cells, widths, left)
        return f"{bar} " + f" {bar} ".join(padded) + f" {bar}"

    def rule(a: str, fill: str, mid: str, b: str) -> str:
        return a + mid.join(fill * (w + 2) for w in widths) + b

    out = [text(title)] if title else []
    out += [rule("┏", "━", "┳", "┓"), line(head, "┃"), rule("┡", "━", "╇", "┩")]
    out += [line(cells, "│") for cells in body]
    out.append(rule("└", "─", "┴", "┘"))
    return "\n".join(out) + "\n"


def to_json(columns: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> str:
    """The table as a JSON list of objects keyed by the columns (missing values ``null``), pure."""
    return json.dumps([{c: row.get(c) for c in columns} for row in rows], indent=2, default=str)


@dataclass(frozen=True)
class ResultsTable:
    """The table: ``columns`` (names as :func:`table_columns` gives them) and ``rows`` (the
    flattened documents, sorted; a row may lack a column)."""

    columns: list[str]
    rows: list[Mapping[str, Any]]


def build_table(
    docs: Sequence[Mapping[str, Any]], sort: str | None = None, descending: bool = False
) -> ResultsTable:
    """The :class:`ResultsTable` of ``docs`` (documents as stored, nested), pure. The
    ``config.seed`` staging added to an app without a seed (``hydra.added_seed``) is left
    out, as the task never saw it (``core.documents.task_config``); ``hydra`` is no column."""
    rows = [flatten(_table_doc(doc)) for doc in docs]
    return ResultsTable(table_columns(rows), sort_rows(rows, sort, descending))


def _table_doc(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    if "hydra" not in doc:
        return doc
    out = {k: v for k, v in doc.items() if k != "hydra"}
    if isinstance(doc.get("config"), Mapping):
        out["config"] = task_config(doc)
    return out


def results_table(
    collection: str,
    filter: Mapping[str, Any] | None = None,
    *,
    states: Sequence[str] | None = None,
    sort: str | None = None,
    descending: bool = False,
    to_data_frame: bool = False,
    progress: bool = False,
    db: Any = None,
) -> Any:
    """The results table of ``collection`` (what ``seml <collection> results`` prints).

    Args:
        collection: the collection name.
        filter: a MongoDB filter (e.g. ``Selection.query()``).
        states: only these states (default: COMPLETED when ``filter`` names no ``status``).
        sort: the column to sort by (``"result.acc"``, ``"config.lr"``; default ``_id``).
        descending: largest first.
        to_data_frame: return a ``pandas.DataFrame`` with the table's columns (needs pandas).
        progress: show a progress bar while reading (``get_results``).
        db: a pymongo database (default: resolved like the ``seml`` command).

    Returns:
        A :class:`ResultsTable`, or a DataFrame.

    Raises:
        ManageError: no experiment matches, one has a status that is not a string (a forged
            or garbled document), or ``sort`` is no column.
        seml_hydra.store.errors.CollectionNotFound: the database has no such collection.
        ImportError: ``to_data_frame=True`` without pandas.
    """
    pandas = need_pandas("results_table") if to_data_frame else None
    query = dict(filter or {})
    if states is None and "status" not in query:
        states = [COMPLETED]
    docs = get_results(
        collection,
        filter=query,
        fields=["_id", "status", "config", "result", "hydra.added_seed", "pruned"],
        states=states,
        progress=progress,
        db=db,
    )
    if not docs:
        chosen = "/".join(states or ()) + " " if states else ""
        hint = " (-s picks other states)" if states == [COMPLETED] else ""
        raise ManageError(f"No {chosen}experiments in {collection} match{hint}.")
    garbled = [d.get("_id") for d in docs if not isinstance(d.get("status"), str)]
    if garbled:
        raise ManageError(
            f"Experiment(s) {', '.join(map(str, garbled))} of {collection} have a status that "
            "is not a text (the document was forged or garbled): fix its status or delete it "
            f"(`{seml_for(collection)} delete -id <id>`)."
        )
    table = build_table(docs, sort, descending)
    if pandas is None:
        return table
    return pandas.DataFrame([{c: r.get(c) for c in table.columns} for r in table.rows])
