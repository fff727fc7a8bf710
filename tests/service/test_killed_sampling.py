"""The sampled KILLED marking (``track.killed.sampled_groups``) against documents the path that
reads the documents takes (found by an outside tester)."""

from __future__ import annotations

import pytest
from support.mongo import statuses
from support.slurm import dead_array

pytestmark = pytest.mark.slurm


@pytest.fixture
def dead(slurm):
    """``(array, cluster)``: a held array of 2 tasks cancelled before it started."""
    from seml_hydra.slurm import client

    return dead_array(2), client.cluster_name()


def test_a_sampled_key_with_a_date_python_cannot_hold_is_judged_as_the_documents(dead, test_db):
    """100 PENDING experiments of a dead task whose ``seml`` block holds, beside what the
    decisions read, a date beyond year 9999 (a BSON datetime Python's ``datetime`` cannot
    hold: written by another tool, or a forged document). The path that reads the documents
    groups them by the fields it judges (``seml.output_dir``...) and marks all 100 KILLED, as
    it does for a key of 10. The census path reads its sample with whole top-level blocks
    (``track.groups.JUDGED_FIELDS``: ``seml``, ``slurm``, ``execution``, ``host``...), pymongo
    cannot decode the date, and ``status`` fails with ``InvalidBSON``: nothing is marked."""
    from bson.datetime_ms import DatetimeMS

    from seml_hydra.store.db.collections import CENSUS_INDEX, ensure_job_indexes
    from seml_hydra.track import census
    from seml_hydra.track.killed import detect_killed

    array, here = dead
    first = {
        "array_id": array,
        "task_id": 0,
        "job_id": f"{array}_0",
        "num_tasks": 2,
        "cluster": here,
    }
    docs = [
        {
            "_id": i,
            "status": "PENDING",
            "seml": {"output_dir": "/nonexistent", "added": DatetimeMS(2**62)},
            "slurm": [dict(first)],
        }
        for i in range(1, 101)
    ]
    indexed, plain = test_db["bad_date"], test_db["bad_date_plain"]
    for coll in (indexed, plain):
        coll.insert_many([dict(d) for d in docs])
        ensure_job_indexes(coll)
    plain.drop_index(CENSUS_INDEX)
    assert census.covered(indexed) and not census.covered(plain)
    assert detect_killed(plain).killed == list(range(1, 101))
    assert detect_killed(indexed).killed == list(range(1, 101))
    assert set(statuses(indexed).values()) == {"KILLED"}
