"""What Slurm's accounting says a job asked for and used (pure): the ``sacct`` format asked for
(:data:`USAGE_FIELDS`, steps included: a task's peak memory is its steps' ``MaxRSS``) and its
parser (:func:`parse_usage` -> one :class:`TaskUsage` per array task or job), as ``seff`` reads
them (Slurm's contrib ``seff``: CPU efficiency = TotalCPU / (Elapsed x allocated CPUs))."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from seml_hydra.slurm.parse import parse_duration_s

__all__ = ["USAGE_FIELDS", "TaskUsage", "parse_memory_mb", "parse_usage"]

#: sacct fields read, in ``--format`` order (separated by ``|`` with ``--parsable2``)
USAGE_FIELDS = (
    "JobID",
    "State",
    "Elapsed",
    "TotalCPU",
    "MaxRSS",
    "ReqCPUS",
    "ReqMem",
    "Timelimit",
    "AllocTRES",
)

_MEMORY_RE = re.compile(r"(?P<n>\d+(?:\.\d+)?)(?P<unit>[KMGTP]?)(?P<per>[nc]?)", re.ASCII)
_UNIT_MB = {"": 1 / 1024**2, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3}


def parse_memory_mb(text: str | None, *, default_unit: str = "") -> float | None:
    """MiB in a Slurm memory value (``MaxRSS`` ``"61592K"``, ``ReqMem`` ``"2G"``, ``"4000Mc"``
    of Slurm < 21), or None for an empty or unparsable one. ``default_unit``: the unit of a
    bare number (``MaxRSS`` in bytes: ``""``; ``ReqMem`` in MiB: ``"M"``). A per-CPU
    request (``c`` suffix) is returned as it is (per CPU)."""
    if not text:
        return None
    m = _MEMORY_RE.fullmatch(text.strip())
    if m is None:
        return None
    return float(m["n"]) * _UNIT_MB[m["unit"] or default_unit]


def _gpus(tres: str) -> int | None:
    """GPUs in an ``AllocTRES`` value (``"billing=1,cpu=2,gres/gpu=2,mem=2G,node=1"``)."""
    for item in tres.split(","):
        key, _, value = item.partition("=")
        if key == "gres/gpu" and value.isdigit():
            return int(value)
    return None


@dataclass(frozen=True)
class TaskUsage:
    """One job or array task in Slurm's accounting.

    Attributes:
        job_id: ``"123_4"`` (array task) or ``"123"``.
        state: the allocation's ``State`` (``COMPLETED``, ``TIMEOUT``, ``OUT_OF_MEMORY``...).
        elapsed_s: wall time (seconds), None while unknown.
        total_cpu_s: CPU time of all its steps (seconds; ``TotalCPU``).
        max_rss_mb: the largest ``MaxRSS`` of its steps (MiB), None when accounting gathers
            none (``JobAcctGatherType=jobacct_gather/none``).
        req_cpus: allocated CPUs; req_mem_mb: requested memory (MiB, of the job); time_limit_min:
            its time limit (minutes); gpus: allocated GPUs (``gres/gpu`` in ``AllocTRES``).
    """

    job_id: str
    state: str = ""
    elapsed_s: float | None = None
    total_cpu_s: float | None = None
    max_rss_mb: float | None = None
    req_cpus: int | None = None
    req_mem_mb: float | None = None
    time_limit_min: float | None = None
    gpus: int | None = None

    @property
    def cpu_efficiency(self) -> float | None:
        """TotalCPU / (Elapsed x CPUs) in [0, 1] (``seff``'s), None when a part is unknown."""
        if not self.elapsed_s or not self.req_cpus or self.total_cpu_s is None:
            return None
        return min(1.0, self.total_cpu_s / (self.elapsed_s * self.req_cpus))


def parse_usage(text: str) -> dict[str, TaskUsage]:
    """``sacct --noheader --parsable2 --format=<USAGE_FIELDS>`` output (allocations and their
    steps) -> :class:`TaskUsage` per job id (the allocation's row, with the largest
    ``MaxRSS`` of its steps ``<id>.batch``, ``<id>.0``...). Lines with the wrong number of
    fields are skipped (never raises)."""
    jobs: dict[str, TaskUsage] = {}
    peaks: dict[str, float] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != len(USAGE_FIELDS):
            continue
        v: Mapping[str, str] = dict(zip(USAGE_FIELDS, parts, strict=True))
        job_id, _, step = v["JobID"].strip().partition(".")
        rss = parse_memory_mb(v["MaxRSS"])
        if rss is not None:
            peaks[job_id] = max(rss, peaks.get(job_id, 0.0))
        if step:
            continue
        cpus = v["ReqCPUS"].strip()
        mem = v["ReqMem"].strip()
        per_cpu = mem.endswith("c")
        req_mem = parse_memory_mb(mem, default_unit="M")
        if per_cpu and req_mem is not None and cpus.isdigit():
            req_mem *= int(cpus)
        limit = parse_duration_s(v["Timelimit"])
        jobs[job_id] = TaskUsage(
            job_id=job_id,
            state=v["State"].strip().split(" ")[0],
            elapsed_s=parse_duration_s(v["Elapsed"]),
            total_cpu_s=parse_duration_s(v["TotalCPU"]),
            req_cpus=int(cpus) if cpus.isdigit() else None,
            req_mem_mb=req_mem,
            time_limit_min=None if limit is None else limit / 60,
            gpus=_gpus(v["AllocTRES"]),
        )
    return {job_id: replace(usage, max_rss_mb=peaks.get(job_id)) for job_id, usage in jobs.items()}
