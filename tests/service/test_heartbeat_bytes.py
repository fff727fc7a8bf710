"""Heartbeat load: a beat of the experiment's Sacred run sends the output
printed since the last beat, not the whole ``captured_out``, and the document still holds the
whole capped output, in order, readable while RUNNING and at the end.

The bytes are MongoDB's own count (``serverStatus`` ``network.bytesIn``) on a mongod of this test
(tests/service/test_db_outage.py's ``PrivateMongod``): nothing else talks to it, so every byte
is this run's. The run is a real Sacred run (``seml_hydra.job.observed.run_observed``, the
primary rank's code path) in this process, its beat interval shortened through Sacred's
``SETTINGS.DEFAULT_BEAT_INTERVAL``. The pure side (chunks, changed fields) is in
tests/unit/test_heartbeat_pure.py; the benchmark is benchmarks/heartbeat_bytes.py.
"""

from __future__ import annotations

import pytest
from support.wait import wait_until

from seml_hydra.job.claim import fence
from seml_hydra.job.heartbeat import (
    DROPPED_MARKER,
    MAX_CAPTURED_CHARS,
    append_expression,
    appended,
    bounded_output,
    save_update,
    snapshot,
)
from seml_hydra.job.observed import run_observed
from seml_hydra.manage.inspection import read_outputs

COLLECTION = "chatty"


def bytes_in(client) -> int:
    return client.admin.command("serverStatus")["network"]["bytesIn"]


CAP = 50
APPENDS = [
    ("", ""),
    ("", "abc"),
    ("abc", "$not a field path"),
    ("x" * 40, "y" * 9),  # just at the cap
    ("x" * 40, "y" * 11),  # across the cap
    ("x" * 40, "z" * 200),  # more than the cap at once
    (bounded_output("q" * 80, CAP), "tail"),  # already cut
    (bounded_output("q" * 80, CAP), ""),
    ("日本🙂" * 10, "é🙂" * 12),  # code points, not bytes
    (DROPPED_MARKER + "short", "!"),  # a marker in front of fewer than CAP characters
]


@pytest.mark.parametrize("stored, chunk", APPENDS)
def test_the_servers_append_stores_what_the_pure_append_computes(private_mongod, stored, chunk):
    runs = private_mongod.direct()["heartbeat_test"]["runs"]
    runs.insert_one({"_id": 1, "captured_out": stored})
    runs.insert_one({"_id": 2})  # no captured_out yet: counts as empty
    for _id, before in ((1, stored), (2, "")):
        runs.update_one({"_id": _id}, [{"$set": {"captured_out": append_expression(chunk, CAP)}}])
        assert runs.find_one({"_id": _id})["captured_out"] == appended(before, chunk, CAP)


def test_an_append_sent_again_after_its_answer_was_lost_matches_nothing(private_mongod):
    """A retried save (the first reached the server, its answer did not) must not append the
    chunk twice: the guard (the heartbeat of the last acknowledged save) no longer matches, so
    the observer sends the whole entry instead (``DocumentObserver._send``)."""
    import datetime

    runs = private_mongod.direct()["heartbeat_test"]["runs"]
    t0 = datetime.datetime(2026, 12, 1, 12, 0, 0)
    stored = {"_id": 1, "status": "RUNNING", "heartbeat": t0, "captured_out": "a\n" * 100}
    runs.insert_one(stored)
    entry = {**stored, "heartbeat": t0 + datetime.timedelta(seconds=10)}
    entry["captured_out"] += "b\n"
    update, guard = save_update(snapshot(stored), entry)
    assert guard == {"heartbeat": t0}
    assert runs.update_one({"_id": 1, **guard}, update).matched_count == 1
    assert runs.update_one({"_id": 1, **guard}, update).matched_count == 0  # the retry
    assert runs.find_one({"_id": 1})["captured_out"] == entry["captured_out"]


