"""``store.server.mongod.log_tail`` keeps the error in view when mongod aborts with a backtrace (CI,
session 6: the embedded server's port was taken, the tail showed 8 stack frames, and
``start_on_free_port`` did not see "Address already in use", so it gave up instead of trying
another port)."""

import json

from seml_hydra.store.server.mongod import log_tail


def _line(msg, attr=None, severity="I"):
    entry = {"t": {"$date": "2026-12-01T19:23:24.000+00:00"}, "s": severity, "msg": msg}
    if attr is not None:
        entry["attr"] = attr
    return json.dumps(entry)


def test_the_listener_error_stays_in_view_past_the_backtrace(tmp_path):
    log = tmp_path / "mongod.log"
    old = _line("an earlier run's message") + "\n"
    lines = [
        _line("Waiting for connections", {"port": 27020}),
        _line("Error setting up listener", {"error": "Address already in use"}, "E"),
        _line("Fatal assertion", {"msgid": 40486}, "F"),
        _line("\n\n***aborting after fassert() failure\n\n", severity="F"),
        _line("BACKTRACE", {"bt": {"backtrace": [{"a": "7F"}] * 30}}),
        *[_line("Frame", {"frame": {"a": f"7F{i:02X}"}}) for i in range(30)],
    ]
    log.write_text(old + "\n".join(lines) + "\n")
    tail = log_tail(log, len(old))
    assert "Address already in use" in tail
    assert "Frame" not in tail and "earlier run" not in tail


def test_at_most_the_last_lines_messages(tmp_path):
    log = tmp_path / "mongod.log"
    log.write_text("\n".join(_line(f"m{i}") for i in range(20)) + "\n")
    assert log_tail(log, 0, lines=3).split("\n  ") == ["m17", "m18", "m19"]
