"""Fail-fast (``hydra.launcher.max_failures``), the pure parts: the value's check (launcher and
``seml start --max-failures``), the reason, which Slurm tasks a stop cancels, the waiting
launcher's message. No Slurm, no MongoDB."""

from __future__ import annotations

import pytest
from support.launcher_conf import launcher

from seml_hydra.job import failfast
from seml_hydra.launch.pipeline import fail_fast_message
from seml_hydra.launch.sbatch import resource_key, validate_launcher
from seml_hydra.manage.local import check_options
from seml_hydra.manage.selection import ManageError


@pytest.mark.parametrize("value", [None, 1, 2, 100])
def test_max_failures_null_or_at_least_one_is_accepted(value):
    assert failfast.max_failures_problem(value) is None
    validate_launcher(launcher(max_failures=value))


@pytest.mark.parametrize("value", [0, -1, True, False, 1.5, "2", "abc"])
def test_max_failures_below_one_is_refused_before_staging_in_one_line(value):
    with pytest.raises(ValueError) as error:
        validate_launcher(launcher(max_failures=value))
    message = str(error.value)
    assert message.startswith(f"hydra.launcher.max_failures={value!r}: must be an integer >= 1")
    assert message.endswith("nothing was staged") and "\n" not in message


def test_start_refuses_max_failures_below_one_and_with_local_runs():
    base = dict(debug=False, local=False, post_mortem=False, worker_gpus=None, sacred_id=None)
    check_options(**base, max_failures=2)
    with pytest.raises(ManageError, match=r"^--max-failures=0: must be an integer >= 1"):
        check_options(**base, max_failures=0)
    with pytest.raises(ManageError, match="does not work with --debug or --local"):
        check_options(**{**base, "local": True}, max_failures=2)


def test_start_refusal_says_how_to_turn_it_off_on_the_command_line():
    base = dict(debug=False, local=False, post_mortem=False, worker_gpus=None, sacred_id=None)
    with pytest.raises(ManageError) as error:
        check_options(**base, max_failures=0)
    message = str(error.value)
    assert "null" not in message  # no value of the option means off: it is left out
    assert "leave --max-failures out" in message


def test_points_with_another_max_failures_make_their_own_arrays():
    assert resource_key(launcher(max_failures=2)) != resource_key(launcher(max_failures=3))


def test_the_reason_names_the_failures():
    assert failfast.reason([1, 2]) == "fail-fast: 2 experiments failed: ids 1, 2"
    assert failfast.reason([4]) == "fail-fast: 1 experiment failed: id 4"


def test_mark_is_none_without_max_failures():
    assert failfast.mark("g", None) is None
    assert failfast.mark("g", 2) == {"group": "g", "max_failures": 2}


def doc(exp_id, job, array, task, cluster="semlcluster", execution=None):
    slurm = {"array_id": array, "task_id": task, "job_id": job, "cluster": cluster}
    return {"_id": exp_id, "slurm": [slurm], **({"execution": execution} if execution else {})}


def test_a_stop_cancels_the_stopped_experiments_tasks_but_its_own_single_rank_task():
    docs = [
        doc(3, "70_2", 70, 2, execution={"array_id": 70, "task_id": 2}),  # running
        doc(4, "70_3", 70, 3),  # pending
        doc(5, "70_3", 70, 3),  # the same task (experiments_per_job=2)
        doc(6, "70_0", 70, 0),  # pending in the caller's own task: it skips it itself
        doc(7, "71", 71, 0, cluster="local"),  # submitit's local executor: no Slurm task
        {"_id": 8, "slurm": [{"array_id": 70}]},  # no job recorded (yet)
    ]
    assert failfast.tasks_to_cancel(docs, (70, 0), cancel_own=False) == ["70_2", "70_3"]
    # a job of several ranks cancels its own task too: no rank waits for another
    assert failfast.tasks_to_cancel(docs, (70, 0), cancel_own=True) == ["70_0", "70_2", "70_3"]
    assert failfast.tasks_to_cancel(docs, None, cancel_own=False) == ["70_0", "70_2", "70_3"]


def test_in_task_reads_the_claim_then_the_submission():
    running = doc(3, "70_2", 70, 2, execution={"array_id": "70", "task_id": 2})
    assert failfast.in_task(running, (70, 2))
    assert not failfast.in_task(running, (70, 1))
    assert failfast.in_task(doc(4, "9", 9, 0), (9, 0))
    assert not failfast.in_task(doc(4, "9", 9, 0), None)


def finished(exp_id, status, group="g", reason=None):
    fail_fast = {"group": group, "max_failures": 2, **({"reason": reason} if reason else {})}
    return {"_id": exp_id, "status": status, "fail_fast": fail_fast}


def test_the_waiting_launcher_names_the_failures_and_how_many_it_stopped():
    why = "fail-fast: 2 experiments failed: ids 1, 2"
    docs = [
        finished(1, "FAILED"),
        finished(2, "FAILED"),
        *(finished(i, "INTERRUPTED", reason=why) for i in range(3, 9)),
        finished(9, "COMPLETED"),
        finished(10, "FAILED", group="another launch"),
    ]
    assert fail_fast_message(docs, {"g": 2}, "c") == (
        "fail-fast: 2 experiments failed: ids 1, 2 (max_failures=2); stopped 6 other "
        "experiment(s) of this launch (INTERRUPTED): ids 3-8. See `seml c print-fail-trace "
        "-id 1`."
    )
    assert fail_fast_message(docs, {"g": 3}, "c") is None
    assert fail_fast_message(docs, {}, "c") is None


def test_start_says_the_limit_it_applies():
    from seml_hydra.manage.start import StartedArray, fail_fast_lines

    arrays = [
        StartedArray("70", "gate_1", "slurm", "/f", [1, 2, 3], 2),
        StartedArray("71", "gate_1", "slurm", "/f", [4, 5], 2),
        StartedArray("72", "gate_2", "slurm", "/f", [6], None),
    ]
    assert fail_fast_lines(arrays, 2) == [
        "Fail-fast: once 2 of the 5 experiment(s) started now ended FAILED, the others stop "
        "(--max-failures 2)."
    ]
    assert fail_fast_lines(arrays[1:], None) == [
        "Fail-fast: once 2 of the 2 experiment(s) started now ended FAILED, the others stop "
        "(their launch's max_failures = 2)."
    ]
    assert fail_fast_lines(arrays[2:], None) == []
