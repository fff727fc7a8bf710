"""``manage.cancel.plan_cancel``: what a cancel marks, cancels and marks again, decided from the
experiments read and squeue's rows alone (no MongoDB, no Slurm)."""

from __future__ import annotations

from seml_hydra.manage.cancel import CancelFacts, candidate_tasks, plan_cancel
from seml_hydra.slurm.records import SqueueRow
from seml_hydra.track.groups import Group


def group(index, ids, status, array=None, task=None, cluster="slurm", **extra):
    """A group of experiments of task ``<array>_<task>`` (claimed when RUNNING)."""
    slurm = {} if array is None else {"array_id": array, "task_id": task, "cluster": cluster}
    doc = {"_id": index, "status": status, "slurm": [slurm], **extra}
    if status == "RUNNING" and array is not None:
        doc["execution"] = {"cluster": cluster, "array_id": array, "task_id": task}
    return Group(doc, list(ids))


def row(array, tasks, state, reason=None):
    """squeue's row of the tasks ``tasks`` (a spec like ``"0-2"``) of array ``array``."""
    job = f"{array}_{tasks}" if state == "RUNNING" else f"{array}_[{tasks}]"
    return SqueueRow(job, array, array, tasks, state, reason, None, 0.0, "u", "n", "c")


HELD = "JobHeldUser"


def test_a_held_array_is_marked_once_and_cancelled_without_a_second_write():
    """A cancel of PENDING experiments whose tasks squeue lists held: every one marked before
    the scancel, both tasks cancelled, and no second INTERRUPTED (nothing runs them)."""
    selected = [group(0, range(1, 6), "PENDING", 10, 0), group(1, range(6, 11), "PENDING", 10, 1)]
    plan = plan_cancel(CancelFacts(selected, rows=[row(10, "0-1", "PENDING", HELD)]))
    assert plan.mark == list(range(1, 11))
    assert plan.scancel == ["10_0", "10_1"]
    assert plan.again == []


def test_a_running_or_not_held_task_s_experiments_are_marked_again_after_the_wait():
    """A live observer may write RUNNING over the mark until its process is gone, and a task
    pending without a hold may start meanwhile: their experiments get the second write, and so
    does a RUNNING experiment whose task is held again (requeued)."""
    selected = [
        group(0, [1, 2], "RUNNING", 10, 0),
        group(1, [3], "PENDING", 10, 1),
        group(2, [4], "RUNNING", 10, 2),
    ]
    rows = [
        row(10, "0", "RUNNING"),
        row(10, "1", "PENDING", "Resources"),
        row(10, "2", "PENDING", HELD),
    ]
    plan = plan_cancel(CancelFacts(selected, rows=rows))
    assert plan.mark == [1, 2, 3, 4]
    assert plan.scancel == ["10_0", "10_1", "10_2"]
    assert plan.again == [1, 2, 3, 4]


def test_delete_s_plan_leaves_the_experiments_of_held_tasks_unmarked():
    """``mark_held=False`` (``delete``): the experiments of a held task are not marked (they are
    deleted a moment later), the others are; every alive task is cancelled."""
    selected = [group(0, [1, 2], "PENDING", 10, 0), group(1, [3], "RUNNING", 11, 0)]
    rows = [row(10, "0", "PENDING", HELD), row(11, "0", "RUNNING")]
    plan = plan_cancel(CancelFacts(selected, rows=rows), mark_held=False)
    assert plan.mark == [3]
    assert plan.again == [3]
    assert plan.scancel == ["10_0", "11_0"]
    assert plan_cancel(CancelFacts(selected, rows=rows), mark_held=True).mark == [1, 2, 3]


def test_only_the_tasks_squeue_lists_alive_are_cancelled():
    """A task already gone is not cancelled (nor reported), its experiments are still marked
    and marked again (squeue cannot vouch that nothing runs them)."""
    selected = [group(0, [1], "PENDING", 10, 0), group(1, [2], "RUNNING", 10, 1)]
    plan = plan_cancel(CancelFacts(selected, rows=[row(10, "1", "RUNNING")]))
    assert plan.candidates == ["10_0", "10_1"]
    assert plan.scancel == ["10_1"]
    assert plan.mark == plan.again == [1, 2]


def test_a_task_shared_with_an_experiment_not_cancelled_is_spared():
    """``experiments_per_job > 1``: the task runs another active experiment that is not
    selected, so it is not cancelled; the selected one is marked (the job skips it)."""
    selected = [group(0, [1], "PENDING", 10, 0), group(1, [3], "PENDING", 10, 1)]
    others = [group(2, [2], "PENDING", 10, 0).doc]
    rows = [row(10, "0-1", "PENDING", "Resources")]
    plan = plan_cancel(CancelFacts(selected, others=others, rows=rows))
    assert plan.candidates == ["10_1"]
    assert plan.scancel == ["10_1"]
    assert plan.mark == [1, 3]


def test_an_earlier_cancel_stopped_before_its_scancel_is_finished():
    """Experiments an earlier cancel marked (INTERRUPTED, ``execution.cancel_time``) whose task
    is alive: their task is cancelled, they are reported ``finished`` and marked again, not
    marked a second time with a new cancel time."""
    unfinished = [group(0, [7, 8], "INTERRUPTED", 12, 3)]
    plan = plan_cancel(
        CancelFacts([], unfinished=unfinished, rows=[row(12, "3", "RUNNING")]),
    )
    assert plan.mark == []
    assert plan.finished == [7, 8]
    assert plan.scancel == ["12_3"]
    assert plan.again == [7, 8]


def test_local_runs_are_marked_but_no_task_is_cancelled_for_them():
    selected = [group(0, [4], "RUNNING", 1234, 0, cluster="local")]
    plan = plan_cancel(CancelFacts(selected))
    assert plan.local_ids == [4]
    assert plan.mark == plan.again == [4]
    assert plan.candidates == plan.scancel == []


def test_seml_orphaned_pending_tasks_are_cancelled_when_squeue_lists_them():
    """SEML 0.5's pending tasks left without a PENDING experiment come after the experiments'
    own tasks, and are cancelled like them when alive."""
    selected = [group(0, [1], "RUNNING", 10, 0)]
    rows = [row(10, "0", "RUNNING"), row(20, "4", "PENDING", "Resources")]
    facts = CancelFacts(selected, orphaned=["20_4", "20_5"], rows=rows)
    candidates = candidate_tasks(facts.selected, [], [], facts.orphaned)
    assert candidates == ["10_0", "20_4", "20_5"]
    assert plan_cancel(facts).scancel == ["10_0", "20_4"]
    # the caller's candidates (cancel asked squeue about them) are the ones it would compute
    assert plan_cancel(facts, candidates=candidates) == plan_cancel(facts)
