"""Riding out MongoDB outages: run an idempotent operation again, with a growing pause, while
the server is unreachable (a restart, a replica set election, a lost SSH tunnel).

Used by the jobs (claiming, saving results, metrics), a waiting launcher, the submission and
the code snapshots. ``pymongo`` is imported only when an error has to be classified.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping
from typing import TypeVar

from seml_hydra.store.errors import DatabaseError

__all__ = [
    "DEFAULT_RETRY_S",
    "ENV_RETRY",
    "backoff_delay",
    "is_connection_error",
    "retry_budget_s",
    "retrying",
    "short_reason",
]

#: Environment variable: how long (seconds) jobs and a waiting launcher keep retrying an
#: operation while MongoDB is unreachable (:func:`retrying`); 0 turns retrying off.
ENV_RETRY = "SEML_MONGODB_RETRY_S"
#: Default of :data:`ENV_RETRY`: an outage of a few minutes (a restart, a replica set election)
DEFAULT_RETRY_S = 300.0
#: Longest pause between two attempts of :func:`retrying` (seconds)
MAX_RETRY_DELAY_S = 10.0

log = logging.getLogger(__name__)
_T = TypeVar("_T")


def retry_budget_s(env: Mapping[str, str] | None = None) -> float:
    """How long :func:`retrying` keeps trying by default: ``SEML_MONGODB_RETRY_S`` in ``env``
    (``os.environ`` when None), else :data:`DEFAULT_RETRY_S` (300 s).

    Returns:
        Seconds (``>= 0``; 0 means one attempt, no retry).

    Raises:
        DatabaseError: the variable is set to something else than a non-negative number.
    """
    env = os.environ if env is None else env
    raw = env.get(ENV_RETRY, "").strip()
    if not raw:
        return DEFAULT_RETRY_S
    try:
        value = float(raw)
        if not value >= 0 or value == float("inf"):
            raise ValueError
    except ValueError:
        raise DatabaseError(
            f"{ENV_RETRY}={raw!r} is not a number of seconds >= 0; set it to e.g. 300 "
            "(how long to retry while MongoDB is unreachable) or unset it."
        ) from None
    return value


def is_connection_error(error: BaseException) -> bool:
    """True for an error that says MongoDB could not be reached, not that the operation was
    wrong: pymongo's ``ConnectionFailure`` family (``AutoReconnect``,
    ``ServerSelectionTimeoutError``, ``NetworkTimeout``, ``NotPrimaryError`` during a replica set
    election, ...) and any error labelled ``RetryableWriteError`` by the server. Pure."""
    from pymongo import errors  # lazy: pymongo is slow to import (job and CLI start-up)

    if isinstance(error, errors.ConnectionFailure):
        return True
    return isinstance(error, errors.PyMongoError) and error.has_error_label("RetryableWriteError")


def backoff_delay(attempt: int, cap_s: float = MAX_RETRY_DELAY_S) -> float:
    """Pause (seconds) before retry number ``attempt`` (1, 2, ...): 0.5, 1, 2, 4, 8, then
    ``cap_s``. Pure."""
    return min(cap_s, 0.5 * 2.0 ** max(0, attempt - 1))


def short_reason(error: BaseException) -> str:
    """pymongo's error message without its long topology description (e.g.
    ``"127.0.0.1:27017: [Errno 111] Connection refused"``). Pure."""
    return str(error).split(", Timeout:")[0].split(" (configured timeouts")[0]


def retrying(
    operation: Callable[[], _T],
    what: str,
    *,
    budget_s: float | None = None,
    on_retry: Callable[[int, BaseException, float], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> _T:
    """Run ``operation()`` and, while it fails because MongoDB is unreachable
    (:func:`is_connection_error`), run it again with a growing pause (:func:`backoff_delay`)
    until ``budget_s`` seconds have passed since the first attempt began. Every retry logs one
    warning (logger ``seml_hydra.store.db.retry``) naming ``what`` and the reason; success after a
    failure logs that MongoDB is back.

    Only for operations that are safe to repeat: a write that reached the server before the
    connection dropped is done again, so it must be idempotent (a ``$set``, a filter that no
    longer matches once applied; not a bare ``$push`` or ``$inc``). Each attempt itself waits
    up to the client's server selection timeout (5 s for the clients of
    :func:`seml_hydra.store.db.client.connect`).

    Args:
        operation: the database operation(s), called without arguments.
        what: what it does, for the log (e.g. ``"saving the result of experiment 3"``).
        budget_s: seconds to keep retrying; None reads :func:`retry_budget_s` (300 s); 0 runs
            ``operation`` once, without retry or log.
        on_retry: called before each pause with ``(attempt, error, seconds since the first
            attempt began)``, e.g. to show a waiting launcher's user what is going on.
        sleep, clock: ``time.sleep`` and ``time.monotonic`` (replaceable in unit tests).

    Returns:
        What ``operation()`` returned.

    Raises:
        The last connection error once the budget is spent (also logged), and any other error
        of ``operation`` at once.
    """
    budget = retry_budget_s() if budget_s is None else float(budget_s)
    if budget <= 0:
        return operation()
    started = clock()
    attempt = 0
    while True:
        try:
            result = operation()
        except Exception as error:
            if not is_connection_error(error):
                raise
            waited = clock() - started
            attempt += 1
            if waited >= budget:
                log.error(
                    "MongoDB still unreachable after %.0f s while %s (%s): giving up (%s=%g).",
                    waited,
                    what,
                    short_reason(error),
                    ENV_RETRY,
                    budget,
                )
                raise
            delay = min(backoff_delay(attempt), budget - waited)
            log.warning(
                "MongoDB unreachable while %s (%s); retry %d in %.1f s (%.0f of %g s spent, %s).",
                what,
                short_reason(error),
                attempt,
                delay,
                waited,
                budget,
                ENV_RETRY,
            )
            if on_retry is not None:
                on_retry(attempt, error, waited)
            sleep(delay)
            continue
        if attempt:
            log.warning(
                "MongoDB reachable again after %.0f s: %s succeeded.", clock() - started, what
            )
        return result
