"""Right-sizing: what a launch's resource groups asked for against what their experiments used,
and a suggestion with headroom per group (``seml <col> usage``; one line after the launcher's
wait). Slurm's ``seff`` does this for one job; no sweep tool compares a whole sweep's requests
with its use. Pure but for :func:`usage_report`, which reads the documents and ``sacct``.

A *resource group* is one batch's experiments that share their sbatch resource options (the
array jobs one resource set made: ``launch.sbatch.resource_key``). Requests come from Slurm's
accounting when it has them (``slurm.usage``: what was allocated), else from the stored sbatch
options. Use comes from ``sacct`` (Elapsed, TotalCPU -> CPU efficiency, MaxRSS) and from the
experiment's ``stats`` (``job.stats``: max RSS, peak GPU memory, wall and CPU time), the larger
peak of the two. All values are per job (one array task: all its ranks): memory in MiB, time
in minutes, CPU efficiency in [0, 1].
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from seml_hydra.slurm.usage import TaskUsage, parse_memory_mb

__all__ = [
    "GroupUsage",
    "MEM_HEADROOM",
    "TIME_HEADROOM",
    "ExperimentUsage",
    "group_usage",
    "percent",
    "requested_from_options",
    "underused_line",
    "usage_report",
]

#: headroom added to the largest peak memory / longest run / busiest CPU share
MEM_HEADROOM = 0.25
TIME_HEADROOM = 0.5
CPU_HEADROOM = 0.25
#: options that name a job, not its resources (left out of the group key)
_NOT_RESOURCES = frozenset({"comment", "job-name", "output", "error", "begin", "hold", "array"})
#: the projection :func:`usage_report` reads
PROJECTION = {"_id": 1, "batch_id": 1, "status": 1, "slurm": 1, "stats": 1, "execution": 1}


def _number(value: Any) -> float | None:
    """A finite, plausible number (below 1e12: no memory, time or count is larger) or None."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and abs(number) < 1e12 else None


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def job_of(doc: Mapping[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """``(Slurm job id "<array>_<task>" or None, sbatch options)`` of a document's last run,
    read defensively (a forged or older document: ``slurm`` a list of mappings, or one mapping
    as older SEML wrote it; ``task_id`` in ``slurm[-1]`` or, as SEML 0.5 keeps it, in
    ``execution``). A run of ``seml_local`` or a worker (cluster ``local``: its "array id" is a
    process id) gives None. Pure."""
    slurm = doc.get("slurm")
    entries = [slurm] if isinstance(slurm, Mapping) else slurm if isinstance(slurm, list) else []
    last = _mapping(entries[-1]) if entries else {}
    execution = _mapping(doc.get("execution"))
    options = dict(_mapping(last.get("sbatch_options")))
    if "local" in (last.get("cluster"), execution.get("cluster")):
        return None, options
    array = last.get("array_id", execution.get("array_id"))
    task = last.get("task_id", execution.get("task_id"))
    if not isinstance(array, (int, str)) or isinstance(array, bool) or not str(array).isdigit():
        return None, options
    if isinstance(task, (int, str)) and not isinstance(task, bool) and str(task).isdigit():
        return f"{array}_{task}", options
    return str(array), options


def _minutes(value: Any) -> float | None:
    """sbatch ``--time`` (minutes as a number, or ``[D-]H:MM:SS`` / ``M:SS``) in minutes."""
    number = _number(value)
    if number is not None:
        return number
    from seml_hydra.slurm.parse import parse_duration_s

    seconds = parse_duration_s(str(value)) if value is not None else None
    return None if seconds is None else seconds / 60


def requested_from_options(options: Mapping[str, Any]) -> dict[str, float | None]:
    """``{"cpus", "mem_mb", "time_min", "gpus"}`` of one job from its stored sbatch options
    (``slurm[i].sbatch_options``: ``cpus-per-task``, ``ntasks``, ``nodes``, ``mem``,
    ``mem-per-cpu``, ``time``, ``gpus-per-node``, ``gpus-per-task``, ``gres``); an option not
    set gives Slurm's default where it has one (1 CPU per task) or None. Pure."""
    nodes = _number(options.get("nodes")) or 1
    ntasks = _number(options.get("ntasks")) or nodes * (
        _number(options.get("ntasks-per-node")) or 1
    )
    cpus = ntasks * (_number(options.get("cpus-per-task")) or 1)
    mem = parse_memory_mb(str(options["mem"]), default_unit="M") if "mem" in options else None
    if mem is not None:
        mem *= nodes
    elif "mem-per-cpu" in options:
        per_cpu = parse_memory_mb(str(options["mem-per-cpu"]), default_unit="M")
        mem = None if per_cpu is None else per_cpu * cpus
    gpus = None
    per_node, per_task = (
        _number(options.get("gpus-per-node")),
        _number(options.get("gpus-per-task")),
    )
    if per_node is not None:
        gpus = per_node * nodes
    elif per_task is not None:
        gpus = per_task * ntasks
    elif str(options.get("gres", "")).startswith("gpu:"):
        gpus = (_number(str(options["gres"]).rpartition(":")[2]) or 0) * nodes
    return {"cpus": cpus, "mem_mb": mem, "time_min": _minutes(options.get("time")), "gpus": gpus}


@dataclass(frozen=True)
class ExperimentUsage:
    """One experiment's last run: its job (``array_id``, ``task_id``), status, what its job
    asked for (``requested``: the keys of :func:`requested_from_options`) and what it used
    (``max_rss_mb``, ``elapsed_min``, ``cpu_efficiency``, ``gpu_mem_mb``; None: unknown), the
    Slurm state (``slurm_state``: ``TIMEOUT``, ``OUT_OF_MEMORY``... or None without sacct)."""

    exp_id: Any
    status: str
    job_id: str | None
    requested: dict[str, float | None]
    max_rss_mb: float | None = None
    elapsed_min: float | None = None
    cpu_efficiency: float | None = None
    gpu_mem_mb: float | None = None
    slurm_state: str | None = None
    from_sacct: bool = False


def experiment_usage(
    doc: Mapping[str, Any],
    sacct: Mapping[str, TaskUsage],
    job: tuple[str | None, dict[str, Any]] | None = None,
) -> ExperimentUsage:
    """:class:`ExperimentUsage` of a document (its last ``slurm`` entry and ``stats``) and the
    accounting of its job (``sacct``: :func:`slurm.usage.parse_usage` by job id); ``job``: its :func:`job_of` when the caller has it. Pure."""
    job_id, options = job if job is not None else job_of(doc)
    requested = requested_from_options(options)
    acct = sacct.get(job_id or "")
    stats = _mapping(doc.get("stats"))
    rss = _number(stats.get("max_rss_mb"))
    real = _number(stats.get("real_time"))
    cpu_s = sum(
        _number(_mapping(stats.get(part)).get(key)) or 0.0
        for part in ("self", "children")
        for key in ("user_time", "system_time")
    )
    gpu = _number(_mapping(stats.get("pytorch")).get("gpu_max_memory_bytes"))
    elapsed = None if real is None else real / 60
    efficiency = None
    if real and requested["cpus"]:
        efficiency = min(1.0, cpu_s / (real * requested["cpus"]))
    state = None
    if acct is not None:
        for key, value in (
            ("cpus", acct.req_cpus),
            ("mem_mb", acct.req_mem_mb),
            ("time_min", acct.time_limit_min),
            ("gpus", acct.gpus),
        ):
            if value is not None:
                requested[key] = float(value)
        if acct.max_rss_mb is not None:
            rss = max(rss or 0.0, acct.max_rss_mb)
        if acct.elapsed_s is not None:
            elapsed = acct.elapsed_s / 60
        efficiency = acct.cpu_efficiency if acct.cpu_efficiency is not None else efficiency
        state = acct.state or None
    trace = doc.get("fail_trace")
    text = "".join(map(str, trace)) if isinstance(trace, list) else str(trace or "")
    if state != "TIMEOUT" and (
        "signalled a timeout" in text or (_number(doc.get("requeues")) or 0) > 0
    ):
        state = "TIMEOUT"  # our signal ends the job before Slurm's limit: sacct says FAILED
    return ExperimentUsage(
        exp_id=doc["_id"],
        status=str(doc.get("status")),
        job_id=job_id,
        requested=requested,
        max_rss_mb=rss,
        elapsed_min=elapsed,
        cpu_efficiency=efficiency,
        gpu_mem_mb=None if gpu is None else gpu / 1024**2,
        slurm_state=state,
        from_sacct=acct is not None,
    )


@dataclass
class GroupUsage:
    """One resource group: ``batch_id``, its ``arrays``, its experiments, and (after
    :meth:`summarize`) ``requested``, ``used`` and ``suggested`` (the JSON keys of ``seml
    usage``), the suggestions as sentences (``advice``) and what could not be read
    (``missing``)."""

    batch_id: int
    options: dict[str, Any]
    arrays: list[str] = field(default_factory=list)
    experiments: list[ExperimentUsage] = field(default_factory=list)
    requested: dict[str, float | None] = field(default_factory=dict)
    used: dict[str, float | None] = field(default_factory=dict)
    suggested: dict[str, float | None] = field(default_factory=dict)
    advice: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)

    def summarize(self) -> GroupUsage:
        """Fill ``requested`` (the largest request of its experiments' jobs), ``used`` (the
        largest peak memory, longest run and GPU memory, the mean CPU efficiency of the runs),
        ``suggested`` and ``advice`` (:func:`_suggest`), ``missing``. Returns ``self``."""
        ran = [e for e in self.experiments if e.elapsed_min is not None]
        keys = ("cpus", "mem_mb", "time_min", "gpus")
        self.requested = {k: _max(e.requested.get(k) for e in self.experiments) for k in keys}
        effs = [e.cpu_efficiency for e in ran if e.cpu_efficiency is not None]
        self.used = {
            "max_rss_mb": _max(e.max_rss_mb for e in ran),
            "elapsed_min": _max(e.elapsed_min for e in ran),
            "cpu_efficiency": sum(effs) / len(effs) if effs else None,
            "gpu_mem_mb": _max(e.gpu_mem_mb for e in ran),
        }
        if not ran:
            self.missing.append("no experiment of this group has run yet")
        elif not any(e.from_sacct for e in ran):
            self.missing.append(
                "no Slurm accounting records (sacct): requests from the stored sbatch "
                "options, use from the experiments' stats"
            )
        elif self.used["max_rss_mb"] is None:
            self.missing.append("no peak memory (sacct MaxRSS empty and no stats)")
        self.suggested, self.advice = _suggest(self.requested, self.used, ran, self.options)
        return self

    def as_json(self) -> dict[str, Any]:
        """The group as ``seml usage --format json`` prints it: ``arrays`` as the documents
        store array ids (integers; a non-numeric id as its text), the counts of ``requested``
        and ``suggested`` (``cpus``, ``gpus``) as integers, memory (MiB) and times (minutes)
        as numbers, CPU efficiency in [0, 1]; null: unknown (``suggested``: keep)."""
        return {
            "batch_id": self.batch_id,
            "arrays": [int(a) if a.isdigit() else a for a in self.arrays],
            "experiments": len(self.experiments),
            "ran": sum(e.elapsed_min is not None for e in self.experiments),
            "requested": _counts_as_int(self.requested),
            "used": self.used,
            "suggested": _counts_as_int(self.suggested),
            "advice": self.advice,
            "missing": self.missing,
        }


def _counts_as_int(values: Mapping[str, float | None]) -> dict[str, float | None]:
    """``values`` with its whole counts (``cpus``, ``gpus``) as integers (pure)."""
    out = dict(values)
    for key in ("cpus", "gpus"):
        value = out.get(key)
        if value is not None and float(value).is_integer():
            out[key] = int(value)
    return out


def _max(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


#: the sbatch options that ask for memory (``mem_gb``, ``mem_per_cpu``, ``mem_per_gpu``)
MEMORY_OPTIONS = ("mem", "mem-per-cpu", "mem-per-gpu")


def _fmt_mb(mb: float) -> str:
    return f"{mb / 1024:.1f} GiB" if mb >= 1024 else f"{mb:.0f} MiB"


def percent(fraction: float | None) -> str:
    """A CPU efficiency (``fraction`` in [0, 1]) as a whole percentage, ``"-"`` for None
    (pure): the one rounding of the suggestions, the launcher's line and the ``usage`` table
    (``0.205`` -> ``"20%"``, as ``format(x, ".0%")`` rounds)."""
    return "-" if fraction is None else f"{fraction:.0%}"


def _memory_gb(rss_mb: float, per_node: float) -> int:
    """The ``mem_gb`` suggested for a peak of ``rss_mb`` per task, ``per_node`` tasks on a
    node: + :data:`MEM_HEADROOM`, in whole GiB, at least 1 (pure)."""
    return max(1, math.ceil(rss_mb * per_node * (1 + MEM_HEADROOM) / 1024))


def _tasks_per_node(options: Mapping[str, Any]) -> float:
    """The tasks a job of ``options`` runs on each node (``ntasks-per-node``, default 1)."""
    return _number(options.get("ntasks-per-node")) or 1.0


def _fmt_min(minutes: float) -> str:
    return f"{minutes:.1f} min" if minutes < 10 else f"{minutes:.0f} min"


def _suggest(
    requested: Mapping[str, float | None],
    used: Mapping[str, float | None],
    ran: Sequence[ExperimentUsage],
    options: Mapping[str, Any],
) -> tuple[dict[str, float | None], list[str]]:
    """Suggested requests (same keys as ``requested``; None: keep) and their sentences, in the
    launcher's fields (``mem_gb``, ``timeout_min``, ``cpus_per_task``, GPUs). Rules: memory =
    largest peak + 25 % in whole GiB (x2 when a job ran out of memory); time = longest run +
    50 % in 5-minute steps (x2 when a job hit its limit); CPUs per task = requested x mean
    efficiency + 25 %, at least 1; GPUs 0 when runs that imported torch used no GPU memory.
    Only a change is suggested."""
    out: dict[str, float | None] = {"cpus": None, "mem_mb": None, "time_min": None, "gpus": None}
    advice: list[str] = []
    states = {e.slurm_state for e in ran}
    mem, rss = requested.get("mem_mb"), used.get("max_rss_mb")
    nodes = _number(options.get("nodes")) or 1.0
    per_node = _tasks_per_node(options)
    # what the user asked for; without a memory option Slurm gave its default (sacct's ReqMem)
    asked = any(key in options for key in MEMORY_OPTIONS)
    node_mb = (mem or 0.0) / nodes
    mem_was = f"{node_mb / 1024:g}" if asked else f"unset (Slurm gave {_fmt_mb(node_mb)})"
    if mem and "OUT_OF_MEMORY" in states:  # mem_gb is per node; mem_mb (JSON) per job
        doubled = 2 * math.ceil(mem / nodes / 1024)
        out["mem_mb"] = doubled * 1024.0 * nodes
        advice.append(f"mem_gb: {mem_was} -> {doubled}: a job ran out of memory")
    elif mem and rss:  # the peak is one task's (rank 0's, or sacct's largest task): x tasks
        gb = _memory_gb(rss, per_node)
        if gb * 1024 * nodes < mem:
            out["mem_mb"] = gb * 1024.0 * nodes
            tasks = f" x {per_node:g} tasks per node" if per_node > 1 else ""
            advice.append(f"mem_gb: {mem_was} -> {gb}: largest {_fmt_mb(rss)}{tasks} + 25%")
    limit, longest = requested.get("time_min"), used.get("elapsed_min")
    if limit and "TIMEOUT" in states:
        out["time_min"] = 2 * limit
        advice.append(f"timeout_min: {limit:g} -> {2 * limit:g}: a job reached its time limit")
    elif limit and longest is not None:
        minutes = max(5, 5 * math.ceil(longest * (1 + TIME_HEADROOM) / 5))
        if minutes < limit:
            out["time_min"] = float(minutes)
            advice.append(f"timeout_min: {limit:g} -> {minutes}: longest {_fmt_min(longest)} + 50%")
    cpus, eff = requested.get("cpus"), used.get("cpu_efficiency")
    ntasks = max(1.0, (cpus or 1) / (_number(options.get("cpus-per-task")) or 1))
    if cpus and eff is not None:
        per_task = cpus / ntasks
        wanted = max(1, math.ceil(per_task * eff * (1 + CPU_HEADROOM)))
        if wanted < per_task:
            out["cpus"] = wanted * ntasks
            advice.append(f"cpus_per_task: {per_task:g} -> {wanted}: CPU efficiency {percent(eff)}")
    gpus = requested.get("gpus")
    gpu_runs = [e.gpu_mem_mb for e in ran if e.gpu_mem_mb is not None]
    if gpus and gpu_runs and not any(gpu_runs):
        out["gpus"] = 0.0
        advice.append(f"gpus: {gpus:g} -> 0: no GPU memory used (torch saw none)")
    return out, advice


def group_usage(
    docs: Iterable[Mapping[str, Any]], sacct: Mapping[str, TaskUsage]
) -> list[GroupUsage]:
    """The resource groups of ``docs`` (documents with :data:`PROJECTION`), summarized, in
    order of batch and first experiment id. Documents never submitted to Slurm (no
    ``slurm[].array_id``) are left out. Pure."""
    groups: dict[tuple[int, str], GroupUsage] = {}

    def order(doc: Mapping[str, Any]) -> tuple[int, int, str]:
        exp_id = doc.get("_id")
        number = exp_id if isinstance(exp_id, int) and not isinstance(exp_id, bool) else None
        return (_batch(doc), 0 if number is not None else 1, f"{number or 0:020d}{exp_id}")

    for doc in sorted(docs, key=order):
        job = job_of(doc)
        job_id, all_options = job
        if job_id is None:
            continue
        options = {k: v for k, v in all_options.items() if k not in _NOT_RESOURCES}
        key = (_batch(doc), json.dumps(options, sort_keys=True, default=str))
        group = groups.setdefault(key, GroupUsage(batch_id=key[0], options=options))
        array = job_id.split("_")[0]
        if array not in group.arrays:
            group.arrays.append(array)
        group.experiments.append(experiment_usage(doc, sacct, job))
    return [g.summarize() for g in groups.values()]


def _batch(doc: Mapping[str, Any]) -> int:
    batch = _number(doc.get("batch_id"))
    return int(batch) if batch is not None else 0


def advice_lines(groups: Sequence[GroupUsage], *, markdown: bool = False) -> list[str]:
    """The lines ``seml usage`` prints under its table (pure): per group its suggestions (or
    that its requests fit) and its notes, each ``batch <id> [<arrays>]: <text>``. With
    ``markdown`` they follow a blank line as list items, so a Markdown renderer neither joins
    them into one paragraph nor reads them as rows of the table above (GitHub's tables go on
    until a blank line). Empty when there are no groups."""
    lines = []
    for g in groups:
        where = f"batch {g.batch_id} [{','.join(g.arrays)}]"
        for line in g.advice or ["requests fit the use (no smaller request suggested)"]:
            lines.append(f"{where}: {line}")
        lines.extend(f"{where}: note: {line}" for line in g.missing)
    if markdown and lines:
        return ["", *(f"- {line}" for line in lines)]
    return lines


def underused_line(groups: Sequence[GroupUsage], collection: str) -> str | None:
    """One line when a group used less than a quarter of a request (memory, time limit,
    CPUs) and a smaller request is suggested for it, naming the first such group, else None;
    for the end of the launcher's wait. A group that asked for no memory (Slurm's default
    applied) has its peak memory named in it too, with the ``mem_gb`` to set. Pure."""
    import shlex

    for group in groups:
        parts = []
        mem, rss = group.requested.get("mem_mb"), group.used.get("max_rss_mb")
        smaller = group.suggested
        if mem and rss is not None and rss < mem / 4 and smaller.get("mem_mb") is not None:
            parts.append(f"memory {_fmt_mb(rss)} of {_fmt_mb(mem)}")
        limit, longest = group.requested.get("time_min"), group.used.get("elapsed_min")
        if longest is not None and limit and longest < limit / 4 and smaller.get("time_min"):
            parts.append(f"time {_fmt_min(longest)} of {limit:g} min")
        eff = group.used.get("cpu_efficiency")
        if eff is not None and eff < 0.25 and smaller.get("cpus") is not None:
            parts.append(f"CPU efficiency {percent(eff)} of {group.requested['cpus']:g} CPUs")
        if not parts:
            continue
        line = (
            f"Batch {group.batch_id} (array {', '.join(group.arrays)}) used less than a "
            f"quarter of its request ({', '.join(parts)})"
        )
        if rss is not None and not any(key in group.options for key in MEMORY_OPTIONS):
            gb = _memory_gb(rss, _tasks_per_node(group.options))
            line += (
                f"; it asked for no memory (Slurm's default applies) and used {_fmt_mb(rss)} "
                f"(set hydra.launcher.mem_gb={gb})"
            )
        return line + f": `seml {shlex.quote(collection)} usage` suggests smaller requests."
    return None


def usage_report(
    collection: Any, query: Mapping[str, Any], *, use_sacct: bool = True
) -> list[GroupUsage]:
    """:func:`group_usage` of the experiments ``query`` selects in ``collection``, with
    Slurm's accounting of their arrays when ``use_sacct`` and sacct answers (otherwise the
    stats alone: each group says so in ``missing``)."""
    from seml_hydra.slurm.client import SlurmError, sacct_usage

    docs = list(collection.find(dict(query), PROJECTION))
    arrays = sorted({job.split("_")[0] for job in (job_of(d)[0] for d in docs) if job})
    sacct: dict[str, TaskUsage] = {}
    if use_sacct and arrays:
        try:
            sacct = sacct_usage(arrays)
        except (SlurmError, ValueError):
            sacct = {}
    return group_usage(docs, sacct)
