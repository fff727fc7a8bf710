"""Resource statistics of one experiment (SEML's ``collect_stats``): wall, user and system time,
maximum resident set size, and the peak GPU memory when the task imported torch, stored in the
experiment's ``stats`` field under SEML 0.5's names plus ``max_rss_mb``.

SEML (``experiment/experiment.py``, ``_collect_exp_stats``, a Sacred post-run hook) stores the
process totals of ``resource.getrusage`` at the end of a successful run. Here the times are the
differences between a sample taken before the run and one after (an array task may run several
experiments one after another), and failed runs get statistics too (a run that ran out of memory
is what ``mem_gb`` is sized from). The maximum resident set size is the kernel's high-water mark
of the process (and of its waited-for children), so for the second experiment of an array task
it is at least the first one's. In an experiment of several ranks the statistics are those of
the primary rank (global rank 0) alone. :func:`stats_fields` is pure; :func:`sample` and :func:`record`
read the process and write the document.
"""

from __future__ import annotations

import logging
import resource
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from seml_hydra.job.kept import write_or_keep

if TYPE_CHECKING:
    from seml_hydra.core.schema import ExperimentCollection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Usage:
    """One reading of the process' resources.

    Attributes:
        wall_s: ``time.monotonic()`` (seconds).
        self_user_s, self_system_s: CPU time of this process (seconds, ``RUSAGE_SELF``).
        self_maxrss_kb: its maximum resident set size (KiB, Linux's ``ru_maxrss`` unit).
        children_user_s, children_system_s, children_maxrss_kb: the same of its terminated,
            waited-for children (``RUSAGE_CHILDREN``).
        gpu_max_bytes: ``torch.cuda.max_memory_allocated()`` (bytes) when torch is imported and
            CUDA is available, else None.
    """

    wall_s: float
    self_user_s: float
    self_system_s: float
    self_maxrss_kb: int
    children_user_s: float
    children_system_s: float
    children_maxrss_kb: int
    gpu_max_bytes: int | None = None


def sample(*, reset_gpu_peak: bool = False) -> Usage:
    """Read this process' resources now (:class:`Usage`). ``reset_gpu_peak``: also reset
    torch's peak-memory counter (``torch.cuda.reset_peak_memory_stats``), as the run's start
    does so the peak is this experiment's. torch is only looked at when already imported (the
    task imported it); CUDA errors leave ``gpu_max_bytes`` None."""
    wall_s = time.monotonic()
    me, kids = _rusage(resource.RUSAGE_SELF), _rusage(resource.RUSAGE_CHILDREN)
    return Usage(wall_s, *me, *kids, gpu_max_bytes=_gpu_peak(reset_gpu_peak))


def _rusage(who: int) -> tuple[float, float, int]:
    """``(user_s, system_s, maxrss_kb)`` of ``resource.getrusage(who)``: the order of
    :class:`Usage`'s ``self_*`` and ``children_*`` fields."""
    usage = resource.getrusage(who)
    return usage.ru_utime, usage.ru_stime, usage.ru_maxrss


def _gpu_peak(reset: bool) -> int | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        if reset:
            torch.cuda.reset_peak_memory_stats()
        return int(torch.cuda.max_memory_allocated())
    except Exception:  # a broken CUDA setup must not fail the experiment's record
        return None


def stats_fields(start: Usage, end: Usage, *, torch_imported: bool) -> dict[str, Any]:
    """The document's ``stats`` of a run between the readings ``start`` and ``end`` (pure).

    Returns ``{"real_time": s, "self": {"user_time": s, "system_time": s, "max_memory_bytes":
    B}, "children": {...same...}, "max_rss_mb": MiB}`` (SEML 0.5's keys; ``max_rss_mb`` is the
    larger of the two maxima in MiB, rounded to 0.1), plus ``"pytorch": {}`` when
    ``torch_imported`` and ``"pytorch": {"gpu_max_memory_bytes": B}`` when ``end`` has a GPU
    peak, as SEML stores it. Times are differences (seconds, >= 0), memory the high-water marks
    at ``end``.
    """

    def part(user: float, system: float, maxrss_kb: int) -> dict[str, Any]:
        return {
            "user_time": max(0.0, user),
            "system_time": max(0.0, system),
            "max_memory_bytes": 1024 * int(maxrss_kb),
        }

    fields: dict[str, Any] = {
        "real_time": max(0.0, end.wall_s - start.wall_s),
        "self": part(
            end.self_user_s - start.self_user_s,
            end.self_system_s - start.self_system_s,
            end.self_maxrss_kb,
        ),
        "children": part(
            end.children_user_s - start.children_user_s,
            end.children_system_s - start.children_system_s,
            end.children_maxrss_kb,
        ),
        "max_rss_mb": round(max(end.self_maxrss_kb, end.children_maxrss_kb) / 1024, 1),
    }
    if torch_imported or end.gpu_max_bytes is not None:
        fields["pytorch"] = {}
        if end.gpu_max_bytes is not None:
            fields["pytorch"]["gpu_max_memory_bytes"] = end.gpu_max_bytes
    return fields


def record(
    collection: ExperimentCollection, exp_id: Any, start: Usage, fence: Mapping[str, Any]
) -> None:
    """Store the statistics of the run that began at ``start`` in document ``exp_id``
    (``$set`` of ``stats``, only where ``fence`` also matches: ``seml_hydra.job.claim.fence``).
    A failure to write is logged, never raised: the run's outcome is already recorded."""
    fields = stats_fields(start, sample(), torch_imported="torch" in sys.modules)
    try:
        write_or_keep(  # after what an outage kept, or kept itself (seml_hydra.job.kept)
            collection,
            {"_id": exp_id, **fence},
            {"$set": {"stats": fields}},
            f"recording the resource statistics of experiment {exp_id}",
        )
    except Exception:
        log.exception("Experiment %s: resource statistics not stored", exp_id)
