"""``seml <collection> results``: one row per experiment with the config keys that vary across
the selection and the result fields, sorted, as a table, CSV, Markdown or JSON.

The middle is pure (:class:`TableScan`, :func:`varying_keys`, :func:`table_columns`,
:func:`sort_order`, :func:`sort_rows`, the writers :func:`csv_lines`, :func:`markdown_lines`,
:func:`json_lines`, :func:`text_lines` and their one-string forms :func:`to_csv`...,
:func:`cell`). :func:`results_table` reads the documents (``store.results.get_results``) and
builds the table in memory, for Python (``to_data_frame=True``: a ``pandas.DataFrame`` with the
very same columns). The command streams instead (:func:`results_stream`): a first read of the
collection finds the columns (and the widths of the text table, and the order of the ``_id`` s
when the table is sorted by another column), a second one hands the rows to a writer as they
arrive, so its memory does not grow with the number of rows.

SEML has no such command: its users call ``get_results(..., to_data_frame=True)`` and drop the
constant columns by hand; this is that, done once.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

from seml_hydra.core.documents import task_config
from seml_hydra.core.shell import seml_for
from seml_hydra.core.states import COMPLETED
from seml_hydra.core.terminal import terminal_safe
from seml_hydra.manage.selection import ManageError
from seml_hydra.store.results import (
    flatten,
    get_results,
    need_pandas,
    read_results,
    results_filter,
    warn_stored_objects,
)

#: the prefixes of the columns: config keys (only those that vary) and result fields (all)
CONFIG = "config."
RESULT = "result"
#: the column of the step an experiment was stopped early at (``seml_hydra.report``)
PRUNED_STEP = "pruned.step"
#: the fields of a document the table reads
FIELDS = ("_id", "status", "config", "result", "hydra.added_seed", "pruned")
#: rows a writer's lines are joined into before each write (one write per row is slow)
LINES_PER_WRITE = 1000
#: documents MongoDB sends per batch: pymongo decodes a whole batch at once, and a batch of
#: its default 16 MiB holds ~80,000 of the table's small documents (~120 MiB as dicts)
DOCS_PER_BATCH = 1000
#: ``_id`` s asked for in one query when the rows are printed in an order MongoDB does not give
IDS_PER_QUERY = 1000


def _canonical(value: Any) -> str:
    """A value's comparable form (lists and dicts are not hashable; 1 and 1.0 are equal)."""
    return json.dumps(value, sort_keys=True, default=repr)


_MISSING = object()

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


def _text(value: Any) -> str:
    """A cell of the text table: :func:`cell`, on one line, without escape sequences."""
    shown = cell(value)
    if shown.isprintable():
        return shown
    return terminal_safe(shown).replace("\n", " ").replace("\t", " ")


def _width(shown: str) -> int:
    """Terminal columns of ``shown`` (wide characters count two: ``rich.cells.cell_len``)."""
    if shown.isascii():
        return len(shown)
    from rich.cells import cell_len

    return cell_len(shown)


def _is_result(key: str) -> bool:
    return key == RESULT or key.startswith(RESULT + ".")


