"""The pure parts of riding out a MongoDB outage: the retry helper's
backoff and budget, multi-host URIs, metrics kept for the next heartbeat (the outages
themselves: tests/service/test_db_outage.py)."""

from __future__ import annotations

import logging

import pytest

# --------------------------------------------------------------------------- pure units


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def failing(errors: list[BaseException], clock: FakeClock, cost_s: float = 5.0):
    """An operation that raises ``errors`` one per call (each costing ``cost_s`` seconds, a
    server selection timeout), then returns ``"done"``."""
    calls = []

    def operation() -> str:
        calls.append(clock.now)
        if errors:
            clock.now += cost_s
            raise errors.pop(0)
        return "done"

    return operation, calls


def test_retrying_rides_out_connection_errors_with_backoff_and_one_log_line_each(caplog):
    from pymongo.errors import AutoReconnect, NetworkTimeout, ServerSelectionTimeoutError

    from seml_hydra.store.db.retry import retrying

    clock = FakeClock()
    errors = [ServerSelectionTimeoutError("h:1: refused"), AutoReconnect("x"), NetworkTimeout("y")]
    operation, calls = failing(errors, clock)
    seen = []
    with caplog.at_level(logging.WARNING, logger="seml_hydra.store.db.retry"):
        result = retrying(
            operation,
            "saving X",
            budget_s=300,
            on_retry=lambda n, e, waited: seen.append((n, type(e).__name__, waited)),
            sleep=clock.sleep,
            clock=clock,
        )
    assert result == "done" and len(calls) == 4
    assert clock.sleeps == [0.5, 1.0, 2.0]
    assert [n for n, _, _ in seen] == [1, 2, 3]
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == 3 and all("saving X" in m for m in retries)
    assert "h:1: refused" in retries[0]
    assert any("reachable again" in r.getMessage() for r in caplog.records)


def test_retrying_gives_up_after_its_budget_and_raises_the_connection_error():
    from pymongo.errors import ServerSelectionTimeoutError

    from seml_hydra.store.db.retry import retrying

    clock = FakeClock()
    errors = [ServerSelectionTimeoutError("down")] * 1000
    operation, calls = failing(list(errors), clock)
    with pytest.raises(ServerSelectionTimeoutError):
        retrying(operation, "x", budget_s=60, sleep=clock.sleep, clock=clock)
    assert 60 <= clock.now <= 60 + 5  # stopped once the budget was spent (+ the last try)
    assert max(clock.sleeps) <= 10.0  # capped backoff


def test_retrying_does_not_retry_other_errors_nor_with_a_zero_budget():
    from pymongo.errors import AutoReconnect, DuplicateKeyError

    from seml_hydra.store.db.retry import retrying

    clock = FakeClock()
    operation, calls = failing([DuplicateKeyError("dup")], clock)
    with pytest.raises(DuplicateKeyError):
        retrying(operation, "x", budget_s=300, sleep=clock.sleep, clock=clock)
    assert len(calls) == 1 and clock.sleeps == []
    operation, calls = failing([AutoReconnect("down")], clock)
    with pytest.raises(AutoReconnect):
        retrying(operation, "x", budget_s=0, sleep=clock.sleep, clock=clock)
    assert len(calls) == 1 and clock.sleeps == []


def test_retry_budget_comes_from_the_environment_and_a_bad_value_is_one_clear_error():
    from seml_hydra.store.db.retry import DEFAULT_RETRY_S, retry_budget_s
    from seml_hydra.store.errors import DatabaseError

    assert retry_budget_s({}) == DEFAULT_RETRY_S == 300
    assert retry_budget_s({"SEML_MONGODB_RETRY_S": "42.5"}) == 42.5
    assert retry_budget_s({"SEML_MONGODB_RETRY_S": "0"}) == 0
    for bad in ("-1", "soon", "nan", "inf"):
        with pytest.raises(DatabaseError, match="SEML_MONGODB_RETRY_S=.* seconds >= 0"):
            retry_budget_s({"SEML_MONGODB_RETRY_S": bad})


def test_a_multi_host_uri_is_accepted_and_every_host_is_checked():
    from seml_hydra.store.db.settings import resolve_db_settings
    from seml_hydra.store.errors import DatabaseError

    url = "mongodb://127.0.0.1:27018,127.0.0.1:27019,127.0.0.1:27020/db?replicaSet=rs"
    settings = resolve_db_settings({"url": url}, env={})
    assert (settings.host, settings.port, settings.database) == ("127.0.0.1", 27018, "db")
    assert settings.server() == "127.0.0.1:27018,127.0.0.1:27019,127.0.0.1:27020"
    with pytest.raises(DatabaseError, match="bad port 'x'"):
        resolve_db_settings({"url": "mongodb://127.0.0.1:1,127.0.0.1:x/db"}, env={})
    with pytest.raises(DatabaseError, match="empty host"):
        resolve_db_settings({"url": "mongodb://127.0.0.1:1,,127.0.0.1:2/db"}, env={})


def test_metrics_kept_for_the_next_heartbeat_are_sent_before_the_new_ones():
    from seml_hydra.job.observer import _merge_metrics

    earlier = {"loss": {"steps": [0, 1], "values": [1.0, 0.5], "timestamps": ["a", "b"]}}
    later = {
        "loss": {"steps": [2], "values": [0.25], "timestamps": ["c"]},
        "acc": {"steps": [2], "values": [0.9], "timestamps": ["c"]},
    }
    merged = _merge_metrics(earlier, later)
    assert merged["loss"] == {"steps": [0, 1, 2], "values": [1.0, 0.5, 0.25],
                              "timestamps": ["a", "b", "c"]}  # fmt: skip
    assert merged["acc"] == later["acc"]
    assert _merge_metrics(None, later) == later
