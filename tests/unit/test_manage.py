"""Pure decisions of seml_hydra.manage and seml_hydra.track: filters, states, job ids, killed
detection, cancel."""

from __future__ import annotations

import pytest

from seml_hydra.manage.cancel import tasks_to_cancel
from seml_hydra.manage.selection import (
    ManageError,
    Selection,
    build_filter,
    id_ranges_by_state,
    parse_filter_dict,
    parse_states,
)
from seml_hydra.track.cache import is_listed_collection
from seml_hydra.track.jobs import (
    decide_killed,
    foreign_experiments,
    foreign_lines,
    is_listed,
    sacct_states_by_task,
    task_of,
)
from seml_hydra.track.outputs import output_folder, tail_text, terminal_safe
from seml_hydra.track.query import and_


def test_parse_states_normalizes_case_commas_and_the_queued_alias():
    assert parse_states(["failed,Killed", " interrupted ", "QUEUED"]) == [
        "FAILED",
        "KILLED",
        "INTERRUPTED",
        "STAGED",
    ]
    assert parse_states(None) == [] and parse_states([""]) == []
    with pytest.raises(ManageError, match="Unknown state 'done'"):
        parse_states(["done"])


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"config.x": 2}', {"config.x": 2}),
        ("{config.x: 2, status: FAILED}", {"config.x": 2, "status": "FAILED"}),
        ("{'config.model.name': 'small'}", {"config.model.name": "small"}),
        (None, {}),
        ("  ", {}),
    ],
)
def test_parse_filter_dict_accepts_json_and_yaml_mappings(text, expected):
    assert parse_filter_dict(text) == expected


@pytest.mark.parametrize("text", ["[1, 2]", "3", "{a: [}"])
def test_parse_filter_dict_refuses_what_is_not_a_mapping(text):
    with pytest.raises(ManageError):
        parse_filter_dict(text)


def test_build_filter_ands_every_option_and_keeps_the_filter_dict():
    q = build_filter(sacred_id=3, batch_id=2, filter_states=["STAGED"], filter_dict={"config.x": 1})
    assert q == {
        "config.x": 1,
        "_id": 3,
        "batch_id": 2,
        "status": {"$in": ["STAGED", "QUEUED"]},
    }
    # a key of the filter dict is not overwritten: both must hold
    q = build_filter(filter_states=["FAILED"], filter_dict={"status": "KILLED"})
    assert q == {"status": "KILLED", "$and": [{"status": {"$in": ["FAILED"]}}]}
    assert build_filter() == {}


def test_selection_uses_defaults_and_refuses_states_a_command_cannot_act_on():
    assert Selection().query(default_states=["FAILED"]) == {"status": {"$in": ["FAILED"]}}
    assert Selection(filter_states=("KILLED",)).query(default_states=["FAILED"]) == {
        "status": {"$in": ["KILLED"]}
    }
    assert Selection().query(allowed=["PENDING", "RUNNING"]) == {
        "status": {"$in": ["PENDING", "RUNNING"]}
    }
    with pytest.raises(ManageError, match="not COMPLETED"):
        Selection(filter_states=("COMPLETED",)).query(allowed=["PENDING", "RUNNING"])


def test_and_does_not_change_the_given_query():
    query = {"$and": [{"a": 1}]}
    assert and_(query, {"b": 2}) == {"$and": [{"a": 1}, {"b": 2}]}
    assert query == {"$and": [{"a": 1}]}


def running(exp_id, array, task, cluster="slurm", **execution):
    return {
        "_id": exp_id,
        "status": "RUNNING",
        "execution": {"cluster": cluster, "array_id": array, "task_id": task, **execution},
        "slurm": [{"array_id": array, "task_id": task}],
    }


def pending(exp_id, array=None, task=None):
    slurm = {} if array is None else {"array_id": array, "task_id": task}
    return {"_id": exp_id, "status": "PENDING", "slurm": [slurm]}


def test_task_of_prefers_the_claiming_job_over_the_submission():
    doc = running(1, 10, 2)
    doc["slurm"] = [{"array_id": 9, "task_id": 0}]
    assert task_of(doc) == ("slurm", "10_2")
    assert task_of(pending(2, 11, 4)) == ("slurm", "11_4")
    assert task_of(pending(3)) is None
    assert task_of({"_id": 4, "slurm": {"array_id": 5, "task_id": 1}}) == ("slurm", "5_1")
    assert task_of({"_id": 5}) is None