class TableScan:
    """What the results table needs to know of all its rows, gathered one row at a time
    (:meth:`add`) in memory that does not grow with their number (pure): the columns
    (:meth:`columns`), the width of each column of the text table (:meth:`widths`, when
    ``measure``), whether the rows came in the order :func:`sort_order` gives for ``sort``
    (:attr:`in_order`), every key seen (:attr:`keys`, first-seen order).

    Args:
        sort: the column the table is sorted by (``"_id"`` by default).
        descending: largest first.
        measure: also measure the text table's column widths (only the table format needs
            them).
        prefix: the keys whose variation decides whether they are columns (``"config."``).
    """

    def __init__(
        self,
        sort: str = "_id",
        descending: bool = False,
        measure: bool = False,
        prefix: str = CONFIG,
    ) -> None:
        self.sort, self.descending, self.measure, self.prefix = sort, descending, measure, prefix
        self.count = 0
        self.in_order = True
        self.keys: dict[str, None] = {}
        self._shapes: set[tuple[str, ...]] = set()
        self._first: dict[str, Any] = {}  # key -> its first value (``_same_key``)
        self._present: dict[str, int] = {}  # key -> rows holding it
        self._varies: set[str] = set()
        self._statuses: set[Any] = set()  # at most two: whether the states differ
        self._pruned = False
        self._last: Any = _MISSING  # the last sort value (``_sort_value``); None: a missing one
        self._widths: dict[str, int] = {}

    def add(self, row: Mapping[str, Any]) -> None:
        """Take one row (a flattened document, in the order the table reads them)."""
        self.count += 1
        shape = tuple(row)
        if shape not in self._shapes:
            self._shapes.add(shape)
            self.keys.update(dict.fromkeys(shape))
        if len(self._statuses) < 2:
            self._statuses.add(_same_key(row.get("status")))
        self._pruned = self._pruned or PRUNED_STEP in row
        for key, value in row.items():
            if key.startswith(self.prefix) and key not in self._varies:
                same = _same_key(value)
                self._present[key] = self._present.get(key, 0) + 1
                if self._first.setdefault(key, same) != same:
                    self._varies.add(key)
            if self.measure:
                width = _width(_text(value))
                if width > self._widths.get(key, 0):
                    self._widths[key] = width
        if self.in_order:
            self._follow(row.get(self.sort))

    def _follow(self, value: Any) -> None:
        """Note whether ``value`` (this row's sort value) keeps the rows in table order:
        values in order, the rows without one (None, NaN) after all others."""
        if _missing(value):
            self._last = None
            return
        if self._last is None:  # a row with a value after one without
            self.in_order = False
            return
        key = _sort_value(value)
        if self._last is not _MISSING:
            self.in_order = key <= self._last if self.descending else key >= self._last
        self._last = key

    def varying(self) -> list[str]:
        """The keys of :attr:`prefix` whose value is not the same in every row, in first-seen
        order (a key some rows lack varies)."""
        return [
            key
            for key in self.keys
            if key.startswith(self.prefix)
            and (key in self._varies or self._present.get(key, 0) < self.count)
        ]

    def columns(self) -> list[str]:
        """The columns (:func:`table_columns`)."""
        columns = ["_id"]
        if len(self._statuses) > 1:
            columns.append("status")
        if self._pruned:
            columns.append(PRUNED_STEP)
        return columns + self.varying() + [key for key in self.keys if _is_result(key)]

    def widths(self, columns: Sequence[str]) -> list[int]:
        """The width of each of ``columns`` in the text table: its widest cell or its name."""
        return [max(_width(_text(c)), self._widths.get(c, 0)) for c in columns]

    def check_sort(self) -> None:
        """Raise ``ManageError`` when no row has the sort column (:func:`_no_column`)."""
        if self.count and self.sort not in self.keys:
            raise _no_column(self.sort, self.keys)


def _no_column(key: str, keys: Iterable[str]) -> ManageError:
    """The error of a sort column no row has; it lists the columns there are."""
    return ManageError(f"No column {key!r} to sort by; there are: {', '.join(sorted(keys))}.")


def varying_keys(rows: Iterable[Mapping[str, Any]], prefix: str = CONFIG) -> list[str]:
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
    return _scan(rows, prefix=prefix).varying()


def _scan(rows: Iterable[Mapping[str, Any]], **options: Any) -> TableScan:
    scan = TableScan(**options)
    for row in rows:
        scan.add(row)
    return scan


