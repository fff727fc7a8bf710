"""Talking to Slurm: parse its command-line tools' output and run them safely.

Two layers:

* **Pure parsers** (no I/O, safe on any machine): :func:`parse_array_task_spec`,
  :func:`parse_job_id`, :func:`parse_scontrol_show_job`, :func:`parse_scontrol_show_config`,
  :func:`parse_squeue`, :func:`parse_sacct`, :func:`parse_duration_s`, plus the state
  classification :data:`ALIVE_STATES` / :data:`TERMINAL_STATES` / :func:`is_alive`.
  Malformed *rows* raise :class:`ValueError` rather than being dropped: a dropped row would
  look like "the job is gone", which a caller could turn into a wrong KILLED.
* **Commands** (:func:`run_slurm`, :func:`squeue_jobs`, :func:`sacct_jobs`,
  :func:`scontrol_show_job`, :func:`show_config`, :func:`max_array_size`, :func:`scancel`,
  :func:`hold`, :func:`release`, :func:`current_user`). They run Slurm's clients with argument
  lists (never a shell), with a timeout, and only when called (importing this module runs
  nothing). Every failure raises :class:`SlurmError`; a query that failed never returns ``[]``,
  so "no rows" always means Slurm answered "no such jobs".

Output formats were checked against Slurm 22.05 (``tests/fixtures/slurm`` holds captured
output). squeue and sacct are asked for fields separated by ASCII unit separators (``\\x1f``)
and, for squeue, records terminated by ASCII record separators (``\\x1e``): job names and
comments may contain ``|``, spaces and even newlines, which the usual ``|`` format cannot
survive. ``SLURM_BITSTR_LEN=0`` is set so array task lists are never cut to 64 characters
with a ``...`` (the default), and the ``SQUEUE_*``/``SACCT_*``/``SLURM_TIME_FORMAT``
variables of the caller are dropped so that they cannot change the format we parse.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import shlex
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from seml_hydra.core.errors import UserError
from seml_hydra.core.processes import run_captured

__all__ = [
    "ALIVE_STATES",
    "COMPACT_STATE_CODES",
    "DEFAULT_MAX_ARRAY_SIZE",
    "FIELD_SEP",
    "RECORD_SEP",
    "SACCT_FIELDS",
    "SQUEUE_FIELDS",
    "TERMINAL_STATES",
    "JobId",
    "SacctRow",
    "SlurmError",
    "SqueueRow",
    "current_user",
    "hold",
    "is_alive",
    "max_array_size",
    "normalize_state",
    "parse_array_task_spec",
    "parse_duration_s",
    "parse_job_id",
    "parse_sacct",
    "parse_scontrol_show_config",
    "parse_scontrol_show_job",
    "parse_squeue",
    "release",
    "run_slurm",
    "sacct_format",
    "sacct_jobs",
    "scancel",
    "scontrol_show_job",
    "show_config",
    "squeue_format",
    "squeue_jobs",
]

#: field separator asked of squeue (``-o``) and sacct (``--delimiter``): ASCII "unit separator"
FIELD_SEP = "\x1f"
#: record terminator appended to the squeue format: ASCII "record separator"
RECORD_SEP = "\x1e"

#: Slurm's own default for ``MaxArraySize`` (task ids must be below it)
DEFAULT_MAX_ARRAY_SIZE = 1001
#: Slurm's hard upper limit of ``MaxArraySize``; a task spec expanding to more ids is malformed
_MAX_TASK_IDS = 4_000_001

# --------------------------------------------------------------------------------------------
# Job states
# --------------------------------------------------------------------------------------------

#: States after which the job will never run (again) under this id. From ``man squeue``
#: (JOB STATE CODES, Slurm 22.05). PREEMPTED counts as terminal: a job requeued after
#: preemption shows up again as PENDING/REQUEUED in squeue and in sacct's latest record.
#: REVOKED is this cluster's copy of a federated job that started on a sibling cluster; the
#: origin cluster reports the running sibling's state.
TERMINAL_STATES = frozenset(
    {
        "BOOT_FAIL",
        "CANCELLED",
        "COMPLETED",
        "DEADLINE",
        "FAILED",
        "NODE_FAIL",
        "OUT_OF_MEMORY",
        "PREEMPTED",
        "REVOKED",
        "TIMEOUT",
    }
)

#: Every known non-terminal state: the job is queued, running, held, being requeued or
#: finishing (COMPLETING: processes may still run). States not listed in either set are
#: treated as alive too (see :func:`is_alive`).
ALIVE_STATES = frozenset(
    {
        "CONFIGURING",
        "COMPLETING",
        "PENDING",
        "POWER_UP_NODE",
        "REQUEUED",
        "REQUEUE_FED",
        "REQUEUE_HOLD",
        "RESIZING",
        "RESV_DEL_HOLD",
        "RUNNING",
        "SIGNALING",
        "SPECIAL_EXIT",
        "STAGE_OUT",
        "STOPPED",
        "SUSPENDED",
    }
)

_KNOWN_STATES = TERMINAL_STATES | ALIVE_STATES

#: squeue's compact state codes (``%t``) -> extended names (``%T``)
COMPACT_STATE_CODES: Mapping[str, str] = {
    "BF": "BOOT_FAIL",
    "CA": "CANCELLED",
    "CD": "COMPLETED",
    "CF": "CONFIGURING",
    "CG": "COMPLETING",
    "DL": "DEADLINE",
    "F": "FAILED",
    "NF": "NODE_FAIL",
    "OOM": "OUT_OF_MEMORY",
    "PD": "PENDING",
    "PR": "PREEMPTED",
    "R": "RUNNING",
    "RD": "RESV_DEL_HOLD",
    "RF": "REQUEUE_FED",
    "RH": "REQUEUE_HOLD",
    "RQ": "REQUEUED",
    "RS": "RESIZING",
    "RV": "REVOKED",
    "S": "SUSPENDED",
    "SE": "SPECIAL_EXIT",
    "SI": "SIGNALING",
    "SO": "STAGE_OUT",
    "ST": "STOPPED",
    "TO": "TIMEOUT",
}


def normalize_state(state: str) -> str:
    """Canonical upper-case extended state name of a Slurm state string.

    Handles sacct's ``"CANCELLED by 1000"`` (-> ``"CANCELLED"``), sacct's truncation mark
    (``"CANCELLED+"``; a truncated prefix is expanded when exactly one known state starts
    with it), squeue's compact codes (``"PD"`` -> ``"PENDING"``) and surrounding whitespace.
    Unknown states are returned upper-cased, empty input as ``""``. Never raises for a str.
    """
    s = (state or "").strip().upper()
    if not s:
        return ""
    s = s.split()[0]
    truncated = s.endswith("+")
    s = s.rstrip("+")
    if not truncated and s in COMPACT_STATE_CODES:
        return COMPACT_STATE_CODES[s]
    if truncated and s not in _KNOWN_STATES:
        candidates = [k for k in _KNOWN_STATES if k.startswith(s)]
        if len(candidates) == 1:
            return candidates[0]
    return s


def is_alive(state: str) -> bool:
    """Whether a job in ``state`` may still run (or is running): False only for terminal states.

    ``state`` is anything Slurm prints for a job state (see :func:`normalize_state`). Unknown,
    empty or unparsable states count as alive: we never declare a job dead without Slurm
    saying so explicitly.
    """
    return normalize_state(state) not in TERMINAL_STATES


# --------------------------------------------------------------------------------------------
# Durations, ids and array task specs
# --------------------------------------------------------------------------------------------

_DURATION_RE = re.compile(
    r"(?:(?P<d>\d+)-)?(?:(?P<h>\d+):)?(?P<m>\d+):(?P<s>\d+(?:\.\d+)?)", re.ASCII
)
_NO_DURATION = frozenset({"", "INVALID", "UNLIMITED", "NOT_SET", "N/A", "NONE", "UNKNOWN"})


def parse_duration_s(s: str | None) -> float | None:
    """Seconds in a Slurm duration, or None when there is none.

    Accepts what squeue (``%M``, ``%l``) and sacct (``Elapsed``, ``TotalCPU``) print:
    ``"M:SS"``, ``"H:MM:SS"``, ``"D-HH:MM:SS"`` and fractional seconds (``"00:01.234"``).
    ``"INVALID"``, ``"UNLIMITED"``, ``"NOT_SET"``, ``"N/A"``, empty or anything unparsable
    -> None (never raises). A ``D-HH:MM:SS`` form is ``D`` days of 86400 s.
    """
    if s is None:
        return None
    text = s.strip()
    if text.upper() in _NO_DURATION:
        return None
    m = _DURATION_RE.fullmatch(text)
    if m is None:
        return None
    if m["d"] is not None and m["h"] is None:
        return None  # "D-MM:SS" is not a Slurm output form
    days = int(m["d"] or 0)
    hours = int(m["h"] or 0)
    return float(days * 86400 + hours * 3600 + int(m["m"]) * 60) + float(m["s"])


_TASK_PART_RE = re.compile(r"(\d+)(?:-(\d+)(?::(\d+))?)?", re.ASCII)


def _parse_task_spec(s: str) -> tuple[list[int], int | None] | None:
    """(sorted unique task ids, throttle or None) of an array task spec; None if malformed."""
    if not isinstance(s, str):
        return None
    text = s.strip()
    if text.startswith("[") != text.endswith("]"):
        return None
    if text.startswith("["):
        text = text[1:-1]
    throttle: int | None = None
    if "%" in text:
        text, _, t = text.partition("%")
        if not re.fullmatch(r"\d+", t, re.ASCII):
            return None
        throttle = int(t)
    if not text:
        return None
    ids: set[int] = set()
    for part in text.split(","):
        m = _TASK_PART_RE.fullmatch(part)
        if m is None:
            return None
        lo = int(m[1])
        hi = int(m[2]) if m[2] is not None else lo
        step = int(m[3]) if m[3] is not None else 1
        if hi < lo or step < 1:
            return None
        if len(ids) + (hi - lo) // step + 1 > _MAX_TASK_IDS:
            return None
        ids.update(range(lo, hi + 1, step))
    return sorted(ids), throttle


def parse_array_task_spec(s: str) -> list[int] | None:
    """Task ids of the task part of an array job id, or None when it is malformed.

    ``s`` is what follows ``<array_id>_`` in a job id, or squeue's ``%K``: ``"4"``,
    ``"[4%1]"``, ``"[1-3,7]"``, ``"[0-9%2]"``, ``"[1-9:2]"`` (step 2: 1,3,5,7,9), with or
    without the brackets. Returns the ids sorted ascending without duplicates; the throttle
    (``%N``) is dropped (see :func:`parse_job_id` to keep it). Malformed specs -- unbalanced
    brackets, Slurm's truncation mark ``...``, reversed ranges, step 0, empty, or more ids
    than Slurm's largest possible MaxArraySize (4000001) -- give None; never raises.
    """
    parsed = _parse_task_spec(s)
    return None if parsed is None else parsed[0]


@dataclass(frozen=True)
class JobId:
    """A parsed Slurm job id as squeue/sacct/sbatch print it.

    Attributes:
        job_id: the leading number: the job id, the array's (base) job id, or the het job's
            leader id.
        array_id: the array's job id for ``"<array>_<tasks>"`` ids, else None.
        task_ids: the array task ids (sorted, unique) for array ids, else None.
        throttle: the ``%N`` limit of simultaneously running tasks, if printed, else None.
        het_offset: the component offset of a heterogeneous job (``"123+1"`` -> 1), else None.
    """

    job_id: int
    array_id: int | None
    task_ids: tuple[int, ...] | None
    throttle: int | None
    het_offset: int | None = None

    @property
    def is_array(self) -> bool:
        return self.array_id is not None


_JOB_ID_RE = re.compile(r"(\d+)(?:_(.+)|\+(\d+))?", re.ASCII | re.DOTALL)


def parse_job_id(s: str) -> JobId:
    """Parse a job id: ``"123"``, ``"123_4"``, ``"123_[4%1]"``, ``"123_[1-3,7]"``, ``"123+0"``.

    Surrounding whitespace is ignored. Job steps (``"123.batch"``), truncated ids
    (``"123_[0,4,...``) and anything else raise :class:`ValueError` naming the text.
    """
    if not isinstance(s, str):
        raise ValueError(f"not a Slurm job id: {s!r}")
    m = _JOB_ID_RE.fullmatch(s.strip())
    if m is None:
        raise ValueError(f"not a Slurm job id: {s!r}")
    base = int(m[1])
    if m[2] is not None:
        parsed = _parse_task_spec(m[2])
        if parsed is None:
            raise ValueError(f"not a Slurm job id (bad array task spec): {s!r}")
        ids, throttle = parsed
        return JobId(base, base, tuple(ids), throttle)
    if m[3] is not None:
        return JobId(base, None, None, None, het_offset=int(m[3]))
    return JobId(base, None, None, None)


def _validated_ids(job_ids: Iterable[str]) -> list[str]:
    """Job ids as strings, each checked by :func:`parse_job_id` (so none can pose as an option)."""
    if isinstance(job_ids, str):
        raise TypeError("job_ids must be a sequence of ids, not one string")
    out = []
    for j in job_ids:
        text = str(j).strip()
        parse_job_id(text)
        out.append(text)
    return out


# --------------------------------------------------------------------------------------------
# scontrol show job / show config
# --------------------------------------------------------------------------------------------

#: a ``Key=`` that starts a field: at the start or after whitespace
_KEY_RE = re.compile(r"(?<!\S)([A-Za-z][A-Za-z0-9_:/]*)=")

#: fields whose values are free text that users choose (names, comments, paths, reasons)
_FREE_TEXT_KEYS = frozenset(
    {
        "AdminComment",
        "Command",
        "Comment",
        "JobName",
        "Reason",
        "StdErr",
        "StdIn",
        "StdOut",
        "SystemComment",
        "WorkDir",
    }
)

#: keys Slurm prints for jobs (22.05 and around). Inside a free-text value only these end
#: the value, so that ``Comment=lr=0.1 batch=32`` stays one value.
_KNOWN_JOB_KEYS = frozenset(
    """
    Account AccrueTime AdminComment AllocNode:Sid AllocTRES ArrayJobId ArrayTaskId
    ArrayTaskThrottle BatchFeatures BatchFlag BatchHost BurstBuffer BurstBufferState CPU_IDs
    CPUs/Task ClusterFeatures Command Comment Container ContainerID Contiguous CoreSpec
    CpuFreqGov CpuFreqMax CpuFreqMin CpusPerTres Deadline DelayBoot Dependency
    DerivedExitCode EligibleTime EndTime ExcNodeList ExitCode Extra Features
    FedActiveSiblings FedOrigin FedViableSiblings GRES GroupId HetJobId HetJobIdSet
    HetJobOffset JOB_GRES JobId JobName JobState KillOInInvalidDependent LastSchedEval
    Licenses MCS_label MailType MailUser Mem MemPerTres MinCPUsNode MinMemoryCPU
    MinMemoryNode MinTmpDiskNode Network Nice NodeList Nodes NtasksPerN:B:S:C NtasksPerTRES
    NumCPUs NumNodes NumTasks OverSubscribe Partition Power PreemptEligibleTime PreemptTime
    Prefer Priority QOS Reason Reboot ReqB:S:C:T ReqNodeList ReqTRES Requeue Reservation
    ResizeTime Restarts RunTime SELinuxContext SchedNodeList Scheduler SecsPreSuspend
    SiblingsActive SiblingsViable Socks/Node StartTime StdErr StdIn StdOut SubmitTime
    SuspendTime SystemComment TRES ThreadSpec TimeLimit TimeMin TresBind TresFreq TresPerJob
    TresPerNode TresPerSocket TresPerTask UserId WCKey WorkDir
    """.split()
)


def parse_scontrol_show_job(text: str) -> list[dict[str, str]]:
    """Records of ``scontrol show job`` output, multi-line or one-line (``-o``).

    Returns one ``{Key: Value}`` dict per job record, in output order; values are strings
    exactly as printed minus trailing whitespace (``"(null)"``, ``""`` for ``NodeList=``,
    ``"cpu=1,mem=8G,node=1,billing=1"`` for ``TRES=``). Values may contain spaces, ``=`` and
    newlines: a field ends only where whitespace is followed by ``Key=`` (``Key`` an
    identifier like ``AllocNode:Sid`` or ``CPUs/Task``); inside free-text fields (JobName,
    Comment, Command, WorkDir, Std*, Reason) only a key Slurm is known to print ends it.
    A new record starts whenever the first key of the output (``JobId``) comes again. A key
    repeated inside one record keeps its first value. Text without any ``Key=`` (``"No jobs
    in the system"``) gives ``[]``. Never raises for a str.
    """
    bounds: list[re.Match[str]] = []
    current: str | None = None
    for m in _KEY_RE.finditer(text):
        key = m.group(1)
        if current in _FREE_TEXT_KEYS and key not in _KNOWN_JOB_KEYS:
            continue
        bounds.append(m)
        current = key
    records: list[dict[str, str]] = []
    if not bounds:
        return records
    first_key = bounds[0].group(1)
    for i, m in enumerate(bounds):
        key = m.group(1)
        end = bounds[i + 1].start() if i + 1 < len(bounds) else len(text)
        value = text[m.end() : end].rstrip()
        if key == first_key or not records:
            records.append({})
        records[-1].setdefault(key, value)
    return records


_CONFIG_LINE_RE = re.compile(r"([^\s=]+)\s*=\s*(.*?)\s*")


def parse_scontrol_show_config(text: str) -> dict[str, str]:
    """``{Key: Value}`` of ``scontrol show config`` output (``Key   = Value`` lines).

    Values are stripped strings as printed (``"1001"``, ``"(null)"``, ``"0 sec"``,
    ``"bf_interval=30,..."``). Lines without ``=`` (the "Configuration data as of" header,
    section titles, "Slurmctld(primary) at host is UP") are skipped; a key printed twice
    (plugin sections) keeps its first value. Never raises for a str.
    """
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _CONFIG_LINE_RE.fullmatch(line)
        if m is not None:
            out.setdefault(m[1], m[2])
    return out


# --------------------------------------------------------------------------------------------
# squeue
# --------------------------------------------------------------------------------------------

#: squeue ``-o`` codes we ask for (``man squeue``): %i job id as printed (``123``,
#: ``123_4``, ``123_[1-3%1]``, ``123+0``), %A this record's own job id, %F array base job id
#: (= job id for non-arrays), %K array task spec (``N/A`` for non-arrays), %T extended state,
#: %r reason, %N node list, %M elapsed time, %u user, %j name, %k comment.
SQUEUE_FIELDS: tuple[str, ...] = ("i", "A", "F", "K", "T", "r", "N", "M", "u", "j", "k")

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
        parsed = _parse_task_spec(self.array_task)
        return None if parsed is None else parsed[1]

    @property
    def alive(self) -> bool:
        """:func:`is_alive` of :attr:`state`."""
        return is_alive(self.state)


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
        """:func:`is_alive` of :attr:`state`."""
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


# --------------------------------------------------------------------------------------------
# Running Slurm commands
# --------------------------------------------------------------------------------------------


class SlurmError(UserError):
    """A Slurm command failed, timed out, or is not installed.

    Attributes: ``cmd`` (the argument list), ``returncode`` (None if it did not run to the
    end), ``stderr`` (what Slurm said). The message contains the command and stderr.
    """

    def __init__(
        self,
        cmd: Sequence[str],
        message: str,
        *,
        returncode: int | None = None,
        stderr: str = "",
    ) -> None:
        self.cmd = list(cmd)
        self.returncode = returncode
        self.stderr = stderr
        detail = f": {stderr.strip()}" if stderr.strip() else ""
        super().__init__(f"`{shlex.join(self.cmd)}` {message}{detail}")


#: environment variables that would change what squeue/sacct print
_DROPPED_ENV_PREFIXES = ("SQUEUE_", "SACCT_")
_DROPPED_ENV = frozenset({"SLURM_TIME_FORMAT"})

#: Slurm sometimes reports a failed query on stderr with exit status 0
#: (``squeue -u nosuchuser`` -> "squeue: error: Invalid user: nosuchuser", exit 0)
_STDERR_ERROR_RE = re.compile(r"\berror\b", re.IGNORECASE)


def _slurm_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_DROPPED_ENV_PREFIXES) and k not in _DROPPED_ENV
    }
    env["SLURM_BITSTR_LEN"] = "0"
    return env


def run_slurm(args: Sequence[str], timeout_s: float = 30) -> str:
    """Run a Slurm client (``args[0]``) without a shell and return its stdout.

    ``args`` is an argument list (a plain string is refused: no shell quoting games). The
    environment is the caller's with ``SLURM_BITSTR_LEN=0`` and without ``SQUEUE_*``,
    ``SACCT_*`` and ``SLURM_TIME_FORMAT``. stdin is ``/dev/null``; output is decoded as
    UTF-8 with undecodable bytes replaced.

    Raises:
        SlurmError: the binary is missing ("Slurm command X not found: is Slurm installed /
            are you on a login node?"), it cannot be started, it ran longer than
            ``timeout_s`` seconds (it is killed), it exited non-zero, or it exited 0 but
            wrote an ``error`` to stderr (Slurm does that for some failed queries).
    """
    if isinstance(args, str) or not args:
        raise TypeError("run_slurm needs a non-empty argument list, not a string")
    cmd = [str(a) for a in args]
    try:
        proc = run_captured(cmd, timeout_s, env=_slurm_env())
    except FileNotFoundError as e:
        raise SlurmError(
            cmd,
            f"failed: Slurm command {cmd[0]!r} not found: is Slurm installed / "
            "are you on a login node?",
        ) from e
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        raise SlurmError(cmd, f"timed out after {timeout_s} s", stderr=err or "") from e
    except OSError as e:
        raise SlurmError(cmd, f"could not be started: {e}") from e
    if proc.returncode != 0:
        raise SlurmError(
            cmd,
            f"failed with exit status {proc.returncode}",
            returncode=proc.returncode,
            stderr=proc.stderr,
        )
    if _STDERR_ERROR_RE.search(proc.stderr):
        raise SlurmError(cmd, "reported an error (exit status 0)", returncode=0, stderr=proc.stderr)
    return proc.stdout


def _is_invalid_job_id(err: SlurmError) -> bool:
    return err.returncode not in (None, 0) and "Invalid job id specified" in err.stderr


def current_user() -> str:
    """Name of the user Slurm sees us as (the real uid's passwd entry; ``$USER`` as fallback).

    Raises:
        SlurmError: neither the passwd database nor the environment names the user.
    """
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError, OSError):
        pass
    import getpass

    try:
        name = getpass.getuser()
    except Exception as e:  # getpass raises OSError (3.13) or KeyError (older) here
        raise SlurmError(["whoami"], f"failed: cannot determine the current user ({e})") from e
    if not name:
        raise SlurmError(["whoami"], "failed: cannot determine the current user")
    return name


def squeue_jobs(
    user: str | None = None,
    job_ids: Sequence[str] | None = None,
    all_users: bool = False,
    *,
    states: Sequence[str] | None = None,
    expand_arrays: bool = False,
    timeout_s: float = 30,
) -> list[SqueueRow]:
    """Jobs slurmctld knows, one :class:`SqueueRow` per squeue record.

    Args:
        user: only this user's jobs; None means :func:`current_user` unless ``all_users``.
        job_ids: only these jobs (``"123"``, ``"123_4"``, ``"123+1"``...; each is checked by
            :func:`parse_job_id`, ValueError otherwise). An empty sequence returns ``[]``
            without asking Slurm. Unknown ids are simply absent from the result.
        all_users: every user's jobs (``user`` must then be None).
        states: squeue ``--states`` (e.g. ``["all"]``, ``["PENDING", "RUNNING"]``); None is
            squeue's default (pending, running, suspended, completing... -- not finished).
        expand_arrays: pass ``--array`` so that every task, pending ones too, is its own row.
            By default a started task is one row (``123_4``) and the still-pending tasks of
            an array are one row with their range (``123_[5-9%2]``); use
            :attr:`SqueueRow.task_ids` to expand it.

    Always passes ``--all`` (jobs in hidden partitions too). A job absent from the result is
    not known to slurmctld in the queried states -- purged after MinJobAge, or never
    existed; ask :func:`sacct_jobs` before deciding what happened to it.

    Raises:
        SlurmError: squeue failed, timed out, is missing, or printed an error (e.g. unknown
            user). Never returns ``[]`` on failure. Slurm's "Invalid job id specified" for
            ``job_ids`` is an answer (no such job), not a failure: it gives ``[]``.
        ValueError: a malformed job id or squeue record, or both ``user`` and ``all_users``.
    """
    if user is not None and all_users:
        raise ValueError("pass either user or all_users=True, not both")
    args = ["squeue", "--noheader", "--all", f"--format={squeue_format()}"]
    if job_ids is not None:
        ids = _validated_ids(job_ids)
        if not ids:
            return []
        args.append(f"--jobs={','.join(ids)}")
    if not all_users:
        args.append(f"--user={user if user is not None else current_user()}")
    if states is not None:
        if isinstance(states, str):
            states = [states]
        if not states or any(not re.fullmatch(r"[A-Za-z_]+", s) for s in states):
            raise ValueError(f"bad squeue states: {states!r}")
        args.append(f"--states={','.join(states)}")
    if expand_arrays:
        args.append("--array")
    try:
        out = run_slurm(args, timeout_s=timeout_s)
    except SlurmError as e:
        if job_ids is not None and _is_invalid_job_id(e):
            return []
        raise
    return parse_squeue(out)


def sacct_jobs(job_ids: Sequence[str], *, timeout_s: float = 60) -> list[SacctRow]:
    """Accounting records (``sacct -X``: allocations, no steps) of ``job_ids``.

    Ids are checked by :func:`parse_job_id` (ValueError otherwise); an empty sequence gives
    ``[]`` without asking Slurm. An array id gives one row per started task and one for the
    still-pending remainder (``123_[5-9]``); unknown ids give no row. Pending jobs without an
    eligible time (held) are listed only because ids are given. sacct reflects slurmctld
    with a short delay (slurmdbd).

    Raises:
        SlurmError: sacct failed (accounting disabled, slurmdbd down...), timed out or is
            missing.
    """
    ids = _validated_ids(job_ids)
    if not ids:
        return []
    args = [
        "sacct",
        "--noheader",
        "--parsable2",
        "--allocations",
        f"--delimiter={FIELD_SEP}",
        f"--format={sacct_format()}",
        f"--jobs={','.join(ids)}",
    ]
    return parse_sacct(run_slurm(args, timeout_s=timeout_s))


def scontrol_show_job(job_id: str, *, timeout_s: float = 30) -> list[dict[str, str]]:
    """``scontrol show job <job_id>`` parsed by :func:`parse_scontrol_show_job`.

    An array id gives one record per started task plus one for the pending remainder; a
    het job id one per component. A job slurmctld does not know (purged or never existed:
    "Invalid job id specified") gives ``[]``.

    Raises:
        ValueError: ``job_id`` is not a job id (see :func:`parse_job_id`).
        SlurmError: any other failure.
    """
    (jid,) = _validated_ids([job_id])
    try:
        out = run_slurm(["scontrol", "show", "job", jid], timeout_s=timeout_s)
    except SlurmError as e:
        if _is_invalid_job_id(e):
            return []
        raise
    return parse_scontrol_show_job(out)


def show_config(*, timeout_s: float = 30) -> dict[str, str]:
    """``scontrol show config`` parsed by :func:`parse_scontrol_show_config`.

    Raises:
        SlurmError: scontrol failed (e.g. slurmctld unreachable), timed out or is missing.
    """
    return parse_scontrol_show_config(run_slurm(["scontrol", "show", "config"], timeout_s))


#: this process's answer of :func:`cluster_name` (the cluster does not change under a process)
_cluster_name: str | None = None


def cluster_name(*, timeout_s: float = 30) -> str:
    """This cluster's ``ClusterName`` (``scontrol show config``), asked once per process.

    It is what Slurm exports to jobs as ``SLURM_CLUSTER_NAME``; submissions record it in
    ``slurm[0].cluster`` so that another cluster's ``status`` can tell the experiment is not
    its own (job ids are per cluster).

    Raises:
        SlurmError: scontrol failed, or its config names no cluster. A failure is not cached.
    """
    global _cluster_name
    if _cluster_name is None:
        name = (show_config(timeout_s=timeout_s).get("ClusterName") or "").strip()
        if not name:
            raise SlurmError(["scontrol", "show", "config"], "printed no ClusterName")
        _cluster_name = name
    return _cluster_name


def max_array_size(*, timeout_s: float = 30) -> int:
    """The cluster's ``MaxArraySize``: array task ids must be ``< max_array_size()``.

    Slurm's default (:data:`DEFAULT_MAX_ARRAY_SIZE`, 1001) when the config does not print it.

    Raises:
        SlurmError: scontrol failed, or printed a MaxArraySize that is not an integer.
    """
    value = show_config(timeout_s=timeout_s).get("MaxArraySize")
    if value is None:
        return DEFAULT_MAX_ARRAY_SIZE
    try:
        return int(value)
    except ValueError as e:
        raise SlurmError(
            ["scontrol", "show", "config"], f"printed a bad MaxArraySize {value!r}"
        ) from e


def _act(args: list[str], job_ids: Sequence[str], timeout_s: float) -> None:
    ids = _validated_ids(job_ids)
    if not ids:
        return
    run_slurm([*args, *ids] if args[0] == "scancel" else [*args, ",".join(ids)], timeout_s)


def scancel(job_ids: Sequence[str], *, timeout_s: float = 30) -> None:
    """Cancel jobs (``scancel id...``); an empty sequence does nothing.

    Slurm 22.05 accepts ids of jobs that already ended or are unknown silently.

    Raises:
        ValueError: a malformed id.
        SlurmError: scancel failed, with Slurm's message.
    """
    _act(["scancel"], job_ids, timeout_s)


def hold(job_ids: Sequence[str], *, timeout_s: float = 30) -> None:
    """Hold pending jobs (``scontrol hold id,id...``); an empty sequence does nothing.

    Raises:
        ValueError: a malformed id.
        SlurmError: with Slurm's message, e.g. "Invalid job id specified" or "Job has already
            finished".
    """
    _act(["scontrol", "hold"], job_ids, timeout_s)


def release(job_ids: Sequence[str], *, timeout_s: float = 30) -> None:
    """Release held jobs (``scontrol release id,id...``); an empty sequence does nothing.

    Raises:
        ValueError: a malformed id.
        SlurmError: with Slurm's message, e.g. "Invalid job id specified" or "Job has already
            finished".
    """
    _act(["scontrol", "release"], job_ids, timeout_s)