def test_task_of_a_single_job_submission_is_the_plain_job_id():
    # submitit submits one task without --array: Slurm rejects "<id>_0" for it
    single = {"array_id": 270, "task_id": 0, "job_id": "270", "num_tasks": 1}
    doc = {"_id": 1, "status": "PENDING", "slurm": [single]}
    assert task_of(doc) == ("slurm", "270")
    doc["execution"] = {"cluster": "slurm", "array_id": 270, "task_id": 0}
    assert task_of(doc) == ("slurm", "270")
    array = {"array_id": 271, "task_id": 0, "job_id": "271_0", "num_tasks": 2}
    assert task_of({"_id": 2, "slurm": [array]}) == ("slurm", "271_0")


def test_decide_killed_needs_absence_from_squeue_and_a_terminal_or_missing_sacct_record():
    docs = [
        running(1, 10, 0),  # alive in squeue
        running(2, 10, 1),  # gone, sacct CANCELLED -> killed
        running(3, 10, 2),  # gone from squeue, sacct still RUNNING (lag) -> keep
        pending(4, 10, 3),  # gone, no sacct record -> killed
        pending(5),  # not submitted yet -> keep
        running(6, 4242, 0, cluster="local"),  # local executor -> never
        running(7, 10, 4, cancel_time="t"),  # cancelled by the user -> interrupted
    ]
    sacct = {"10_1": ["CANCELLED by 0"], "10_2": ["RUNNING"], "10_4": ["CANCELLED"]}
    killed, interrupted, unsure = decide_killed(docs, {"10_0"}, sacct)
    assert killed == [2, 4]
    assert interrupted == [7]
    assert unsure == []


def test_decide_killed_without_a_slurm_record_needs_a_stale_heartbeat():
    from datetime import datetime, timedelta, timezone

    now = datetime(2026, 11, 30, 12, 0, 0)
    fresh, stale = now - timedelta(seconds=20), now - timedelta(seconds=61)
    docs = [
        {**running(1, 10, 0), "heartbeat": fresh},  # no record, fresh heartbeat -> unsure
        {**running(2, 10, 1), "heartbeat": stale},  # no record, stale heartbeat -> killed
        {**running(3, 10, 2), "heartbeat": fresh},  # sacct NODE_FAIL: definitive -> killed
        {**running(4, 10, 3), "start_time": fresh},  # no heartbeat yet: start_time counts
        # tz-aware values are compared in UTC (12:00 at UTC+2 = 10:00 UTC: stale)
        {**running(5, 10, 4), "heartbeat": now.replace(tzinfo=timezone(timedelta(hours=2)))},
        running(6, 10, 5),  # never started (no heartbeat, no start_time) -> killed
    ]
    sacct = {"10_2": ["NODE_FAIL"]}
    killed, interrupted, unsure = decide_killed(docs, set(), sacct, now=now, heartbeat_stale_s=60)
    assert killed == [2, 3, 5, 6]
    assert unsure == [1, 4]
    assert interrupted == []


def test_tasks_to_cancel_spares_tasks_shared_with_experiments_not_cancelled():
    cancelled = [running(1, 10, 0), pending(2, 10, 1), pending(3, 10, 2), pending(4)]
    others = [pending(5, 10, 2)]  # experiments_per_job > 1: task 2 also runs experiment 5
    assert tasks_to_cancel(cancelled, others) == ["10_0", "10_1"]
    assert tasks_to_cancel([running(1, 3, 10), running(2, 3, 9)], []) == ["3_9", "3_10"]
    # a claimed experiment names its job's cluster, an unclaimed one of an older submission
    # "slurm": the same task all the same
    claimed = running(6, 11, 0, cluster="semltest")
    assert tasks_to_cancel([claimed], [pending(7, 11, 0)]) == []


