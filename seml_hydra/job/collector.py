"""Python's cyclic garbage collector while a job starts (the runner's start-up, before the
first task).

A job's process creates some 300,000 objects before the task's first line (submitit, pymongo,
Sacred, Hydra, the payload), and none of them is garbage. Python's collector traverses the
young ones on every collection and, as the heap grows, all of them in a full collection: in a
no-op job ~130 collections, one of them full, ~35 ms of the ~0.35 s CPU from the process'
start to the task (measured on the testbed, ``benchmarks/README.md``, "Job life"), and more at
the interpreter's exit. hydra-submitit-launcher's job creates fewer of them.

:class:`StartUpCollector` turns the collector off when the runner is called and, when the
first task starts, freezes every object that exists (``gc.freeze``, CPython >= 3.7: moved to
the permanent generation, which no collection traverses) and turns it back on, as the Python
documentation advises for long-lived start-up objects (``gc.freeze``). The task's own objects
are collected as usual; its full collections, and the one at exit, skip the start-up's. Once
per process: cyclic garbage made before that moment is never collected (bounded: the start-up
of one experiment), and the later experiments of an array task start with the collector on.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass


@dataclass
class StartUpCollector:
    """The collector paused for a process' start-up; see the module docstring.

    Attributes:
        paused: whether :meth:`pause` turned the collector off and :meth:`resume` has not run
            yet.
    """

    paused: bool = False

    def pause(self) -> None:
        """Turn the collector off, if it is on and this process has not frozen its start-up
        yet (``gc.get_freeze_count() == 0``): a collector the app turned off stays off, and a
        second call of the runner in the same process pauses nothing."""
        if not self.paused and gc.isenabled() and gc.get_freeze_count() == 0:
            gc.disable()
            self.paused = True

    def resume(self) -> None:
        """After :meth:`pause`: freeze every object that exists now and turn the collector
        back on. Nothing otherwise (calling it again is harmless)."""
        if self.paused:
            self.paused = False
            gc.freeze()
            gc.enable()
