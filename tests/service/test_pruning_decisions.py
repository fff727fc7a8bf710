"""``seml_hydra.report``'s decisions against a real MongoDB, without Slurm: the median rule reads
only the launch's experiments that COMPLETED unpruned, a stop is recorded and sticks, other
ranks take the primary's answer from the document, a requeued primary gives its earlier
answers again. (The run step binds the experiment; here the test does, as
``seml_hydra.job.runner`` would.)"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from seml_hydra.job import pruning

MEDIAN = {"rule": "median", "metric": "loss", "mode": "min"}
ASHA = {"rule": "asha", "metric": "loss", "mode": "min"}


def completed(exp_id, values, batch_id=1, **fields):
    return {
        "_id": exp_id,
        "batch_id": batch_id,
        "status": "COMPLETED",
        "pruning": {"values": {str(s): v for s, v in values.items()}},
        **fields,
    }


@pytest.fixture
def bind(test_db):
    def bind_one(doc, pruner, primary=True, world_size=1):
        test_db["c"].insert_one(doc)
        plan = SimpleNamespace(is_primary=primary, world_size=world_size)
        pruning.bind(test_db["c"], doc, pruner, plan, {})
        return test_db["c"]

    yield bind_one
    pruning.unbind()


def test_median_compares_with_the_launchs_unpruned_completed_experiments(test_db, bind):
    test_db["c"].insert_many(
        [completed(i, {1: 1.0, 2: 0.1 if i <= 3 else 0.9}) for i in range(1, 6)]
        + [completed(6, {1: 9.0, 2: 9.0}, pruned={"step": 2, "value": 9.0, "rule": "median"})]
        + [completed(7, {1: 9.0, 2: 9.0}, batch_id=2)]
    )
    coll = bind({"_id": 10, "batch_id": 1, "status": "RUNNING"}, MEDIAN)
    assert pruning.report("loss", 0.9, 1) is False  # better than the median 1.0
    assert pruning.report("acc", 99.0, 2) is False  # another metric: logged, not judged
    # best 0.3, median 0.1 (0.5 if the pruned one or the other launch's counted)
    assert pruning.report("loss", 0.3, 2) is True
    assert coll.find_one({"_id": 10})["pruned"] == {"step": 2, "value": 0.3, "rule": "median"}
    assert coll.find_one({"_id": 10})["pruning"]["values"] == {"1": 0.9, "2": 0.3}
    assert pruning.report("loss", 0.1, 3) is True  # stopped: stays stopped


def test_median_decides_nothing_before_min_experiments_completed(test_db, bind):
    test_db["c"].insert_many([completed(i, {1: 0.1}) for i in range(1, 5)])  # 4 of 5
    bind({"_id": 10, "batch_id": 1, "status": "RUNNING"}, MEDIAN)
    assert pruning.report("loss", 5.0, 1) is False


def test_asha_compares_with_the_rung_values_of_the_launch(test_db, bind):
    rungs = {"values": {"1": 1.0}, "rungs": {"0": 1.0}}
    test_db["c"].insert_many(
        [
            {"_id": 1, "batch_id": 1, "status": "RUNNING", "pruning": rungs},
            {"_id": 2, "batch_id": 1, "status": "COMPLETED", "pruning": rungs},
            {"_id": 3, "batch_id": 2, "status": "COMPLETED", "pruning": {"rungs": {"0": 9.0}}},
        ]
    )
    coll = bind({"_id": 10, "batch_id": 1, "status": "RUNNING"}, ASHA)
    assert pruning.report("loss", 2.0, 1) is True  # 3 at rung 0: only the best goes on
    assert coll.find_one({"_id": 10})["pruning"]["rungs"] == {"0": 2.0}


def test_another_rank_takes_the_primarys_answer_from_the_document(test_db, bind):
    doc = {"_id": 10, "batch_id": 1, "status": "RUNNING", "pruning": {"decisions": {"1": False}}}
    coll = bind(doc, ASHA, primary=False, world_size=2)
    assert pruning.report("loss", 99.0, 1) is False  # the primary's answer, not its own
    coll.update_one({"_id": 10}, {"$set": {"pruning.decisions.2": True}})
    assert pruning.report("loss", 0.0, 2) is True
    # no answer and the experiment is over (the primary died): stop, do not wait forever
    coll.update_one({"_id": 10}, {"$set": {"status": "FAILED"}})
    assert pruning.report("loss", 0.0, 3) is True


def test_a_requeued_primary_gives_its_earlier_answers_again(test_db, bind):
    test_db["c"].insert_many(
        [
            {"_id": i, "batch_id": 1, "status": "COMPLETED", "pruning": {"rungs": {"0": 0.0}}}
            for i in (1, 2)
        ]
    )
    doc = {"_id": 10, "batch_id": 1, "status": "RUNNING", "pruning": {"decisions": {"1": False}}}
    bind(doc, ASHA, world_size=2)
    assert pruning.report("loss", 5.0, 1) is False  # the rule alone would stop it now


def test_report_with_no_pruner_logs_and_goes_on(test_db, bind):
    coll = bind({"_id": 10, "batch_id": 1, "status": "RUNNING"}, None)
    assert pruning.report("loss", 5.0, 1) is False
    assert "pruning" not in coll.find_one({"_id": 10})
    with pytest.raises(TypeError, match="step=1.5 must be an integer"):
        pruning.report("loss", 5.0, 1.5)
