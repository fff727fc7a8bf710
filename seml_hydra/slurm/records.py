"""squeue's and sacct's records (pure): the formats asked for (:func:`squeue_format`,
:func:`sacct_format`) and their parsers (:func:`parse_squeue` -> :class:`SqueueRow`,
:func:`parse_sacct` -> :class:`SacctRow`). ``seml_hydra.slurm.client`` runs the commands.

squeue and sacct are asked for fields separated by ASCII unit separators (``\\x1f``) and, for
squeue, records terminated by ASCII record separators (``\\x1e``): job names and comments may
contain ``|``, spaces and even newlines, which the usual ``|`` format cannot survive. A
malformed record raises :class:`ValueError` rather than being dropped (a dropped row would look
like "the job is gone"). Checked against Slurm 22.05 (``tests/fixtures/slurm``).
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from seml_hydra.slurm.parse import (
    is_alive,
    normalize_state,
    parse_array_task_spec,
    parse_duration_s,
    parse_job_id,
    parse_task_spec,
)

__all__ = [
    "FIELD_SEP",
    "RECORD_SEP",
    "SACCT_FIELDS",
    "SQUEUE_FIELDS",
    "squeue_fields",
    "SacctRow",
    "SqueueRow",
    "parse_sacct",
    "parse_squeue",
    "sacct_format",
    "squeue_format",
]

#: field separator asked of squeue (``-o``) and sacct (``--delimiter``): ASCII "unit separator"
FIELD_SEP = "\x1f"
#: record terminator appended to the squeue format: ASCII "record separator"
RECORD_SEP = "\x1e"

# --------------------------------------------------------------------------------------------
# squeue
# --------------------------------------------------------------------------------------------

#: squeue ``-o`` codes we ask for (``man squeue``): %i job id as printed (``123``,
#: ``123_4``, ``123_[1-3%1]``, ``123+0``), %A this record's own job id, %F array base job id
#: (= job id for non-arrays), %K array task spec (``N/A`` for non-arrays), %T extended state,
#: %r reason, %N node list, %M elapsed time, %u user, %j name, %k comment.
SQUEUE_FIELDS: tuple[str, ...] = ("i", "A", "F", "K", "T", "r", "N", "M", "u", "j", "k")


def squeue_fields(extra: Sequence[str] = ()) -> tuple[str, ...]:
    """:data:`SQUEUE_FIELDS` with the codes ``extra`` (e.g. ``"E"``, the job's remaining
    dependency: :attr:`SqueueRow.dependency`) before the free-text name and comment (pure)."""
    return (*SQUEUE_FIELDS[:-2], *extra, *SQUEUE_FIELDS[-2:])


_SQUEUE_ATTRS: Mapping[str, str] = {
    "i": "job_id",
    "A": "job_id_raw",
    "F": "array_job_id",
    "K": "array_task",
    "T": "state",
    "r": "reason",
    "N": "nodelist",
    "M": "elapsed_s",
    "u": "user",
    "j": "name",
    "k": "comment",
}

_NULLS = frozenset({"", "(null)", "N/A", "None", "None assigned"})


def _none_if_null(v: str) -> str | None:
    return None if v.strip() in _NULLS else v


def _none_if_unset(v: str) -> str | None:
    """Free text (a comment): only Slurm's ``(null)`` and nothing at all mean "unset"."""
    return None if v in ("", "(null)") else v


