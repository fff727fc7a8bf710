"""A quicker exit for the process that launched: the cyclic garbage is collected once, then
what is still alive is frozen out of Python's collections during its shutdown.

Measured at the end of an 8-point launch (2-CPU machine at load ~10, ``benchmarks/``): Python's
shutdown took 0.15-0.54 s from the last ``atexit`` hook to the process' end (its collections
walk every object the launch's Hydra, OmegaConf and pymongo left, ~58,000); with
:func:`collect_and_freeze` as the first ``atexit`` hook to run, 0.07-0.14 s in the hook and
0.03-0.04 s after it.
"""

from __future__ import annotations

import atexit
import gc

_registered = False


def collect_and_freeze() -> int:
    """Collect the cyclic garbage now (its finalizers run: a file in a cycle is flushed and
    closed as Python's shutdown would), then move every object still alive to the permanent
    generation (``gc.freeze``), which the collections during the interpreter's shutdown do not
    walk. Objects made afterwards are collected as usual. Python does not promise to finalize
    the objects still alive at exit (``object.__del__``), and modules' globals are cleared at
    shutdown as before. Returns the number of unreachable objects found (``gc.collect``)."""
    found = gc.collect()
    gc.freeze()
    return found


def quick_exit_after_launch() -> None:
    """Register :func:`collect_and_freeze` to run at the interpreter's exit, once per process.
    ``atexit`` runs its hooks last registered first: the hooks registered before the launch
    (``logging``'s shutdown, the app's own) run after it, on frozen but live objects."""
    global _registered
    if not _registered:
        _registered = True
        atexit.register(collect_and_freeze)