def test_id_ranges_by_state_orders_states_by_life_cycle():
    docs = [
        {"_id": 3, "status": "FAILED"},
        {"_id": 1, "status": "COMPLETED"},
        {"_id": 2, "status": "QUEUED"},
        {"_id": 5, "status": "FAILED"},
        {"_id": 4, "status": "WEIRD"},
    ]
    assert id_ranges_by_state(docs) == {
        "STAGED": [2],
        "COMPLETED": [1],
        "FAILED": [3, 5],
        "WEIRD": [4],
    }


def test_hidden_collections_are_not_listed():
    for name in (
        "seml_hydra_counters",
        "fs.files",
        "fs.chunks",
        "metrics",
        "system.views",
        "seml_hydra_metrics.train",
    ):
        assert not is_listed_collection(name)
    assert is_listed_collection("train")


def test_tail_text_replaces_invalid_utf8():
    assert tail_text(b"a\nb\xff\nc\n", 2) == "b\ufffd\nc"


@pytest.mark.parametrize(
    ("seml", "expected"),
    [
        ({"output_dir": "/sweep/.submitit/%j"}, "/sweep/.submitit"),
        ({"output_dir": "/sweep/out"}, "/sweep/out"),
        ({"output_dir": "/sweep/a%j/b"}, "/sweep"),
        ({"output_dir": "logs", "working_dir": "/proj"}, "/proj/logs"),
        ({"output_dir": "logs"}, None),  # relative, and no working directory to anchor it
        ({"output_dir": "/%j"}, None),  # would be the whole file system
        ({}, None),
    ],
)
def test_output_folder_is_the_submitit_folder_before_its_placeholders(seml, expected):
    assert output_folder({"seml": seml}) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("title \x1b]0;owned\x07ok", "title ok"),  # OSC ended by BEL
        ("clip \x1b]52;c;ZWNobyBoaQ==\x1b\\ok", "clip ok"),  # OSC ended by ST
        ("\x1b[31mred\x1b[0m \x1b[2J\x1b[1;1H", "red "),  # CSI: colour, clear, cursor
        ("8-bit \x9b2J\x9d0;t\x9cok", "8-bit ok"),  # C1 forms of CSI and OSC
        ("open \x1b]8;;http://x\nnext", "open \nnext"),  # unterminated: ends at the line
        ("\x1bPdcs\x1b\\ \x1b(B\x1bc", " "),  # DCS, charset, reset
        ("a\tb\nc\x00\x07\x08\x7f", "a\tb\nc"),  # tab and newline kept
        ("10%\r100%\r\n", "10%\n100%\n"),  # carriage returns do not overwrite
        ("héllo ✓", "héllo ✓"),
    ],
)
def test_terminal_safe_strips_escape_sequences_and_control_characters(text, expected):
    assert terminal_safe(text) == expected


def sacct_row(job_id: str, state: str):
    from seml_hydra.slurm.records import SacctRow

    raw = job_id.split("_")[0]
    return SacctRow(job_id, raw, state.split()[0], state, 0, 0, None, None, None, 0.0, None, "u",
                    "n", None)  # fmt: skip


def test_sacct_states_by_task_expands_array_records_to_their_tasks():
    rows = [
        sacct_row("12_[0-3%2]", "CANCELLED by 0"),  # a held array cancelled: no task started
        sacct_row("13_0", "COMPLETED"),
        sacct_row("13_[1-2]", "PENDING"),
        sacct_row("14", "FAILED"),
        sacct_row("15", "CANCELLED by 0"),  # an array's record before sacct split it
    ]
    got = sacct_states_by_task(rows, ["12_1", "13_0", "15_2", "16_0"])
    assert got["12_0"] == got["12_3"] == ["CANCELLED by 0"]
    assert got["13_0"] == ["COMPLETED"] and got["13_2"] == ["PENDING"]
    assert got["14"] == ["FAILED"]
    assert got["15_2"] == ["CANCELLED by 0"]  # the task falls back to its array's record
    assert "16_0" not in got and "15_1" not in got  # only asked tasks fall back
    # the array asked for next to its task gives the same record twice: states once
    assert sacct_states_by_task([sacct_row("12_1", "X"), sacct_row("12_1", "X")]) == {"12_1": ["X"]}


