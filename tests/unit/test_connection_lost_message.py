"""The launcher's message when MongoDB is lost mid-launch (attacker finding, session 6: it said
"what was already submitted keeps running" when nothing had been, and named no STAGED leftovers)."""

from seml_hydra.launch.launcher import connection_lost_message


def test_before_staging_nothing_was_stored():
    text = connection_lost_message("col", "connection refused", staging_started=False)
    assert "(connection refused)" in text
    assert "Nothing was stored or submitted" in text
    assert "keeps running" not in text and "keep running" not in text


def test_after_staging_started_the_staged_ones_and_how_to_submit_them():
    text = connection_lost_message("col", "timed out", staging_started=True)
    assert "stay STAGED" in text
    assert "`seml col status`" in text and "`seml col start`" in text
