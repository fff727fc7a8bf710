"""What one save of the Sacred run sends (seml_hydra.job.heartbeat): the new
output as a chunk whose append gives exactly the captured_out Sacred holds, below and above the
cap, and only the changed fields. The server's side of the append (the update pipeline) is
checked against the same function in tests/service/test_heartbeat_bytes.py."""

from __future__ import annotations

import datetime
import random

import pytest

from seml_hydra.job.heartbeat import (
    DROPPED_MARKER,
    appended,
    bounded_output,
    next_heartbeat,
    output_chunk,
    save_update,
    snapshot,
)

CAP = 1000
T0 = datetime.datetime(2026, 12, 1, 12, 0, 0, 123456)


def sacred_beats(pieces: list[str], cap: int = CAP) -> list[str]:
    """captured_out at each beat as Sacred computes it: the filter applied to its last result
    followed by the new output (sacred/run.py, ``_get_captured_output``)."""
    out, beats = "", []
    for piece in pieces:
        out = bounded_output(out + piece, cap)
        beats.append(out)
    return beats


def random_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("abcdefgh\n") for _ in range(n))


@pytest.mark.parametrize(
    "kind",
    ["random", "one line repeated", "long pieces", "empty beats", "unicode"],
)
def test_each_beat_sends_a_chunk_no_longer_than_the_new_output_and_the_append_is_exact(kind):
    rng = random.Random(kind)
    if kind == "random":
        pieces = [random_text(rng, rng.randint(0, 400)) for _ in range(40)]
    elif kind == "one line repeated":
        pieces = ["step ok\n" * rng.randint(0, 60) for _ in range(40)]
    elif kind == "long pieces":  # more than the cap between two beats
        pieces = [random_text(rng, rng.choice([50, 900, 1500, 3000])) for _ in range(20)]
    elif kind == "empty beats":
        pieces = ["", "abc", "", "", random_text(rng, 1200), "", "x"]
    else:
        pieces = [
            "".join(rng.choice(["é", "日本", "🙂", "a\n"]) for _ in range(rng.randint(0, 300)))
            for _ in range(30)
        ]
    beats = sacred_beats(pieces)
    stored = ""
    for piece, new in zip(pieces, beats, strict=True):
        chunk = output_chunk(stored, new, CAP)
        if chunk is None:  # only when (about) the cap or more came since the last beat
            assert len(piece) > CAP * 3 // 4
        else:
            assert appended(stored, chunk, CAP) == new
            assert len(chunk) <= len(piece)
        stored = new
    assert beats[-1] == bounded_output("".join(pieces), CAP)


def test_the_chunk_above_the_cap_is_the_new_output_and_the_result_keeps_the_marker():
    first = bounded_output("a" * 600 + "b" * 600, CAP)
    assert first.startswith(DROPPED_MARKER) and len(first) == len(DROPPED_MARKER) + CAP
    new = bounded_output(first + "0123456789", CAP)
    chunk = output_chunk(first, new, CAP)
    assert chunk == "0123456789"
    below = "x" * 995
    just_above = bounded_output(below + "yyyyyyyyyy", CAP)
    assert output_chunk(below, just_above, CAP) == "yyyyyyyyyy"


def test_one_pattern_repeated_beyond_the_candidates_is_sent_whole_and_never_wrongly():
    """Runs of a 2-character pattern longer than the probes at both ends of the overlap: no
    candidate checks within PROBE_TRIES, so the new output is sent whole (None), never a chunk
    that would store something else."""
    old = bounded_output("日本" * 700 + "a\n" * 250, CAP)
    new = bounded_output(old + "a\n" * 40, CAP)
    assert old.endswith("日本" * 250 + "a\n" * 250)
    assert output_chunk(old, new, CAP) is None
    after_a_line = bounded_output(old + "done\n", CAP)  # the end is no longer one pattern
    assert output_chunk(old, after_a_line, CAP) == "done\n"


def test_output_that_is_no_continuation_is_sent_whole():
    assert output_chunk("abc", "xyz", CAP) is None
    assert output_chunk("abcdef", "abc", CAP) is None
    assert output_chunk(DROPPED_MARKER + "q" * CAP, DROPPED_MARKER + "z" * CAP, CAP) is None