def test_foreign_experiments_are_those_naming_another_cluster():
    docs = [
        running(1, 10, 0, cluster="here"),
        running(2, 10, 1, cluster="there"),
        running(3, 11, 0, cluster="slurm"),  # submitted before the real name was recorded
        running(4, 4242, 0, cluster="local"),
        pending(5),
        pending(6, 12, 0) | {"slurm": [{"array_id": 12, "task_id": 0, "cluster": "there"}]},
        running(7, 13, 0, cluster="other"),
    ]
    assert foreign_experiments(docs, "here") == {"there": [2, 6], "other": [7]}
    assert foreign_lines({"there": [2, 6]}, "here") == [
        "2 experiment(s) run on cluster there (2, 6): not checked from cluster here; run "
        "`status` there to check them."
    ]


def test_a_plain_id_is_listed_through_its_tasks_and_takes_their_sacct_states():
    # SEML records a one-task array as num_tasks 1: task_of says "354", squeue "354_0"
    assert is_listed("354", {"354_0"}) and is_listed("354_0", {"354_0"})
    assert not is_listed("354_1", {"354_0"}) and not is_listed("35", {"354_0"})
    rows = [sacct_row("354_0", "COMPLETED")]
    assert sacct_states_by_task(rows, ["354"])["354"] == ["COMPLETED"]


def test_seml_files_pipeline_groups_the_pairs_straight_after_the_match():
    """``delete`` reads the payload and snapshot of its experiments with one ``$group`` by the
    ``{payload_file, source_files, source_manifest}`` right after the ``$match``: no ``$project`` or
    ``$sort`` of every document's snapshot (72 ``[path, id]`` pairs each in the benchmark's
    launch: 3 s of mongod's time for 100,000 experiments); the ids collected are only those of
    the runs that may have stored files (the same pass finds them), beside the count and span
    of the ids, which stand for the ids when they are consecutive."""
    from seml_hydra.manage import lifecycle
    from seml_hydra.manage.lifecycle import seml_files_pipeline

    query = {"_id": {"$gte": 1, "$lte": 9}}
    assert seml_files_pipeline(query) == [
        {"$match": query},
        {
            "$group": {
                "_id": {
                    "payload_file": "$seml.payload_file",
                    "source_files": "$seml.source_files",
                    "source_manifest": "$seml.source_manifest",
                },
                "ran": {"$push": {"$cond": [lifecycle._RAN_EXPR, "$_id", "$$REMOVE"]}},
                "n": {"$sum": 1},
                "ints": {"$sum": {"$cond": [{"$in": [{"$type": "$_id"}, ["int", "long"]]}, 1, 0]}},
                "lo": {"$min": "$_id"},
                "hi": {"$max": "$_id"},
            }
        },
    ]


def test_id_slices_cut_ids_into_consecutive_parts_of_about_equal_length():
    from seml_hydra.core.ranges import id_slices

    assert id_slices(range(1, 11), 3) == [range(1, 4), range(4, 7), range(7, 11)]
    assert id_slices([5, 7, 9], 5) == [[5], [7], [9]]
    assert id_slices([1, 2], 0) == [[1, 2]]
    assert id_slices([], 4) == []


def test_held_task_rows_are_the_pending_tasks_whose_reason_is_a_hold():
    """``delete`` skips the INTERRUPTED mark only for tasks Slurm will not start: pending with
    a hold (user or admin), not pending for a begin time, resources or a dependency."""
    from seml_hydra.manage.cancel import held_task_rows
    from seml_hydra.slurm.records import SqueueRow

    def row(job_id, raw, array, task, state, reason):
        return SqueueRow(job_id, raw, array, task, state, reason, None, 0.0, "u", "n", "c")

    rows = [
        row("10_[0-2%3]", 10, 10, "0-2%3", "PENDING", "JobHeldUser"),
        row("11_[0-1]", 11, 11, "0-1", "PENDING", "JobHeldAdmin"),
        row("12_[0-1]", 12, 12, "0-1", "PENDING", "BeginTime"),
        row("13_0", 14, 13, "0", "RUNNING", None),
        row("15", 15, None, None, "PENDING", "JobHeldUser"),
        row("16", 16, None, None, "PENDING", "Resources"),
    ]
    assert held_task_rows(rows) == {"10_0", "10_1", "10_2", "11_0", "11_1", "15"}
