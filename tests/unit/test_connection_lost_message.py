"""The launcher's message when MongoDB is lost mid-launch (attacker finding, session 6: it said
"what was already submitted keeps running" when nothing had been, and named no STAGED leftovers)."""

from seml_hydra.launch.launcher import connection_lost_message


def test_before_staging_nothing_was_stored():
    text = connection_lost_message("col", "connection refused", staging_started=False)
    assert "(connection refused)" in text
    assert "Nothing was stored or submitted" in text
    assert "keeps running" not in text and "keep running" not in text


def test_after_staging_started_the_staged_ones_and_how_to_submit_them():
    """A relaunch stages the points not stored yet and submits all without duplicates; `seml
    start` alone would run part of the sweep (attacker finding, session 7: 30,000 of 100,000
    points were stored and the message advised `seml start`)."""
    text = connection_lost_message("col", "timed out", staging_started=True)
    assert "stay STAGED" in text
    assert "launch the same sweep again" in text
    assert "`seml col status`" in text
    assert "`seml col start` would submit only the points stored so far" in text
