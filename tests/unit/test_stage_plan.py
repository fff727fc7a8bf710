"""Unit tests for seml_hydra.launch.stage.plan_staging: SEML's duplicate rule, without MongoDB."""

from __future__ import annotations

import pytest

from seml_hydra.core import states
from seml_hydra.launch.stage import StagePlan, StageResult, plan_staging


def doc(_id: int, status: str, config_hash: str = "h") -> dict:
    return {"_id": _id, "status": status, "config_hash": config_hash}


def test_no_existing_documents_all_new():
    plan = plan_staging(["a", "b", "c"], [], force=False)
    assert plan.new == [0, 1, 2]
    assert plan.existing == {} and plan.rerun == [] and plan.resubmit == []


def test_empty_sweep():
    assert plan_staging([], [], force=False) == StagePlan()


@pytest.mark.parametrize(
    "status, bucket",
    [
        (states.COMPLETED, "awaited"),
        (states.RUNNING, "awaited"),
        (states.PENDING, "awaited"),
        (states.RESCHEDULED, "awaited"),
        (states.FAILED, "rerun"),
        (states.KILLED, "rerun"),
        (states.INTERRUPTED, "rerun"),
        (states.STAGED, "resubmit"),
        ("QUEUED", "resubmit"),  # SEML's legacy name of STAGED
    ],
)
def test_existing_document_by_status(status, bucket):
    existing = doc(41, status)
    plan = plan_staging(["h"], [existing], force=False)
    assert plan.new == []
    assert plan.existing == {0: existing}
    assert plan.rerun == ([0] if bucket == "rerun" else [])
    assert plan.resubmit == ([0] if bucket == "resubmit" else [])


def test_all_states_are_classified():
    """Every SEML state lands in exactly one of awaited / rerun / resubmit."""
    for status in states.ALL:
        plan = plan_staging(["h"], [doc(1, status)], force=False)
        assert 0 in plan.existing
        assert (0 in plan.rerun) + (0 in plan.resubmit) <= 1


def test_mixed_sweep():
    found = [
        doc(10, states.COMPLETED, "done"),
        doc(11, states.FAILED, "failed"),
        doc(12, states.STAGED, "staged"),
    ]
    plan = plan_staging(["fresh", "done", "failed", "staged", "fresh2"], found, force=False)
    assert plan.new == [0, 4]
    assert {i: d["_id"] for i, d in plan.existing.items()} == {1: 10, 2: 11, 3: 12}
    assert plan.rerun == [2]
    assert plan.resubmit == [3]


@pytest.mark.parametrize("status", [states.COMPLETED, states.FAILED, states.STAGED, "QUEUED"])
def test_force_stages_everything_new(status):
    plan = plan_staging(["h", "other"], [doc(5, status)], force=True)
    assert plan.new == [0, 1]
    assert plan.existing == {} and plan.rerun == [] and plan.resubmit == []


def test_force_stages_duplicates_inside_sweep_as_new():
    plan = plan_staging(["h", "h"], [], force=True)
    assert plan.new == [0, 1]


def test_duplicate_hashes_inside_sweep_map_to_one_new_experiment():
    plan = plan_staging(["a", "b", "a", "a"], [], force=False)
    assert plan.new == [0, 1]
    assert set(plan.existing) == {2, 3}
    for index in (2, 3):
        assert plan.existing[index]["_id"] is None
        assert plan.existing[index]["same_as"] == 0
    assert plan.rerun == [] and plan.resubmit == []


@pytest.mark.parametrize("status", [states.COMPLETED, states.FAILED, states.STAGED])
def test_duplicate_hashes_inside_sweep_map_to_one_existing_experiment(status):
    existing = doc(8, status)
    plan = plan_staging(["h", "h"], [existing], force=False)
    assert plan.new == []
    assert {d["_id"] for d in plan.existing.values()} == {8}
    assert set(plan.existing) == {0, 1}


def test_several_documents_with_one_hash_highest_id_wins():
    found = [doc(3, states.COMPLETED), doc(9, states.FAILED), doc(5, states.STAGED)]
    plan = plan_staging(["h"], found, force=False)
    assert plan.existing[0]["_id"] == 9
    assert plan.rerun == [0] and plan.resubmit == []


def test_highest_id_wins_regardless_of_found_order():
    found = [doc(9, states.COMPLETED), doc(3, states.FAILED)]
    plan = plan_staging(["h"], found, force=False)
    assert plan.existing[0]["_id"] == 9
    assert plan.rerun == []


def test_found_documents_with_unrelated_hashes_are_ignored():
    plan = plan_staging(["a"], [doc(1, states.COMPLETED, "zzz")], force=False)
    assert plan.new == [0] and plan.existing == {}


def test_plan_staging_does_not_mutate_found():
    found = [doc(2, "QUEUED"), doc(1, states.FAILED)]
    before = [dict(d) for d in found]
    plan_staging(["h"], found, force=False)
    assert found == before


def test_stage_result_to_submit_is_sorted_and_unique():
    result = StageResult(
        ids=[5, 3, 9, 1],
        batch_id=1,
        new_ids=[9, 5],
        rerun_ids=[3],
        resubmit_ids=[5, 1],
        awaited={},
    )
    assert result.to_submit == [1, 3, 5, 9]


def test_only_a_duplicate_in_the_unique_hash_index_is_another_launchs_point():
    from seml_hydra.launch.stage import is_hash_conflict

    hash_dup = {"code": 11000, "keyPattern": {"config_hash": 1}, "index": 0}
    assert is_hash_conflict(hash_dup)
    assert not is_hash_conflict({**hash_dup, "keyPattern": {"_id": 1}})  # SEML's max + 1 id
    assert not is_hash_conflict({"code": 121, "index": 0})  # a validation error
