"""``job.failures.ranks_outcome``: rank 0 of a multi-task run judges only its own run's ranks."""

from seml_hydra.job.failures import in_run, ranks_outcome


def test_a_failure_of_an_earlier_run_does_not_fail_a_requeued_run():
    doc = {
        "rank_failures": [{"rank": 1, "restart": 0, "trace": "old"}],
        "rank_ends": [{"rank": 1, "restart": 1, "outcome": "COMPLETED"}],
    }
    assert ranks_outcome(doc, world_size=2, restart=1) == ([], True)
    assert ranks_outcome(doc, world_size=2, restart=0) == ([1], False)


def test_a_failure_of_this_run_counts_and_one_without_a_restart_counts_for_every_run():
    assert in_run({"rank": 1, "restart": 2}, 2)
    assert not in_run({"rank": 1, "restart": 0}, 2)
    assert in_run({"rank": 1}, 2)  # recorded before runs were told apart
    doc = {"rank_failures": [{"rank": 3, "restart": 1}], "rank_ends": []}
    assert ranks_outcome(doc, world_size=4, restart=1) == ([3], False)
