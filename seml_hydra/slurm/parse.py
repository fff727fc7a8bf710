"""Slurm's command-line output, parsed (pure: no I/O, safe on any machine).

:func:`parse_array_task_spec`, :func:`parse_job_id`, :func:`parse_scontrol_show_job`,
:func:`parse_scontrol_show_config`, :func:`parse_duration_s`, plus the state classification
:data:`ALIVE_STATES` / :data:`TERMINAL_STATES` / :func:`is_alive`. squeue's and sacct's records
are parsed in ``seml_hydra.slurm.records``; ``seml_hydra.slurm.client`` runs the commands whose
output they parse. Malformed input raises :class:`ValueError` rather than being dropped: a
dropped row would look like "the job is gone", which a caller could turn into a wrong KILLED.
Output formats were checked against Slurm 22.05 (``tests/fixtures/slurm`` holds captured
output).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = [
    "ALIVE_STATES",
    "COMPACT_STATE_CODES",
    "TERMINAL_STATES",
    "JobId",
    "is_alive",
    "normalize_state",
    "parse_array_task_spec",
    "parse_duration_s",
    "parse_job_id",
    "parse_scontrol_show_config",
    "parse_scontrol_show_job",
    "parse_task_spec",
    "validated_ids",
]


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


def parse_task_spec(s: str) -> tuple[list[int], int | None] | None:
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
    parsed = parse_task_spec(s)
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
        parsed = parse_task_spec(m[2])
        if parsed is None:
            raise ValueError(f"not a Slurm job id (bad array task spec): {s!r}")
        ids, throttle = parsed
        return JobId(base, base, tuple(ids), throttle)
    if m[3] is not None:
        return JobId(base, None, None, None, het_offset=int(m[3]))
    return JobId(base, None, None, None)


def validated_ids(job_ids: Iterable[str]) -> list[str]:
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