def table_columns(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """The columns of the results table of ``rows`` (flattened documents), pure: ``_id``;
    ``status`` when the rows are in more than one state; ``pruned.step`` (where it was stopped
    early: ``seml_hydra.report``) when a row was; the config keys that vary
    (:func:`varying_keys`); every result field (``result`` when a result is a plain value,
    ``result.<field>...`` for a mapping), in first-seen order."""
    return _scan(rows).columns()


def _sort_value(value: Any) -> tuple[int, Any]:
    """Numbers before strings before anything else (by its JSON form); booleans as numbers."""
    if isinstance(value, (int, float)) and not (isinstance(value, float) and math.isnan(value)):
        return (0, value)
    if isinstance(value, str):
        return (1, value)
    return (2, _canonical(value))


def _missing(value: Any) -> bool:
    """A sort value that sorts last in either direction: none, or NaN."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def sort_order(values: Sequence[Any], descending: bool = False) -> list[int]:
    """The positions of ``values`` (one sort value per row, None for a row without it) in
    table order, pure: rows with a value by :func:`_sort_value` (stable: ties keep their
    order), then the rows without one (None or NaN) in their order, in either direction."""
    present = [i for i, value in enumerate(values) if not _missing(value)]
    absent = [i for i, value in enumerate(values) if _missing(value)]
    present.sort(key=lambda i: _sort_value(values[i]), reverse=descending)
    return present + absent


def sort_rows(
    rows: Sequence[Mapping[str, Any]], key: str | None = None, descending: bool = False
) -> list[Mapping[str, Any]]:
    """``rows`` sorted by the column ``key`` (default ``_id``), pure (:func:`sort_order`).

    Raises:
        ManageError: no row has ``key`` (the message lists the columns there are).
    """
    key = key or "_id"
    if rows and not any(key in row for row in rows):
        raise _no_column(key, {name for row in rows for name in row})
    return [rows[i] for i in sort_order([row.get(key) for row in rows], descending)]


# -- writers: each yields the table's text piece by piece, reading ``rows`` as it goes ---------
def csv_lines(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """The table as CSV, one line at a time, the header first (full float precision), pure."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")

    def line(cells: Iterable[Any]) -> str:
        writer.writerow(cells)
        text = out.getvalue()
        out.seek(0)
        out.truncate()
        return text

    yield line(columns)
    for row in rows:
        yield line(
            [repr(v) if isinstance(v, float) else cell(v) for v in (row.get(c) for c in columns)]
        )