def test_a_partial_save_on_a_document_rewritten_meanwhile_matches_nothing(private_mongod):
    """SEML 0.5.7's ``seml <col> reset -s RUNNING`` replaces a running experiment's document
    with SEML's fields only (no ``heartbeat``, ``start_time``, ``host``, ``captured_out``); the
    job's next save must not match it with only the changed fields (the run would end
    COMPLETED without start_time, host, experiment and its earlier output): it matches
    nothing, so the observer sends the whole entry (``DocumentObserver._send``). A null
    stored heartbeat (Sacred's first save) does not match a missing one either."""
    import datetime

    runs = private_mongod.direct()["heartbeat_test"]["reset_runs"]
    t0 = datetime.datetime(2026, 12, 1, 12, 0, 0)
    for beat in (t0, None):
        stored = {"_id": 1, "status": "RUNNING", "heartbeat": beat, "captured_out": "hello\n"}
        stored |= {"start_time": t0, "host": {"hostname": "node1"}}
        runs.delete_many({})
        runs.insert_one(stored)
        runs.replace_one({"_id": 1}, {"status": "STAGED", "config": {}})  # SEML 0.5.7's reset
        entry = {**stored, "heartbeat": t0 + datetime.timedelta(seconds=10)}
        for new in (entry, {**entry, "captured_out": "hello\nbye\n"}):
            update, guard = save_update(snapshot(stored), new)
            assert runs.update_one({"_id": 1, **guard}, update).matched_count == 0


def numbered(start: int, count: int) -> str:
    """``count`` lines of 100 characters, numbered from ``start``: order and loss show."""
    return "".join(f"line {i:09d} " + "y" * 84 + "\n" for i in range(start, start + count))


def test_a_beat_sends_only_the_new_output_and_the_document_holds_it_all_live_and_at_the_end(
    private_mongod, monkeypatch
):
    """A run prints 1.2 MB (more than the 1 MB cap), then 20 KB, then 5 KB and returns. While
    it runs, captured_out is the capped output so far (a string, in order, ``print-output``'s
    tail shows the last line) and the beat that stores the 20 KB brings fewer than 60 KB into
    MongoDB (Sacred's own save sends the whole 1 MB entry again); the final save, fewer than
    60 KB too. At the end, captured_out is exactly the capped output of everything printed."""
    from sacred import SETTINGS

    monkeypatch.setattr(SETTINGS, "DEFAULT_BEAT_INTERVAL", 0.3)
    client = private_mongod.direct()
    db = client["heartbeat_test"]
    runs = db[COLLECTION]
    doc = {
        "_id": 1,
        "status": "RUNNING",
        "config": {"x": 1},
        "seed": 3,
        "seml": {"name": COLLECTION},
        "execution": {"restart": 0},
    }
    runs.insert_one(doc)
    parts = [numbered(0, 12_000), numbered(12_000, 200), numbered(12_200, 50)]
    seen: dict[str, object] = {}

    def stored_end() -> str:
        # only the end of captured_out: the polls themselves stay small requests
        found = runs.find_one(
            {"_id": 1},
            {
                "end": {
                    "$substrCP": [
                        "$captured_out",
                        {"$max": [0, {"$subtract": [{"$strLenCP": "$captured_out"}, 120]}]},
                        120,
                    ]
                }
            },
        )
        return (found or {}).get("end") or ""

    def beat_stored(text: str) -> None:
        last = text.rstrip("\n").rsplit("\n", 1)[-1]
        wait_until(
            f"a beat stores {last[:14]}", lambda: stored_end().endswith(last + "\n"), 60, 0.05
        )

    def task() -> int:
        print(parts[0], end="")
        beat_stored(parts[0])
        live = runs.find_one({"_id": 1})
        seen["live"] = live
        seen["tail"] = read_outputs(runs, {"_id": 1}, tail=2)
        before = bytes_in(client)
        print(parts[1], end="")
        beat_stored(parts[1])
        seen["beat_bytes"] = bytes_in(client) - before
        seen["before_end"] = bytes_in(client)
        print(parts[2], end="")
        return 5

    result = run_observed(db, COLLECTION, doc, task, fence=fence(doc))
    end_bytes = bytes_in(client) - seen["before_end"]

    assert result == 5
    live = seen["live"]
    assert live["status"] == "RUNNING"
    assert live["captured_out"] == bounded_output(parts[0])
    assert live["captured_out"].startswith(DROPPED_MARKER)
    [out] = seen["tail"]
    assert (out.path, out.status) == ("captured_out", "RUNNING")
    assert out.text == "\n".join(parts[0].splitlines()[-2:])
    assert len(parts[1]) == 20_000 and seen["beat_bytes"] < 60_000, seen["beat_bytes"]
    assert end_bytes < 60_000, end_bytes

    final = runs.find_one({"_id": 1})
    assert final["status"] == "COMPLETED"
    assert final["result"] == 5
    assert final["captured_out"] == bounded_output("".join(parts))
    assert len(final["captured_out"]) == len(DROPPED_MARKER) + MAX_CAPTURED_CHARS
    assert final["heartbeat"] >= live["heartbeat"] and final["host"] and final["experiment"]
