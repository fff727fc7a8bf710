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

    Cycle()  # unreachable at once, but only the collector can free it
    before = gc.get_freeze_count()
    try:
        found = collect_and_freeze()
        assert finalized == [True] and found >= 2  # the object and its __dict__
        assert gc.get_freeze_count() > before
    finally:
        gc.unfreeze()
