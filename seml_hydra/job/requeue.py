"""Opt-in checkpointing on Slurm timeouts and preemption, on top of submitit's.

A task that can resume calls :func:`on_requeue` with a function that saves its state::

    from seml_hydra import requeue

    def task(cfg):
        state = load(cfg) if requeue.requeues() else fresh(cfg)   # resume after a requeue
        requeue.on_requeue(lambda: save(state))
        ...

When Slurm signals the job (``signal_delay_s`` before the time limit, or on preemption;
submitit delivers it to global rank 0 only), the primary rank calls the saved function, marks
the experiment RESCHEDULED and requeues the same array task; the requeued task re-claims the
experiment by its ``execution.{cluster, array_id, task_id}`` (the claim rule) and runs the task
again, which resumes from its state. After ``hydra.launcher.max_requeues`` requeues the
experiment ends FAILED with that reason. A task that did not opt in ends FAILED with the
reason "timed out or preempted without a requeue hook" instead of staying RUNNING. A signal that
arrives before the task started (Slurm may signal up to a minute early) requeues it: nothing is
lost yet (it counts towards ``max_requeues``).
"""

from __future__ import annotations

from collections.abc import Callable

_hook: Callable[[], None] | None = None
_requeues = 0
_task_started = False


def on_requeue(save: Callable[[], None]) -> None:
    """Opt in to requeueing: ``save()`` is called (on the primary rank) when Slurm signals a
    timeout or preemption, before the array task is requeued. Call it again to replace it."""
    global _hook
    _hook = save


def requeues() -> int:
    """How many times the running experiment was requeued before this run (0 on its first)."""
    return _requeues


def _begin(count: int) -> None:
    """Run step: a new experiment starts on this rank (no hook yet, ``count`` requeues so far)."""
    global _hook, _requeues, _task_started
    _hook, _requeues, _task_started = None, count, False


def _enter_task() -> None:
    """Run step: the task function is about to run (from now on, no hook means no opt-in)."""
    global _task_started
    _task_started = True


def _task_has_started() -> bool:
    return _task_started


def _current_hook() -> Callable[[], None] | None:
    return _hook
