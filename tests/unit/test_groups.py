"""Experiments judged per group (``track.groups``, ``track.query.grouped_pipeline``) and the
results table at scale (``manage.results_table``): pure parts."""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timedelta

from seml_hydra.manage.results_table import _canonical, _same_key, to_text, varying_keys
from seml_hydra.track.groups import GROUP_FIELDS, group_fields, representative
from seml_hydra.track.jobs import array_of, decide_killed, task_of
from seml_hydra.track.query import grouped_pipeline

NOW = datetime(2026, 12, 1, 12, 0, 0)


def test_grouped_pipeline_projects_before_sorting_and_groups_by_the_top_level_fields():
    pipeline = grouped_pipeline({"status": "PENDING"}, {"status": 1, "slurm.array_id": 1})
    assert [next(iter(stage)) for stage in pipeline] == ["$match", "$project", "$sort", "$group"]
    assert pipeline[1]["$project"] == {"status": 1, "slurm.array_id": 1, "_id": 1}
    assert pipeline[3]["$group"] == {
        "_id": {"status": "$status", "slurm": "$slurm"},
        "ids": {"$push": "$_id"},
    }


def test_group_fields_hold_every_field_the_decisions_read_and_the_two_flags():
    fields = group_fields(NOW)
    assert set(GROUP_FIELDS) < set(fields)
    assert {"_fresh", "_cancelled"} <= set(fields)
    assert "execution.cancel_time" not in fields  # a boolean, or every cancel its own group
    assert "heartbeat" not in fields


def _key(doc, *, fresh=False, cancelled=False):
    """What the aggregate's group key is for ``doc`` (its fields but the heartbeat and the
    cancel time, and the two flags)."""
    key = {k: v for k, v in doc.items() if k not in ("_id", "heartbeat")}
    if isinstance(key.get("execution"), dict):
        key["execution"] = {k: v for k, v in key["execution"].items() if k != "cancel_time"}
    return {**key, "_fresh": fresh, "_cancelled": cancelled}


def test_a_representative_is_judged_as_each_experiment_of_its_group():
    """decide_killed on the representative gives the same verdict as on every member: stale
    heartbeat -> killed, fresh -> unsure, cancelled -> interrupted, alive task -> nothing."""
    stale, fresh = NOW - timedelta(seconds=600), NOW - timedelta(seconds=5)
    members = [
        {"_id": 1, "status": "RUNNING", "execution": {"array_id": 7, "task_id": 0},
         "heartbeat": stale},
        {"_id": 2, "status": "RUNNING", "execution": {"array_id": 7, "task_id": 1},
         "heartbeat": fresh},
        {"_id": 3, "status": "RUNNING",
         "execution": {"array_id": 7, "task_id": 2, "cancel_time": stale}, "heartbeat": stale},
        {"_id": 4, "status": "PENDING",
         "slurm": [{"array_id": 8, "task_id": 0, "job_id": "8_0", "num_tasks": 2}]},
        {"_id": 5, "status": "PENDING", "slurm": [{"array_id": 9, "task_id": 1}]},
    ]  # fmt: skip
    alive = {"9_1"}
    for doc in members:
        sign = doc.get("heartbeat")
        flags = {
            "fresh": sign is not None and sign > NOW - timedelta(seconds=60),
            "cancelled": "cancel_time" in (doc.get("execution") or {}),
        }
        rep = representative(_key(doc, **flags), 0, NOW)
        verdict = [[doc["_id"] for _ in ids] for ids in decide_killed([rep], alive, {}, now=NOW)]
        assert verdict == [list(ids) for ids in decide_killed([doc], alive, {}, now=NOW)], doc
        assert task_of(rep) == task_of(doc) and array_of(rep) == array_of(doc)


def test_representative_keeps_absent_fields_absent():
    """A task id missing from ``execution`` is task 0 (``task_of``'s default), not ``None``."""
    rep = representative({"status": "RUNNING", "execution": {"array_id": 5}}, 3, NOW)
    assert rep == {"_id": 3, "status": "RUNNING", "execution": {"array_id": 5}}
    assert task_of(rep) == ("slurm", "5_0")
    flagged = representative({"status": "RUNNING", "_fresh": True, "_cancelled": True}, 0, NOW)
    assert flagged["heartbeat"] == NOW and flagged["execution"] == {"cancel_time": NOW}


def test_same_key_is_equal_exactly_when_the_json_forms_are():
    values = [1, 1.0, True, False, 0, 0.0, -0.0, float("nan"), float("inf"), None, "1", "a",
              [1], [1.0], {"a": 1}, {"a": 1.0}, (1,)]  # fmt: skip
    for a, b in itertools.product(values, repeat=2):
        assert (_same_key(a) == _same_key(b)) == (_canonical(a) == _canonical(b)), (a, b)


def test_varying_keys_as_before_on_mixed_rows():
    rows = [
        {"config.a": 1, "config.b": "x", "config.c": [1]},
        {"config.a": 1.0, "config.b": "x", "config.c": [1]},
        {"config.a": 1, "config.b": "x", "config.d": None},
    ]
    assert varying_keys(rows) == ["config.a", "config.c", "config.d"]
    assert varying_keys(rows[:1]) == []


def test_to_text_draws_rich_s_box_with_safe_cells():
    rows = [
        {"_id": 1, "status": "COMPLETED", "config.lr": 0.1, "result": "ok\x1b[31m\tred"},
        {"_id": 10, "status": "FAILED", "config.lr": None, "result": "é"},
    ]
    text = to_text(["_id", "status", "config.lr", "result"], rows, title="col")
    assert text == (
        "col\n"
        "┏━━━━━┳━━━━━━━━━━━┳━━━━━━━━━━━┳━━━━━━━━┓\n"
        "┃ _id ┃ status    ┃ config.lr ┃ result ┃\n"
        "┡━━━━━╇━━━━━━━━━━━╇━━━━━━━━━━━╇━━━━━━━━┩\n"
        "│   1 │ COMPLETED │       0.1 │ ok red │\n"
        "│  10 │ FAILED    │           │      é │\n"
        "└─────┴───────────┴───────────┴────────┘\n"
    )
    assert json.dumps(text).count("\\u001b") == 0


def test_group_rows_merge_the_groups_of_a_state_and_pending_arrays_read_slurm_0():
    from seml_hydra.manage.describe import group_rows
    from seml_hydra.manage.status_view import pending_arrays

    groups = [
        ({"status": "PENDING", "slurm": [{"array_id": 12}]}, [1, 2, 3]),
        ({"status": "COMPLETED", "seml": {"description": "b"}}, [4]),
        ({"status": "PENDING", "slurm": [{"array_id": 9}], "seml": {"description": "a"}}, [5, 6]),
        ({"status": "PENDING", "slurm": [{"array_id": "x"}, {"array_id": 3}]}, [0]),
        ({"status": "RUNNING", "slurm": [{"array_id": 4}]}, [7]),
    ]
    rows = group_rows(groups)
    assert [(r.state, r.ids, r.descriptions) for r in rows] == [
        ("PENDING", [0, 1, 2, 3, 5, 6], ["a"]),
        ("RUNNING", [7], []),
        ("COMPLETED", [4], ["b"]),
    ]
    assert pending_arrays(doc for doc, _ in groups) == ["12", "9"]
