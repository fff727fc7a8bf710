"""The pure parts of ``track.census`` (reading index keys back as queries and documents, ids as
ranges) and ``core.ranges.format_ids`` 's fast path."""

from __future__ import annotations

import random

import pytest

from seml_hydra.core.ranges import format_ids
from seml_hydra.track import census
from seml_hydra.track.jobs import array_of, task_of

KEY = ("PENDING", None, 7799, 3, "semltest", "7799_3", 8, None)


def test_key_values_read_a_covered_projection_and_refuse_other_types():
    doc = {
        "status": "PENDING",
        "seml": {"description": None},
        "slurm": {"0": {"array_id": 7799, "task_id": 3, "cluster": "semltest"}},
        "execution": {"array_id": None},
        "_id": 1,
    }
    assert census.key_values(doc) == ("PENDING", None, 7799, 3, "semltest", None, None, None)
    for odd in (7799.0, True, [7799], {"a": 1}):
        bad = {**doc, "slurm": {"0": {"array_id": odd}}}
        with pytest.raises(census.Unplain):
            census.key_values(bad)
    with pytest.raises(census.Unplain):  # a fetched (not covered) document: slurm is a list
        census.key_values({**doc, "slurm": [{"array_id": 7799}]})


def test_key_filter_reads_a_key_back_by_equality():
    query = census.key_filter(KEY)
    assert query["slurm.0.array_id"] == 7799 and query["slurm.0.task_id"] == 3
    assert query["status"] == "PENDING" and query["execution.array_id"] is None
    assert list(census.key_filter(KEY[:2])) == ["status", "seml.description"]
    with pytest.raises(census.Unplain):
        census.key_filter(("PENDING", 1.5))


def test_key_document_is_what_the_decisions_read_of_each_experiment():
    doc = census.key_document(KEY, _id=4)
    assert doc == {
        "status": "PENDING",
        "slurm": [
            {
                "array_id": 7799,
                "task_id": 3,
                "cluster": "semltest",
                "job_id": "7799_3",
                "num_tasks": 8,
            }
        ],
        "_id": 4,
    }
    assert task_of(doc) == ("semltest", "7799_3") and array_of(doc) is None
    seml = census.key_document(("PENDING", "d", 12, None, None, None, 2, None))
    assert seml["seml"] == {"description": "d"}
    assert task_of(seml) is None and array_of(seml) == "12"
    claimed = census.key_document((*KEY[:-1], 9000))
    assert claimed["execution"] == {"array_id": 9000}
    # an execution block without a cluster takes the submission's
    assert task_of(claimed) == ("semltest", "9000_0")


def test_id_block_and_tiles_give_ranges_only_for_exact_integer_spans():
    assert census.id_block(1, 5, 5, 5) == range(1, 6)
    assert census.id_block(1, 5, 4, 4) is None  # a gap
    assert census.id_block(1, 5, 5, 4) is None  # one id is not an integer
    assert census.id_block("a", 5, 5, 5) is None
    assert census.tiles([(1, 3), (4, 10)], 10) == [range(1, 4), range(4, 11)]
    assert census.tiles([(4, 10), (1, 3)], 10) == [range(4, 11), range(1, 4)]
    assert census.tiles([(1, 3), (4, 10)], 9) is None  # a gap somewhere
    assert census.tiles([(1, 5), (4, 10)], 10) is None  # overlapping spans
    assert census.tiles([(1, 3), (4, "z")], 10) is None
    assert census.tiles([(1, 3), (5, 4)], 3) is None


def test_format_ids_of_integers_is_the_runs_whatever_the_order():
    rng = random.Random(7)
    for _ in range(200):
        ids = rng.sample(range(1, 60), rng.randrange(0, 40))
        ids += ids[: rng.randrange(0, 3)]  # repeats
        runs, prev = [], None
        for value in sorted(set(ids)):
            if prev is not None and value == prev + 1:
                runs[-1][1] = value
            else:
                runs.append([value, value])
            prev = value
        expected = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
        assert format_ids(ids) == expected
        assert format_ids(iter(ids)) == expected
    assert format_ids(range(1, 100_001)) == "1-100000"
    assert format_ids([3, True, 1, 2, "x"]) == "1-3, 'x', True"


def test_plain_bson_refuses_undefined_and_other_types_but_not_any_id():
    import bson
    from bson.int64 import Int64
    from bson.objectid import ObjectId

    entry = {"status": "PENDING", "slurm": {"0": {"array_id": Int64(7), "task_id": None}}}
    for exp_id in (1, "x", ObjectId(), 1.5, {"a": 1}):
        assert census.plain_bson(bson.encode({**entry, "_id": exp_id}))
    for odd in (1.5, True, [1], bson.MinKey()):
        assert not census.plain_bson(bson.encode({**entry, "seml": {"description": odd}}))
    # BSON undefined (0x06), which pymongo decodes as None: a document {"a": undefined}
    undefined = b"\x08\x00\x00\x00\x06a\x00\x00"
    assert bson.decode(undefined) == {"a": None}
    assert not census.plain_bson(undefined)
    assert census.plain_bson(b"\x08\x00\x00\x00\x0aa\x00\x00")  # {"a": null}