def markdown_lines(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """The table as a GitHub Markdown pipe table, one line at a time (``|`` in cells escaped;
    escape sequences and control characters a document may hold removed:
    ``core.terminal.terminal_safe``), pure."""

    def line(cells: Sequence[str]) -> str:
        safe = (terminal_safe(c).replace("|", "\\|").replace("\n", " ") for c in cells)
        return "| " + " | ".join(safe) + " |\n"

    yield line(columns)
    yield line(["---"] * len(columns))
    for row in rows:
        yield line([cell(row.get(c)) for c in columns])


def json_lines(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> Iterator[str]:
    """The table as a JSON list of objects keyed by the columns (missing values ``null``),
    one object at a time: the text ``json.dumps(list, indent=2, default=str)`` gives, with no
    newline at the end. Pure."""
    start = "[\n"
    for row in rows:
        obj = json.dumps({c: row.get(c) for c in columns}, indent=2, default=str)
        yield start + "  " + obj.replace("\n", "\n  ")
        start = ",\n"
    yield "[]" if start == "[\n" else "\n]"


def text_lines(
    columns: Sequence[str],
    rows: Iterable[Mapping[str, Any]],
    widths: Sequence[int],
    title: str = "",
) -> Iterator[str]:
    """The table as box-drawn text, one line at a time (the look of ``rich.table.Table`` with
    its default box: heavy head, columns right-aligned but ``status``), every cell on one line
    (escape sequences and control characters removed: ``core.terminal.terminal_safe``; newlines
    and tabs as spaces), each column ``widths[i]`` wide (:meth:`TableScan.widths`: its widest
    cell; a cell wider than that, from a document changed since it was measured, widens its own
    line only). No fitting to the terminal: pipe it to ``less -S`` when wide. Pure."""
    left = [c == "status" for c in columns]

    def pad(c: str, w: int, is_left: bool) -> str:
        fill = " " * (w - _width(c))
        return c + fill if is_left else fill + c

    def line(cells: Sequence[str], bar: str) -> str:
        padded = map(pad, cells, widths, left)
        return f"{bar} " + f" {bar} ".join(padded) + f" {bar}\n"

    def rule(a: str, fill: str, mid: str, b: str) -> str:
        return a + mid.join(fill * (w + 2) for w in widths) + b + "\n"

    if title:
        yield _text(title) + "\n"
    yield rule("┏", "━", "┳", "┓")
    yield line([_text(c) for c in columns], "┃")
    yield rule("┡", "━", "╇", "┩")
    for row in rows:
        yield line([_text(row.get(c)) for c in columns], "│")
    yield rule("└", "─", "┴", "┘")


def chunks(lines: Iterable[str], size: int = LINES_PER_WRITE) -> Iterator[str]:
    """``lines`` joined ``size`` at a time: what one write of a streamed table prints."""
    it = iter(lines)
    while piece := "".join(islice(it, size)):
        yield piece


def to_csv(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    """The table as CSV with a header line (full float precision), pure (:func:`csv_lines`)."""
    return "".join(csv_lines(columns, rows))


def to_markdown(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    """The table as a GitHub Markdown pipe table, pure (:func:`markdown_lines`)."""
    return "".join(markdown_lines(columns, rows))


def to_json(columns: Sequence[str], rows: Iterable[Mapping[str, Any]]) -> str:
    """The table as a JSON list of objects keyed by the columns (missing values ``null``),
    pure (:func:`json_lines`)."""
    return "".join(json_lines(columns, rows))


def to_text(columns: Sequence[str], rows: Sequence[Mapping[str, Any]], title: str = "") -> str:
    """The table as box-drawn text (:func:`text_lines`), its columns as wide as their widest
    cell. Pure; linear in the number of cells, where rich lays out the whole table first
    (minutes for 100,000 rows)."""
    widths = _scan(rows, measure=True, prefix="\0").widths(columns)
    return "".join(text_lines(columns, rows, widths, title))


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
    rows = [table_row(doc) for doc in docs]
    return ResultsTable(table_columns(rows), sort_rows(rows, sort, descending))


def table_row(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The table's row of ``doc`` (a document as stored), pure: flattened, without ``hydra``
    and the seed staging added (:func:`build_table`)."""
    if "hydra" not in doc:
        return flatten(doc)
    out = {k: v for k, v in doc.items() if k != "hydra"}
    if isinstance(doc.get("config"), Mapping):
        out["config"] = task_config(doc)
    return flatten(out)


def _read_problem(
    collection: str, states: Sequence[str] | None, count: int, garbled: Sequence[Any]
) -> None:
    """Raise ``ManageError`` when the read found no experiment (``count`` 0) or ones whose
    status is not a text (``garbled``: their ``_id`` s)."""
    if not count:
        chosen = "/".join(states or ()) + " " if states else ""
        hint = " (-s picks other states)" if states == [COMPLETED] else ""
        raise ManageError(f"No {chosen}experiments in {collection} match{hint}.")
    if garbled:
        raise ManageError(
            f"Experiment(s) {', '.join(map(str, garbled))} of {collection} have a status that "
            "is not a text (the document was forged or garbled): fix its status or delete it "
            f"(`{seml_for(collection)} delete -id <id>`)."
        )


def _states_and_query(
    filter: Mapping[str, Any] | None, states: Sequence[str] | None
) -> tuple[dict[str, Any], list[str] | None]:
    """The filter and states :func:`results_table` reads: COMPLETED when neither names one."""
    query = dict(filter or {})
    if states is None and "status" not in query:
        return query, [COMPLETED]
    return query, None if states is None else list(states)


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
    """The results table of ``collection`` (what ``seml <collection> results`` prints), in
    memory (the command streams it instead: :func:`results_stream`).

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
    query, states = _states_and_query(filter, states)
    docs = get_results(
        collection, filter=query, fields=FIELDS, states=states, progress=progress, db=db
    )
    garbled = [d.get("_id") for d in docs if not isinstance(d.get("status"), str)]
    _read_problem(collection, states, len(docs), garbled)
    table = build_table(docs, sort, descending)
    if pandas is None:
        return table
    return pandas.DataFrame([{c: r.get(c) for c in table.columns} for r in table.rows])


@dataclass(frozen=True)
class ResultsStream:
    """The results table of a collection, read once to know its shape: ``columns``,
    ``widths`` (of the text table; empty unless asked for), and ``rows``, a function that
    reads the collection again and yields the rows in table order as MongoDB hands them
    over (at most :data:`IDS_PER_QUERY` documents held when the order is not ``_id``'s)."""

    columns: list[str]
    widths: list[int]
    rows: Callable[[], Iterator[dict[str, Any]]]


def results_stream(
    collection: str,
    filter: Mapping[str, Any] | None = None,
    *,
    states: Sequence[str] | None = None,
    sort: str | None = None,
    descending: bool = False,
    widths: bool = False,
    db: Any = None,
) -> ResultsStream:
    """The results table of ``collection`` for ``seml <collection> results``, streamed: the
    same table as :func:`results_table` (arguments alike), in memory that does not grow with
    the number of rows. The collection is read once here (:class:`TableScan`: the columns,
    the text table's widths when ``widths``, whether ``_id`` order is the table's order; with
    ``sort`` or ``descending`` each row's ``_id`` and sort value are kept, one key and one
    ``_id`` per row, to sort the ``_id`` s by when that order is not the table's); then once
    per call of ``ResultsStream.rows`` (``store.results.read_results``, as ``get_results``
    reads). A stored object in a result warns once (``store.results.StoredObjectWarning``)
    during the first read.

    Raises:
        ManageError: as :func:`results_table`, before anything is printed.
        seml_hydra.store.errors.DatabaseError: the database cannot be reached.
    """
    from seml_hydra.store.db.client import connect
    from seml_hydra.store.db.collections import validate_collection_name
    from seml_hydra.store.db.settings import resolve_db_settings

    query, states = _states_and_query(filter, states)
    validate_collection_name(collection)
    if db is None:
        db = connect(resolve_db_settings(None))
    coll = db[collection]
    query = results_filter(query, states)
    projection = dict.fromkeys(FIELDS, 1)
    problems: list[str] = []

    def read(
        extra: Mapping[str, Any] | None = None, problems: list[str] | None = None
    ) -> Iterator[dict[str, Any]]:
        where = {"$and": [query, extra]} if extra else query
        found = [] if problems is None else problems  # warned of once, by the first read
        docs = read_results(coll, where, projection, found, batch_size=DOCS_PER_BATCH)
        return map(table_row, docs)

    scan = TableScan(sort=sort or "_id", descending=descending, measure=widths)
    # another order than _id's may be the table's: each row's _id and sort value, kept
    keyed = scan.sort != "_id" or descending
    garbled, ids, values = [], [], []
    for row in read(problems=problems):
        scan.add(row)
        if not isinstance(row.get("status"), str):
            garbled.append(row.get("_id"))
        if keyed:
            ids.append(row.get("_id"))
            values.append(row.get(scan.sort))
    warn_stored_objects(problems, collection)
    _read_problem(collection, states, scan.count, garbled)
    scan.check_sort()
    columns = scan.columns()
    if scan.in_order:
        return ResultsStream(columns, scan.widths(columns) if widths else [], read)
    ordered = [ids[i] for i in sort_order(values, descending)]
    del ids, values

    def rows_in_order() -> Iterator[dict[str, Any]]:
        for start in range(0, len(ordered), IDS_PER_QUERY):
            batch = ordered[start : start + IDS_PER_QUERY]
            found = {row.get("_id"): row for row in read({"_id": {"$in": batch}})}
            yield from (found[i] for i in batch if i in found)

    return ResultsStream(columns, scan.widths(columns) if widths else [], rows_in_order)