@dataclass(frozen=True)
class SqueueRow:
    """One record of squeue output in our format (:data:`SQUEUE_FIELDS`).

    Attributes:
        job_id: ``%i`` as printed: ``"123"``, ``"123_4"`` (a started array task),
            ``"123_[5-9%2]"`` (the array's still-pending tasks), ``"123+1"`` (het component).
        job_id_raw: ``%A``, this record's own numeric job id (a started array task has its own;
            the pending remainder of an array has the array's id).
        array_job_id: ``%F`` for array records, None for jobs that are not arrays.
        array_task: ``%K`` task spec (``"4"``, ``"5-9%2"``, ``"1,3,5"``) or None if no array.
        state: extended state (``%T``), upper case, e.g. ``"PENDING"``.
        reason: ``%r`` (``"JobHeldUser"``, ``"Resources"``...), None when Slurm says ``None``.
        nodelist: ``%N`` (``"node[1-2]"``), None when empty / ``(null)``.
        elapsed_s: ``%M`` in seconds (see :func:`parse_duration_s`), None if ``INVALID``.
        user: ``%u`` user name.
        name: ``%j`` job name (may contain spaces, ``|``, newlines).
        comment: ``%k`` comment, None when unset (squeue prints ``(null)``).
        extra: values of any further ``-o`` codes, keyed by code letter.
    """

    job_id: str
    job_id_raw: int
    array_job_id: int | None
    array_task: str | None
    state: str
    reason: str | None
    nodelist: str | None
    elapsed_s: float | None
    user: str
    name: str
    comment: str | None
    extra: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def task_ids(self) -> list[int] | None:
        """Array task ids this record stands for (None for non-arrays or a malformed spec)."""
        return None if self.array_task is None else parse_array_task_spec(self.array_task)

    @property
    def throttle(self) -> int | None:
        """The array's ``%N`` throttle when squeue printed one (pending remainder rows)."""
        if self.array_task is None:
            return None
        parsed = parse_task_spec(self.array_task)
        return None if parsed is None else parsed[1]

    @property
    def alive(self) -> bool:
        """``parse.is_alive`` of :attr:`state`."""
        return is_alive(self.state)

    @property
    def dependency(self) -> str | None:
        """squeue's ``%E`` when asked for (:func:`squeue_fields`): the dependencies not
        yet satisfied, e.g. ``afterok:12_*(unfulfilled)``, ``afterok:12_*(failed)``; None when
        there is none or it was not asked for."""
        value = self.extra.get("E")
        return None if value is None else _none_if_null(value.strip())


def _codes(fields: Sequence[str]) -> list[str]:
    codes = [f.lstrip("%") for f in fields]
    for c in codes:
        if not re.fullmatch(r"[A-Za-z]", c):
            raise ValueError(f"squeue field codes are single letters like 'i' or '%i', got {c!r}")
    return codes


def squeue_format(fields: Sequence[str] = SQUEUE_FIELDS) -> str:
    """The ``squeue -o`` string for ``fields``: ``%i<US>%A<US>...%k<RS>``."""
    return FIELD_SEP.join(f"%{c}" for c in _codes(fields)) + RECORD_SEP


def _split_records_by_lines(text: str, sep: str, n: int) -> list[list[str]]:
    """Rows of ``n`` ``sep``-separated fields; a row whose fields contain newlines is joined."""
    rows: list[list[str]] = []
    buf: str | None = None
    for line in text.split("\n"):
        if buf is None:
            if not line.strip():
                continue
            buf = line
        else:
            buf = f"{buf}\n{line}"
        if buf.count(sep) >= n - 1:
            rows.append(buf.split(sep, n - 1))
            buf = None
    if buf is not None:
        raise ValueError(f"incomplete record (expected {n} fields): {buf!r}")
    return rows


