"""Metrics logged through the experiment's Sacred run, from inside a Hydra task.

The run step (``seml_hydra.job.runner``) runs the task under a Sacred ``Experiment`` on the primary
rank only; the task itself never sees Sacred's ``_run``. :func:`log_scalar` reaches that run:

    from seml_hydra import metrics

    @hydra.main(...)
    def main(cfg):
        for epoch in range(cfg.epochs):
            metrics.log_scalar("train.loss", loss, step=epoch)

Sacred stores the values the way every Sacred tool reads them: one document per metric
(``run_id`` = the experiment's ``_id``, ``name``, ``steps``, ``values``, ``timestamps``), listed in
the run's ``info.metrics``, in the experiments collection's own metrics collection
``seml_hydra_metrics.<collection>`` (``seml_hydra.store.db.collections.metrics_collection_name``; every
collection's ids start at 1, so one shared collection keyed by ``run_id`` would mix them). They
are flushed with each heartbeat and at the end of the run; read them with
``seml_hydra.get_metrics``.

How the run is found: the run step registers it with :func:`bind_run` (a Sacred pre-run hook:
``ex.pre_run_hook(metrics.bind_run)``); without that registration the Sacred ``Run`` whose
main function is on the current call stack is used. On the other ranks, and outside a
seml-hydra job, there is no run: :func:`log_scalar` does nothing and returns False (ranks other
than the primary attach no observer, as in SEML). Importing this module is cheap.
"""

from __future__ import annotations

from typing import Any

#: the Sacred run of the experiment running in this process (set by the run step)
_RUN: Any = None


def bind_run(_run: Any) -> None:
    """Register the Sacred run the current task belongs to. Sacred injects ``_run`` when this is
    added as a pre-run hook: ``ex.pre_run_hook(metrics.bind_run)``."""
    global _RUN
    _RUN = _run


def unbind_run() -> None:
    """Forget the registered run."""
    global _RUN
    _RUN = None


def _active(run: Any) -> bool:
    """A run that started and has not stopped (Sacred sets ``stop_time`` when it ends)."""
    return run is not None and getattr(run, "stop_time", None) is None


def current_run() -> Any:
    """The Sacred ``Run`` of the experiment running now in this process (bound by the run step
    on the primary rank, ``seml_hydra.job.runner``), or None."""
    return _RUN if _active(_RUN) else None


def log_scalar(name: str, value: float, step: int | None = None) -> bool:
    """Log ``value`` of metric ``name`` (at ``step``; Sacred counts steps itself when None)
    through the experiment's Sacred run. Returns True when it was logged, False when this
    process has no run (a rank other than the primary, or not a seml-hydra job)."""
    run = current_run()
    if run is None:
        return False
    run.log_scalar(name, value, step)
    return True
