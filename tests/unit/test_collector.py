"""seml_hydra.job.collector.StartUpCollector: off while paused, then the objects that exist
frozen and the collector on; an app's own choice kept. Each check runs in a fresh interpreter
(freezing would keep the test process' objects forever)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_fresh(code: str) -> list[str]:
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_paused_then_frozen_and_on_again():
    out = run_fresh(
        """
        import gc
        from seml_hydra.job.collector import StartUpCollector
        c = StartUpCollector()
        c.pause()
        print(gc.isenabled(), gc.get_freeze_count() > 0)
        before = gc.get_count()[0]
        junk = [[] for _ in range(5000)]  # no collection while paused
        print(gc.get_count()[0] >= before + 4000)
        c.resume()
        print(gc.isenabled(), gc.get_freeze_count() > 0, c.paused)
        frozen = gc.get_freeze_count()
        c.resume()  # again: nothing
        c.pause()  # a second runner call in this process: the start-up is frozen already
        print(gc.isenabled(), gc.get_freeze_count() == frozen)
        """
    )
    assert out == ["False", "False", "True", "True", "True", "False", "True", "True"]


def test_a_collector_the_app_turned_off_stays_off_and_nothing_is_frozen():
    out = run_fresh(
        """
        import gc
        from seml_hydra.job.collector import StartUpCollector
        gc.disable()
        c = StartUpCollector()
        c.pause()
        c.resume()
        print(gc.isenabled(), gc.get_freeze_count())
        """
    )
    assert out == ["False", "0"]
