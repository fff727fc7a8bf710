"""The launcher's exit hook: cyclic garbage finalized first, then the live objects frozen."""

from __future__ import annotations

import gc

from seml_hydra.launch.exit import collect_and_freeze


def test_collect_and_freeze_finalizes_cycles_then_freezes_the_living():
    finalized = []

    class Cycle:
        def __init__(self) -> None:
            self.me = self

        def __del__(self) -> None:
            finalized.append(True)

    enabled = gc.isenabled()
    gc.disable()  # no automatic collection may free the cycle before collect_and_freeze does
    try:
        Cycle()  # unreachable at once, but only the collector can free it
        before = gc.get_freeze_count()
        found = collect_and_freeze()
        assert finalized == [True] and found >= 1  # the object (its __dict__ may be inline)
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()