def parse_squeue(
    text: str,
    fields: Sequence[str] = SQUEUE_FIELDS,
    *,
    field_sep: str = FIELD_SEP,
    record_sep: str | None = RECORD_SEP,
) -> list[SqueueRow]:
    """Rows of ``squeue --noheader -o <squeue_format(fields)>`` output.

    ``fields`` are the ``-o`` codes in output order (``"i"`` or ``"%i"``) and must include
    every code of :data:`SQUEUE_FIELDS`; others go to :attr:`SqueueRow.extra`. Records end with
    ``record_sep`` (a newline follows it); with ``record_sep=None`` records are lines, joined
    while a record has too few fields (a newline inside a name) -- a newline inside the *last*
    field cannot be told from the end of the record there. Surplus separators stay in the
    last field. Raises :class:`ValueError` for a record with too few fields or a
    non-numeric ``%A``/``%F`` -- never silently drops a row.
    """
    codes = _codes(fields)
    missing = [c for c in SQUEUE_FIELDS if c not in codes]
    if missing:
        raise ValueError(f"squeue fields lack {missing}")
    n = len(codes)
    if record_sep is None:
        raw_rows = _split_records_by_lines(text, field_sep, n)
    else:
        raw_rows = []
        for chunk in text.split(record_sep):
            chunk = chunk.lstrip("\r\n")
            if not chunk.strip():
                continue
            parts = chunk.split(field_sep, n - 1)
            if len(parts) != n:
                raise ValueError(f"squeue record has {len(parts)} fields, expected {n}: {chunk!r}")
            raw_rows.append(parts)
    rows = []
    for parts in raw_rows:
        values = dict(zip(codes, parts, strict=True))
        try:
            array_task = _none_if_null(values["K"].strip())
            rows.append(
                SqueueRow(
                    job_id=values["i"].strip(),
                    job_id_raw=int(values["A"]),
                    array_job_id=int(values["F"]) if array_task is not None else None,
                    array_task=array_task,
                    state=values["T"].strip().upper(),
                    reason=_none_if_null(values["r"].strip()),
                    nodelist=_none_if_null(values["N"].strip()),
                    elapsed_s=parse_duration_s(values["M"]),
                    user=values["u"].strip(),
                    name=values["j"],
                    comment=_none_if_unset(values["k"]),
                    extra={c: v for c, v in values.items() if c not in _SQUEUE_ATTRS},
                )
            )
        except ValueError as e:
            raise ValueError(f"bad squeue record {field_sep.join(parts)!r}: {e}") from e
    return rows


# --------------------------------------------------------------------------------------------
# sacct
# --------------------------------------------------------------------------------------------

#: sacct ``-o`` fields we ask for. The free-text ones (JobName, Comment) are not last: sacct
#: has no record terminator, and a newline in the last field could not be told from the end
#: of a record, while one in a middle field is (the record still lacks separators).
SACCT_FIELDS: tuple[str, ...] = (
    "JobID",
    "State",
    "ExitCode",
    "NodeList",
    "Start",
    "End",
    "Elapsed",
    "Reason",
    "User",
    "JobName",
    "Comment",
    "JobIDRaw",
)


@dataclass(frozen=True)
class SacctRow:
    """One allocation record of ``sacct -X`` output in our format (:data:`SACCT_FIELDS`).

    Attributes:
        job_id: ``JobID`` as printed (``"123"``, ``"123_4"``, ``"123_[1-3%1]"``, ``"123+0"``).
        job_id_raw: ``JobIDRaw`` (the record's own numeric id, as a string).
        state: normalized state (``"CANCELLED"`` for ``"CANCELLED by 0"``), see
            :func:`normalize_state`.
        state_raw: ``State`` exactly as printed.
        exit_code: exit status of the batch script (``ExitCode`` ``"3:0"`` -> 3) or None.
        exit_signal: the signal that ended it (``"0:9"`` -> 9) or None.
        nodelist: ``NodeList``, None for ``None assigned`` / empty.
        start, end: naive local datetimes, None for ``Unknown`` / ``None``.
        elapsed_s: ``Elapsed`` in seconds.
        reason: ``Reason``, None for ``None``.
        user, name: ``User``, ``JobName``.
        comment: ``Comment``, None when empty (Slurm stores it only with
            ``AccountingStoreFlags=job_comment``).
        extra: further fields by sacct field name.
    """

    job_id: str
    job_id_raw: str
    state: str
    state_raw: str
    exit_code: int | None
    exit_signal: int | None
    nodelist: str | None
    start: _dt.datetime | None
    end: _dt.datetime | None
    elapsed_s: float | None
    reason: str | None
    user: str
    name: str
    comment: str | None
    extra: Mapping[str, str] = field(default_factory=dict, compare=False, hash=False)

    @property
    def alive(self) -> bool:
        """``parse.is_alive`` of :attr:`state`."""
        return is_alive(self.state_raw)

    @property
    def task_ids(self) -> list[int] | None:
        """Array task ids of this record, None for non-arrays or an unparsable id."""
        try:
            jid = parse_job_id(self.job_id)
        except ValueError:
            return None
        return None if jid.task_ids is None else list(jid.task_ids)


