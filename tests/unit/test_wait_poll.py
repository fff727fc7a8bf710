"""The waiter's pause between two polls (``seml_hydra.launch.wait.poll_pause``): the poll
interval, stretched when counting the states is slow. Pure."""

from __future__ import annotations

from seml_hydra.config import SemlLauncherConf
from seml_hydra.launch.wait import QUERY_SHARE, poll_pause


def test_a_cheap_count_polls_at_the_interval():
    assert poll_pause(0.25, 0.001) == 0.25
    assert poll_pause(5.0, 0.0) == 5.0


def test_a_slow_count_stretches_the_pause_so_counting_stays_a_small_share():
    assert poll_pause(0.25, 0.2) == QUERY_SHARE * 0.2
    assert poll_pause(0.25, 0.2) >= 0.2 * 19  # the count takes at most ~5% of the waiting


def test_the_default_interval_notices_the_end_within_a_quarter_second():
    """hydra-submitit-launcher's ``Job.result`` checks for the result pickle every second."""
    assert SemlLauncherConf().poll_interval_s <= 0.25
