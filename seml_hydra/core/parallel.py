"""Several MongoDB writes sent at once (:func:`run_at_once`): mongod runs each write command on
one thread, deleting or rewriting its documents one by one, so one ``delete_many`` or
``update_many`` of 100,000 experiments keeps one of the server's CPUs busy while the others
idle. Writes of disjoint sets of documents sent from threads at once share them (pymongo's
client is thread-safe; each thread takes a connection of its own from the pool)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


def run_at_once(calls: Sequence[Callable[[], T]], workers: int) -> list[T]:
    """Call every one of ``calls`` (functions without arguments), at most ``workers`` at once
    from threads (in this thread, one after the other, when ``workers`` <= 1 or there is one
    call). Returns their results in the order of ``calls``.

    Raises:
        Exception: the first exception of ``calls`` (in their order), once every call ended
            (a write is never left running behind the caller's back).
    """
    if workers <= 1 or len(calls) <= 1:
        return [call() for call in calls]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(workers, len(calls))) as pool:
        futures = [pool.submit(call) for call in calls]
    return [future.result() for future in futures]
