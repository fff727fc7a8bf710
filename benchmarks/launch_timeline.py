"""Where the seconds of one launch go: a timeline of a Hydra command line, from the process'
start to its exit.

    python benchmarks/launch_timeline.py -- python benchmarks/apps/noop.py -m \\
        hydra/launcher=seml hydra.launcher.collection=timeline 'x=range(8)'

Runs the command (its first word a Python interpreter, the second the app) in a child
process through this file, which times, in the child: the interpreter's start (the process'
start time, ``/proc``), Hydra's entry (``_run_hydra``), the plugin scan, the config composition
of the multirun (``Hydra.multirun`` to the sweeper's ``sweep``), the sweeper's validation of each
batch (``validate_batch_is_legal``: Hydra's basic sweeper composes every point there), the
launcher's ``launch`` and, inside a seml-hydra launch, the import of the pipeline, the
composition of each chunk, staging (documents, payload, snapshot), submission (the documents'
updates and sbatch), waiting (polling) and the reading of the results, and every MongoDB command
of 20 ms or more (pymongo's command monitoring); then the exit (the last event to
the child's end, seen by this parent: Python's shutdown, thread joins). Prints one line per
span, start and length in seconds from the process start; nothing is asserted. The timing
wrappers cost microseconds a call. Not part of the test suite.
"""

from __future__ import annotations

import json
import os
import runpy
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

EVENTS = "SEML_TIMELINE_EVENTS"


def process_start() -> float:
    """This process' start as a ``time.time()`` value (Linux: ``/proc/self/stat`` field 22)."""
    ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
    boot = next(float(line.split()[1]) for line in open("/proc/stat") if line.startswith("btime "))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


