"""The pure parts of the attempt history (``seml_hydra.core.attempts``): which attempt a
selector means, the current run as an entry, the table's cells, and the shape of the update."""

from __future__ import annotations

import pytest

from seml_hydra.core import attempts


@pytest.mark.parametrize(
    ("selector", "current", "number"),
    [(1, 3, 1), (3, 3, 3), (-1, 3, 3), (-2, 3, 2), (-3, 3, 1), (1, 1, 1), (-1, 1, 1)],
)
def test_a_selector_names_an_attempt_by_number_or_counting_back(selector, current, number):
    assert attempts.resolve_attempt(selector, current) == number


@pytest.mark.parametrize(("selector", "current"), [(4, 3), (-4, 3), (-2, 1), (2, 1)])
def test_a_selector_outside_the_attempts_is_refused_saying_which_there_are(selector, current):
    with pytest.raises(ValueError, match=f"has attempts 1 to {current}"):
        attempts.resolve_attempt(selector, current)


@pytest.mark.parametrize("selector", [0, True, 1.0, "1", None])
def test_a_selector_that_is_not_a_nonzero_integer_is_refused(selector):
    with pytest.raises(ValueError, match="give an attempt number"):
        attempts.check_selector(selector)


def test_the_current_run_is_numbered_after_the_last_kept_entry():
    assert attempts.current_number({}) == 1
    assert attempts.current_number({"attempts": [{"attempt": 5}, {"attempt": 6}]}) == 7
    # garbled: numbered as the update pipeline numbers it
    assert attempts.current_number({"attempts": [{"attempt": "x"}]}) == 1
    assert attempts.current_number({"attempts": "garbled"}) == 1


def test_the_current_run_as_an_entry_leaves_out_what_it_has_not_written():
    doc = {
        "status": "RUNNING",
        "attempts": [{"attempt": 1}],
        "host": {"hostname": "node1", "os": "Linux"},
        "execution": {"cluster": "c", "array_id": 5, "task_id": 2, "restart": 1},
        "fail_trace": [f"{i}\n" for i in range(30)],
    }
    entry = attempts.current_entry(doc)
    assert entry == {
        "attempt": 2,
        "status": "RUNNING",
        "host": "node1",
        "cluster": "c",
        "array_id": 5,
        "task_id": 2,
        "restart": 1,
        "fail_trace_tail": [f"{i}\n" for i in range(10, 30)],
        "current": True,
    }
    assert attempts.job_label(entry) == "5_2 (restart 1)"
    assert attempts.job_label({"array_id": 5, "task_id": 2, "restart": 0}) == "5_2"
    assert attempts.job_label({}) == ""


def test_how_a_run_ended_is_its_pruning_or_its_traces_last_line():
    assert attempts.why_it_ended({"fail_trace_tail": ["a\n", "ValueError: x\n", "\n"]}) == (
        "ValueError: x"
    )
    assert attempts.why_it_ended({"fail_trace_tail": ["a\n", "b\n"]}, lines=2) == "a | b"
    pruned = {"pruned": {"step": 3, "value": 0.5, "rule": "asha"}, "fail_trace_tail": ["x"]}
    assert attempts.why_it_ended(pruned) == "pruned at step 3 (asha: 0.5)"
    assert attempts.why_it_ended({}) == ""
    killed = {"status": "KILLED", "fail_trace": ["Slurm: job 5_1 TIMEOUT\n", "Last lines\n"]}
    assert attempts.why_it_ended(attempts.current_entry(killed)) == "Slurm: job 5_1 TIMEOUT"


def test_the_move_is_one_pipeline_history_first_then_the_new_values_taken_literally():
    pipeline = attempts.move_pipeline("reset", {"status": "STAGED", "x": "$notafield"}, ["a", "b"])
    assert [list(stage) for stage in pipeline] == [["$set"], ["$set"], ["$unset"]]
    assert list(pipeline[0]["$set"]) == ["attempts"]  # computed from the run being moved
    assert pipeline[1]["$set"] == {
        "status": {"$literal": "STAGED"},
        "x": {"$literal": "$notafield"},
    }
    assert pipeline[2] == {"$unset": ["a", "b"]}
    keep = pipeline[0]["$set"]["attempts"]["$cond"][1]["$slice"]
    assert keep[1] == -attempts.HISTORY_LIMIT == -20


def test_print_attempts_stop_time_is_a_time_of_day_on_the_start_day():
    from datetime import datetime

    from seml_hydra.core.attempts import stop_label

    start = datetime(2026, 12, 1, 23, 0)
    assert stop_label(start, datetime(2026, 12, 1, 23, 30, 5)) == "23:30:05"
    assert stop_label(start, datetime(2026, 12, 2, 0, 30)) == "2026-12-02 00:30:00"
    assert stop_label(None, datetime(2026, 12, 2, 0, 30)) == "2026-12-02 00:30:00"
    assert stop_label(start, None) == ""


def test_print_attempts_reasons_wrap_within_the_width_and_keep_every_character():
    from seml_hydra.core.attempts import ended_lines

    why = "OSError: cannot open /data/" + "x" * 120 + " after 3 retries"
    entries = [
        {"attempt": 1, "status": "FAILED", "fail_trace_tail": ["Traceback\n", why + "\n"]},
        {"attempt": 2, "status": "RUNNING", "current": True},  # nothing to say yet
    ]
    lines = ended_lines(entries, 80)
    assert lines[0].startswith("  #1 FAILED: OSError: cannot open /data/xxx")
    assert all(len(line) <= 80 for line in lines) and len(lines) >= 3
    assert "".join(line.strip() for line in lines).replace(" ", "") == (
        "#1FAILED:" + why.replace(" ", "")
    )


def test_a_run_fail_fast_stopped_shows_the_stops_time_as_its_stop():
    # the stop writes fail_fast.stop_time only; Sacred's stop_time is written by a run's end
    stopped = {
        "status": "INTERRUPTED",
        "start_time": 1,
        "fail_fast": {"group": "g", "reason": "fail-fast: ...", "stop_time": 2},
    }
    assert attempts.current_entry(stopped)["stop_time"] == 2
    assert attempts.current_entry({**stopped, "stop_time": 3})["stop_time"] == 3
    assert attempts.entry_expression("reset")["stop_time"] == {
        "$ifNull": ["$stop_time", "$fail_fast.stop_time"]
    }