def sacct_format(fields: Sequence[str] = SACCT_FIELDS) -> str:
    """The ``sacct -o`` value for ``fields``."""
    return ",".join(fields)


def _parse_time(v: str) -> _dt.datetime | None:
    v = v.strip()
    if v in _NULLS or v == "Unknown":
        return None
    try:
        return _dt.datetime.fromisoformat(v)
    except ValueError:
        return None


def _parse_exit_code(v: str) -> tuple[int | None, int | None]:
    m = re.fullmatch(r"\s*(\d+):(\d+)\s*", v, re.ASCII)
    if m is None:
        return None, None
    return int(m[1]), int(m[2])


#: JobIDRaw: a number, or ``number.step`` for step rows (without ``-X``)
_SACCT_RAW_ID_RE = re.compile(r"\d+(?:\.[A-Za-z0-9_+-]+)?", re.ASCII)


def parse_sacct(
    text: str, fields: Sequence[str] = SACCT_FIELDS, *, field_sep: str = FIELD_SEP
) -> list[SacctRow]:
    """Rows of ``sacct -n -P -X --delimiter=<field_sep> -o <sacct_format(fields)>`` output.

    ``fields`` are sacct field names in output order and must include all of
    :data:`SACCT_FIELDS` (case-insensitively); others go to :attr:`SacctRow.extra`. A record
    with newlines inside a field (a job name) is joined back, except in the last field (sacct
    has no record terminator option, hence JobIDRaw last in :data:`SACCT_FIELDS`); surplus
    separators stay in the last field. Raises :class:`ValueError` for a record with too few
    fields or a JobIDRaw that is not a job id (a misaligned record).
    """
    names = list(fields)
    lower = [f.lower() for f in names]
    missing = [f for f in SACCT_FIELDS if f.lower() not in lower]
    if missing:
        raise ValueError(f"sacct fields lack {missing}")
    rows = []
    for parts in _split_records_by_lines(text, field_sep, len(names)):
        v = {name.lower(): val for name, val in zip(names, parts, strict=True)}
        if not _SACCT_RAW_ID_RE.fullmatch(v["jobidraw"].strip()):
            raise ValueError(f"bad sacct record (JobIDRaw): {field_sep.join(parts)!r}")
        code, sig = _parse_exit_code(v["exitcode"])
        state_raw = v["state"].strip()
        rows.append(
            SacctRow(
                job_id=v["jobid"].strip(),
                job_id_raw=v["jobidraw"].strip(),
                state=normalize_state(state_raw),
                state_raw=state_raw,
                exit_code=code,
                exit_signal=sig,
                nodelist=_none_if_null(v["nodelist"].strip()),
                start=_parse_time(v["start"]),
                end=_parse_time(v["end"]),
                elapsed_s=parse_duration_s(v["elapsed"]),
                reason=_none_if_null(v["reason"].strip()),
                user=v["user"].strip(),
                name=v["jobname"],
                comment=_none_if_unset(v["comment"]),
                extra={
                    name: val
                    for name, val in zip(names, parts, strict=True)
                    if name.lower() not in {f.lower() for f in SACCT_FIELDS}
                },
            )
        )
    return rows
