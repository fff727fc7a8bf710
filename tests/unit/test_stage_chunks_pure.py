"""Staging in chunks, the pure parts: ``stage.chunked`` / ``stage_chunk_size``, duplicates told
across chunks (``stage.plan_chunk`` with the launch's ``seen`` hashes), the submission's groups
built chunk by chunk (``submit.RequestGroups``). The composition streamed chunk by chunk
(``compose.iter_point_chunks``) is tested in ``test_compose.py``. No MongoDB, no Slurm."""

from __future__ import annotations

import itertools

import pytest
from conftest import launcher

from seml_hydra.core import states
from seml_hydra.launch.stage import STAGE_CHUNK, chunked, plan_chunk, stage_chunk_size
from seml_hydra.launch.submit import RequestGroups, SubmitRequest, group_requests


def doc(exp_id, status, h="h"):
    return {"_id": exp_id, "status": status, "config_hash": h}


# -- chunked / stage_chunk_size ------------------------------------------------------------------
def test_chunked_cuts_in_order_with_a_short_last_chunk():
    assert list(chunked(range(7), 3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert list(chunked([], 3)) == []
    assert list(chunked(range(3), 3)) == [[0, 1, 2]]


def test_chunked_takes_the_next_items_only_when_asked():
    taken = []

    def items():
        for i in itertools.count():
            taken.append(i)
            yield i

    parts = chunked(items(), 2)
    assert next(parts) == [0, 1]
    assert taken == [0, 1]  # nothing beyond the first chunk was drawn
    assert next(parts) == [2, 3]
    assert taken == [0, 1, 2, 3]


def test_chunked_refuses_a_size_below_one():
    with pytest.raises(ValueError, match="at least 1"):
        next(chunked(range(3), 0))


@pytest.mark.parametrize(
    "value, expected",
    [(None, STAGE_CHUNK), ("", STAGE_CHUNK), ("7", 7), ("0", STAGE_CHUNK), ("x", STAGE_CHUNK)],
)
def test_stage_chunk_size_reads_a_positive_integer_from_the_environment(value, expected):
    environ = {} if value is None else {"SEML_HYDRA_STAGE_CHUNK": value}
    assert stage_chunk_size(environ) == expected


# -- duplicates across chunks --------------------------------------------------------------------
def plan_in_chunks(hashes, found, size, force=False):
    """Plan ``hashes`` chunk by chunk as ``Stager`` does; ``found(chunk hashes)`` gives each
    chunk's documents. Returns the per-chunk plans."""
    seen: dict = {}
    return [
        plan_chunk(part, found(part), force, seen, start)
        for start, part in zip(range(0, len(hashes), size), chunked(hashes, size))
    ]


def test_a_repeat_in_a_later_chunk_maps_to_the_new_point_of_an_earlier_chunk():
    first, second = plan_in_chunks(["a", "b", "c", "a", "b"], lambda part: [], 3)
    assert first.new == [0, 1, 2] and first.existing == {}
    assert second.new == []
    assert second.existing == {3: {"_id": None, "same_as": 0}, 4: {"_id": None, "same_as": 1}}


def test_a_later_chunk_does_not_take_this_launchs_own_documents_for_existing_ones():
    # the find of the second chunk returns the document the first chunk inserted for "a"
    inserted = doc(41, states.STAGED, "a")
    calls = []

    def found(part):
        calls.append(part)
        return [inserted] if len(calls) > 1 else []

    first, second = plan_in_chunks(["a", "b", "a"], found, 2)
    assert first.new == [0, 1]
    assert second.existing == {2: {"_id": None, "same_as": 0}}
    assert second.resubmit == [] and second.new == []


def test_an_existing_experiment_repeated_across_chunks_is_one_experiment():
    failed = doc(8, states.FAILED, "h")
    first, second = plan_in_chunks(["h", "x", "h"], lambda part: [failed], 2)
    assert first.existing == {0: failed} and first.rerun == [0]
    assert second.existing == {2: failed}  # the same document, not a new one
    assert second.new == []


def test_force_stages_repeats_across_chunks_as_new():
    first, second = plan_in_chunks(
        ["a", "a", "a"], lambda part: [doc(1, "COMPLETED", "a")], 2, True
    )
    assert first.new == [0, 1] and second.new == [2]


def test_chunked_planning_equals_planning_the_whole_sweep_at_once():
    hashes = ["a", "b", "a", "c", "done", "b", "failed", "done", "d"]
    found = [doc(10, states.COMPLETED, "done"), doc(11, states.FAILED, "failed")]

    def lookup(part):
        return [d for d in found if d["config_hash"] in part]

    whole = plan_chunk(hashes, found, False, {})
    for size in (1, 2, 4):
        plans = plan_in_chunks(hashes, lookup, size)
        assert [i for p in plans for i in p.new] == whole.new
        assert [i for p in plans for i in p.rerun] == whole.rerun
        merged = {i: d for p in plans for i, d in p.existing.items()}
        assert {i: d["_id"] for i, d in merged.items()} == {
            i: d["_id"] for i, d in whole.existing.items()
        }


# -- the submission's groups ---------------------------------------------------------------------
def test_request_groups_built_chunk_by_chunk_equal_grouping_all_requests():
    small, big = launcher(mem_gb=1), launcher(mem_gb=64)
    requests = [
        SubmitRequest(i, node, "payload", 3, "slurm")
        for i, node in enumerate([small, big, dict(small), small, big, dict(big)], start=1)
    ]
    grouped = RequestGroups()
    for part in chunked(requests, 2):
        grouped.add(part)
    assert [(g.first.exp_id, g.exp_ids) for g in grouped.groups] == [(1, [1, 3, 4]), (2, [2, 5, 6])]
    assert [(g.first, g.exp_ids) for g in grouped.groups] == [
        (g.first, g.exp_ids) for g in group_requests(requests)
    ]
    assert len(grouped) == 6


def test_request_groups_keep_batches_and_executors_apart():
    node = launcher()
    grouped = RequestGroups()
    grouped.add([SubmitRequest(1, node, "p", 1, "slurm"), SubmitRequest(2, node, "p", 2, "slurm")])
    grouped.add([SubmitRequest(3, node, "p", 1, "local")])
    assert [g.exp_ids for g in grouped.groups] == [[1], [2], [3]]


def test_popped_requests_leave_their_groups_and_name_their_groups_first_request():
    # points 7 and 9 of this launch were staged by another launch: taken out, with the request
    # (launcher, executor) that stood for them
    small, big = launcher(mem_gb=1), launcher(mem_gb=64)
    grouped = RequestGroups()
    grouped.add([SubmitRequest(i, small, "p", 4, "slurm") for i in (6, 7)])
    grouped.add([SubmitRequest(i, big, "p", 4, "slurm") for i in (8, 9)])
    popped = grouped.pop({7, 9, 11})
    assert {i: r.exp_id for i, r in popped.items()} == {7: 6, 9: 8}
    assert popped[9].launcher is big
    assert [g.exp_ids for g in grouped.groups] == [[6], [8]]
    grouped.pop({6})
    assert [g.exp_ids for g in grouped.groups] == [[8]]


def test_a_full_move_to_pending_needs_no_read_back():
    from types import SimpleNamespace

    from seml_hydra.launch.submit import moved_all

    def result(modified, acknowledged=True):
        return SimpleNamespace(acknowledged=acknowledged, modified_count=modified)

    assert moved_all(result(3), [1, 2, 3])
    assert not moved_all(result(2), [1, 2, 3])  # a concurrent submission took one
    assert moved_all(result(2), [1, 2, 2])  # ids counted once
    assert not moved_all(result(3, acknowledged=False), [1, 2, 3])


def test_fewer_collections_freezes_what_lives_and_still_collects_new_cycles():
    import gc

    from seml_hydra.launch.stage import STAGE_GC_THRESHOLD, fewer_collections

    # a job's start-up run in this worker earlier (job.collector) leaves objects frozen for
    # good, as it does in a job process; this test starts from an unfrozen collector
    gc.unfreeze()
    before = gc.get_threshold()
    gc.collect()
    with fewer_collections():
        assert gc.get_threshold()[0] == max(before[0], STAGE_GC_THRESHOLD)
        assert gc.get_freeze_count() > 0
        for _ in range(3 * STAGE_GC_THRESHOLD):  # cycles made inside are collected
            cycle: list = []
            cycle.append(cycle)
        assert len([o for o in gc.get_objects() if type(o) is list and o and o[0] is o]) < (
            2 * STAGE_GC_THRESHOLD
        )
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_fewer_collections_leaves_a_frozen_collector_alone():
    """Neither frozen again (more objects frozen) nor unfrozen (none): frozen objects that
    die meanwhile (another thread of the worker drops its last reference) leave the count
    lower, which is no change of the collector (a CI run saw 166535 of 166537)."""
    import gc

    from seml_hydra.launch.stage import fewer_collections

    gc.freeze()
    try:
        before, frozen = gc.get_threshold(), gc.get_freeze_count()
        with fewer_collections():
            assert gc.get_threshold() == before
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
