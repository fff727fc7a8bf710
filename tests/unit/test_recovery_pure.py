"""``launch.recovery.submitted_since``: an array is a dead or interrupted submission's only when
Slurm's SubmitTime is not before that submission's mark (attacker finding, session 7: a refused
submission cancelled a running array of the same collection, batch and folder in another
database)."""

from datetime import datetime, timedelta, timezone

from seml_hydra.launch.recovery import CLOCK_SLACK_S, submitted_since


def local(moment: datetime) -> str:
    """``moment`` as scontrol prints SubmitTime: local time, whole seconds."""
    return moment.astimezone().replace(tzinfo=None).isoformat(timespec="seconds")


def test_an_array_submitted_after_the_mark_is_the_submissions():
    mark = datetime.now(timezone.utc).replace(microsecond=600_000)
    assert submitted_since({"SubmitTime": local(mark + timedelta(seconds=1))}, mark)
    # the same second, printed without its fraction, and a clock a little behind: still ours
    assert submitted_since({"SubmitTime": local(mark)}, mark)
    slack = timedelta(seconds=CLOCK_SLACK_S - 1)
    assert submitted_since({"SubmitTime": local(mark - slack)}, mark)
    # pymongo's naive UTC datetimes
    assert submitted_since({"SubmitTime": local(mark)}, mark.replace(tzinfo=None))


def test_an_array_submitted_before_the_mark_or_unreadable_is_left_alone():
    mark = datetime.now(timezone.utc)
    earlier = mark - timedelta(seconds=CLOCK_SLACK_S + 60)
    assert not submitted_since({"SubmitTime": local(earlier)}, mark)
    assert not submitted_since({"SubmitTime": "Unknown"}, mark)
    assert not submitted_since({}, mark)