def entry(**changes):
    base = {
        "_id": 7,
        "status": "RUNNING",
        "host": {"hostname": "node1", "cpu": "x" * 500},
        "experiment": {"name": "app", "sources": [["a.py", "id"]]},
        "info": {},
        "captured_out": "",
        "heartbeat": T0,
        "result": None,
    }
    return {**base, **changes}


def test_the_first_save_and_an_unknown_server_state_send_the_whole_entry():
    update, guard = save_update(None, entry())
    assert update == {"$set": entry()} and guard == {}


def test_a_beat_sends_only_changed_fields_plus_status_and_heartbeat():
    stored = snapshot(entry())
    beat = T0 + datetime.timedelta(seconds=10)
    update, guard = save_update(stored, entry(heartbeat=beat))
    assert update == {"$set": {"status": "RUNNING", "heartbeat": beat}}
    assert guard == {"heartbeat": T0}
    update, _ = save_update(stored, entry(heartbeat=beat, info={"metrics": [{"name": "m"}]}))
    assert update["$set"]["info"] == {"metrics": [{"name": "m"}]}
    assert "host" not in update["$set"] and "experiment" not in update["$set"]


def test_new_output_is_an_append_guarded_by_the_last_stored_heartbeat():
    stored = snapshot(entry(captured_out="x" * 800))
    beat = T0 + datetime.timedelta(seconds=10)
    update, guard = save_update(stored, entry(captured_out="x" * 800 + "$new\n", heartbeat=beat))
    assert guard == {"heartbeat": T0}
    [stage] = update
    fields = stage["$set"]
    assert fields["heartbeat"] == {"$literal": beat}
    assert fields["status"] == {"$literal": "RUNNING"}
    assert set(fields) == {"heartbeat", "status", "captured_out"}
    assert "x" * 800 not in repr(fields)  # the stored output is not sent again
    assert {"$literal": "$new\n"} in fields["captured_out"]["$let"]["vars"]["text"]["$concat"]


def test_an_append_without_a_new_heartbeat_at_the_millisecond_is_sent_whole():
    stored = snapshot(entry(captured_out="abc"))
    same_ms = T0.replace(microsecond=123999)
    update, guard = save_update(stored, entry(captured_out="abcdef", heartbeat=same_ms))
    assert guard == {"heartbeat": T0} and update["$set"]["captured_out"] == "abcdef"


def test_without_update_pipelines_new_output_is_sent_whole():
    stored = snapshot(entry(captured_out="abc"))
    beat = T0 + datetime.timedelta(seconds=10)
    update, guard = save_update(stored, entry(captured_out="abcdef", heartbeat=beat), append=False)
    assert guard == {"heartbeat": T0} and update["$set"]["captured_out"] == "abcdef"


def test_a_partial_save_is_guarded_by_the_stored_heartbeat_a_null_one_too():
    """A save of only the changed fields is right only on a document that still holds the
    last save: a document rewritten meanwhile (SEML 0.5.7's reset keeps only SEML's fields)
    must not match, else the run ends without start_time, host and its earlier output."""
    beat = T0 + datetime.timedelta(seconds=10)
    _, guard = save_update(snapshot(entry()), entry(heartbeat=beat, info={"a": 1}))
    assert guard == {"heartbeat": T0}
    _, guard = save_update(snapshot(entry(heartbeat=None)), entry(heartbeat=beat))
    assert guard == {"heartbeat": {"$type": "null"}}  # Sacred's first save: null, not missing


def test_a_snapshot_does_not_follow_later_changes_in_place():
    live = entry(info={"metrics": []})
    stored = snapshot(live)
    live["info"]["metrics"].append({"name": "loss"})  # Sacred's log_metrics does this
    update, _ = save_update(stored, {**live, "heartbeat": T0 + datetime.timedelta(seconds=1)})
    assert update["$set"]["info"] == {"metrics": [{"name": "loss"}]}


def test_the_final_heartbeat_moves_on_by_at_least_a_millisecond():
    assert next_heartbeat(T0, T0 + datetime.timedelta(seconds=3)) == T0.replace(
        microsecond=123000
    ) + datetime.timedelta(seconds=3)
    assert next_heartbeat(T0, T0) == T0.replace(microsecond=124000)
    assert next_heartbeat(None, T0) == T0.replace(microsecond=123000)