class Recorder:
    """Spans ``(name, start, end)`` in ``time.time()`` seconds, written to a JSON file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.spans: list[tuple[str, float, float]] = []
        self.started = process_start()

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        """Time every call of ``owner.attribute`` as span ``name``."""
        original: Callable[..., Any] = getattr(owner, attribute)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.time()
            try:
                return original(*args, **kwargs)
            finally:
                self.spans.append((name, start, time.time()))
                self.save()

        setattr(owner, attribute, timed)

    def wrap_iterator(self, owner: Any, attribute: str, name: str) -> None:
        """Time every item an iterator returned by ``owner.attribute`` yields, as span
        ``name``."""
        original: Callable[..., Any] = getattr(owner, attribute)

        def timed(*args: Any, **kwargs: Any) -> Any:
            items = original(*args, **kwargs)
            try:
                while True:
                    start = time.time()
                    try:
                        item = next(items)
                    except StopIteration:
                        return
                    finally:
                        self.spans.append((name, start, time.time()))
                    yield item
            finally:
                items.close()

        setattr(owner, attribute, timed)

    def save(self) -> None:
        with open(self.path, "w") as f:
            json.dump({"started": self.started, "spans": self.spans}, f)


def instrument(recorder: Recorder) -> None:
    """Wrap Hydra's and seml-hydra's steps (those present in this environment)."""
    import hydra.main  # noqa: F401  (the module: ``hydra.main`` the attribute is the function)
    from hydra._internal import hydra as hydra_module
    from hydra.core.plugins import Plugins

    recorder.wrap(sys.modules["hydra.main"], "_run_hydra", "hydra: whole run (_run_hydra)")
    recorder.wrap(Plugins, "_initialize", "hydra: plugin scan")
    recorder.wrap(hydra_module.Hydra, "multirun", "hydra: multirun")
    recorder.wrap(hydra_module.Hydra, "compose_config", "hydra: compose the multirun config")
    original_instance = Plugins.instance

    def instance(*args: Any, **kwargs: Any) -> Any:
        plugins = original_instance(*args, **kwargs)
        if not getattr(Plugins, "_timeline_done", False):
            Plugins._timeline_done = True  # type: ignore[attr-defined]
            after_scan(recorder)
        return plugins

    Plugins.instance = instance  # type: ignore[method-assign]


def after_scan(recorder: Recorder) -> None:
    """Wrap the plugin classes, as the scan left them (it executes their modules again)."""
    from hydra._internal.core_plugins import basic_sweeper

    recorder.wrap(basic_sweeper.BasicSweeper, "sweep", "sweeper: sweep")
    recorder.wrap(
        basic_sweeper.BasicSweeper, "validate_batch_is_legal", "sweeper: validate a batch"
    )
    try:
        from seml_hydra.launch import launcher
    except ImportError:
        return
    recorder.wrap(launcher.SemlLauncher, "launch", "seml: launch")
    original = launcher.SemlLauncher._launch

    def first_launch(self: Any, *args: Any, **kwargs: Any) -> Any:
        start = time.time()
        from seml_hydra.launch import pipeline

        recorder.spans.append(("seml: import the pipeline", start, time.time()))
        watch_mongodb(recorder)
        recorder.wrap_iterator(pipeline, "iter_point_chunks", "seml: compose a chunk")
        recorder.wrap(pipeline, "checked_chunk", "seml: check a composed chunk")
        recorder.wrap(pipeline, "pickled_batch_payload", "seml: pickle the payload")
        recorder.wrap(pipeline, "connect", "seml: connect to MongoDB")
        recorder.wrap(pipeline._Launch, "stage", "seml: stage (documents, payload, snapshot)")
        recorder.wrap(pipeline._Launch, "_snapshot", "seml: code snapshot")
        recorder.wrap(pipeline._Launch, "submit", "seml: submit (sbatch)")
        recorder.wrap(pipeline, "wait_for", "seml: wait (poll until every task ended)")
        recorder.wrap(pipeline, "retrying", "seml: read the results")
        launcher.SemlLauncher._launch = original  # type: ignore[method-assign]
        return original(self, *args, **kwargs)

    launcher.SemlLauncher._launch = first_launch  # type: ignore[method-assign]


#: MongoDB commands shorter than this (s) are left out of the timeline
MONGODB_SHORTEST = 0.02


def watch_mongodb(recorder: Recorder) -> None:
    """Record every MongoDB command of :data:`MONGODB_SHORTEST` or longer (pymongo's command
    monitoring, for the clients made from now on) as span ``mongodb: <command>``."""
    from pymongo import monitoring

    class Listener(monitoring.CommandListener):
        def started(self, event: Any) -> None:
            pass

        def succeeded(self, event: Any) -> None:
            self.add(event)

        def failed(self, event: Any) -> None:
            self.add(event)

        def add(self, event: Any) -> None:
            seconds = event.duration_micros / 1e6
            if seconds >= MONGODB_SHORTEST:
                end = time.time()
                recorder.spans.append((f"mongodb: {event.command_name}", end - seconds, end))

    monitoring.register(Listener())


def child(events: str, app: str, argv: list[str]) -> None:
    recorder = Recorder(events)
    instrument(recorder)
    sys.argv = [app, *argv]
    try:
        runpy.run_path(app, run_name="__main__")
    finally:
        recorder.spans.append(("app: returned", time.time(), time.time()))
        recorder.save()


def report(events: dict, ended: float) -> list[str]:
    """One line per span (pure): ``start  length  name``, seconds from the process start,
    in start order; then the exit (last span end -> process end) and the total."""
    t0 = events["started"]
    spans = sorted(events["spans"], key=lambda s: (s[1], -s[2]))
    lines = [f"{'start s':>8s} {'length s':>9s}  span"]
    lines += [f"{s - t0:8.3f} {e - s:9.3f}  {name}" for name, s, e in spans]
    last = max(e for _, _, e in spans)
    lines.append(f"{last - t0:8.3f} {ended - last:9.3f}  exit (Python's shutdown, thread joins)")
    lines.append(f"{0:8.3f} {ended - t0:9.3f}  total, process start -> exit")
    return lines


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(os.environ[EVENTS], sys.argv[2], sys.argv[3:])
        return
    argv = sys.argv[1:]
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if len(argv) < 2:
        sys.exit("usage: launch_timeline.py -- PYTHON APP [HYDRA ARGS...]")
    python, app, *rest = argv
    with tempfile.TemporaryDirectory() as tmp:
        events = os.path.join(tmp, "events.json")
        cmd = [python, os.path.abspath(__file__), "--child", app, *rest]
        code = subprocess.call(cmd, env={**os.environ, EVENTS: events})
        ended = time.time()
        if not os.path.exists(events):
            sys.exit(f"the command exited {code} before anything was timed")
        with open(events) as f:
            print("\n".join(report(json.load(f), ended)))
    if code:
        print(f"the command exited {code}")


if __name__ == "__main__":
    main()
