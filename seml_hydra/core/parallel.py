"""Several MongoDB writes sent at once (:func:`run_at_once`): mongod runs each write command on
one thread, deleting or rewriting its documents one by one, so one ``delete_many`` or
``update_many`` of 100,000 experiments keeps one of the server's CPUs busy while the others
idle. Writes of disjoint sets of documents sent from threads at once share them (pymongo's
client is thread-safe; each thread takes a connection of its own from the pool)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def run_at_once(calls: Sequence[Callable[[], T]], workers: int) -> list[T]:
    """Call every one of ``calls`` (functions without arguments), at most ``workers`` at once
    from daemon threads (in this thread, one after the other, when ``workers`` <= 1 or there
    is one call). Returns their results in the order of ``calls``.

    The caller waits in an interruptible join: Ctrl-C (``KeyboardInterrupt``) reaches it at
    once, as it reaches one write sent from this thread, and the process may exit without
    waiting for the threads (a write already sent goes on in mongod either way).
    ``concurrent.futures`` would wait for its workers, at the pool's end and at exit.

    Raises:
        BaseException: the first exception of ``calls`` (in their order), once every call
            ended; ``KeyboardInterrupt`` while they run.
    """
    if workers <= 1 or len(calls) <= 1:
        return [call() for call in calls]
    import threading

    outcomes: list[tuple[bool, Any]] = [(False, None)] * len(calls)
    todo = list(reversed(range(len(calls))))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if not todo:
                    return
                index = todo.pop()
            try:
                outcomes[index] = (True, calls[index]())
            except BaseException as error:  # handed to the caller below
                outcomes[index] = (False, error)

    threads = [threading.Thread(target=work, daemon=True) for _ in range(min(workers, len(calls)))]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(_JOIN_POLL_S)
    for done, value in outcomes:
        if not done:
            raise value
    return [value for _, value in outcomes]


#: how long each interruptible join waits before it looks again (seconds)
_JOIN_POLL_S = 0.2
