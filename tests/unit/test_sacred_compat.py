"""seml_hydra.job.sacred_compat: Sacred imported without setuptools' pkg_resources, and an
Experiment built without source lookups. Each check runs in a fresh interpreter (the test
process may have imported Sacred already)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def run_fresh(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_sacred_imports_without_loading_pkg_resources_and_its_mongo_observer_works():
    out = run_fresh(
        """
        import sys
        from seml_hydra.job.sacred_compat import import_sacred
        import_sacred()
        print("loaded" if "pkg_resources" in sys.modules else "absent")
        from sacred.observers import mongo
        print(mongo.mimetype_detector.guess_type("plot.png")[0])
        """
    )
    assert out.split() == ["absent", "image/png"]


def test_what_else_sacred_needs_from_pkg_resources_comes_from_the_real_one():
    out = run_fresh(
        """
        from seml_hydra.job.sacred_compat import import_sacred
        import_sacred()
        import sacred.dependencies as deps
        dist = deps.pkg_resources.working_set.by_key.get("sacred")  # dependency discovery
        print(dist.project_name)
        import pkg_resources  # a later import gets setuptools' module, not the stand-in
        print(pkg_resources.__name__, hasattr(pkg_resources, "require"))
        """
    )
    assert out.split() == ["sacred", "pkg_resources", "True"]


def test_experiment_takes_its_callers_globals_and_discovers_nothing():
    out = run_fresh(
        """
        import inspect
        from seml_hydra.job.sacred_compat import experiment
        ex = experiment("bench")
        import sacred.experiment
        print(ex.path, ex.mainfile, len(ex.sources), len(ex.dependencies))
        print(ex.base_dir.endswith("seml_hydra/job"), sacred.experiment.inspect is inspect)
        """
    )
    assert out.split() == ["bench", "None", "0", "0", "True", "True"]


def test_sacred_import_defers_what_a_run_does_not_use_and_starts_no_process():
    out = run_fresh(
        """
        import mimetypes, sys
        spawned = []
        sys.addaudithook(lambda event, args: spawned.append(args[0]) if event == "subprocess.Popen" else None)
        from seml_hydra.job.sacred_compat import LAZY_MODULES, import_sacred
        import_sacred()
        print(sorted(name for name in LAZY_MODULES if name in sys.modules) or "none-imported")
        print("mime-files-read" if mimetypes.inited else "mime-files-unread")
        print(spawned or "no-process")
        """
    )
    assert out.split() == ["none-imported", "mime-files-unread", "no-process"]


def test_what_sacred_defers_is_a_stand_in_that_works_when_used():
    out = run_fresh(
        """
        import sys
        from seml_hydra.job.sacred_compat import import_sacred
        import_sacred()
        import sacred.commands, sacred.host_info, sacred.optional
        from sacred.observers import mongo
        print(type(sacred.host_info.cpuinfo).__name__, type(mongo.mimetype_detector).__name__)
        print(sacred.host_info.ElementTree.fromstring("<gpus><gpu/></gpus>")[0].tag)
        print(callable(sacred.host_info.cpuinfo.get_cpu_info), callable(sacred.commands.pydoc.pager))
        print(type(sys.modules["pydoc"]).__name__, type(sys.modules["cpuinfo"]).__name__)
        print(mongo.mimetype_detector.guess_type("table.csv")[0])
        print(sacred.optional.libc.fflush(None))
        import ctypes.util, mimetypes
        print(mimetypes.MimeTypes.__module__, ctypes.util.find_library.__module__)
        """
    )
    assert out.split() == [
        *(
            "LazyModule",
            "LazyMimeTypes",
            "gpu",
            "True",
            "True",
            "module",
            "module",
            "text/csv",
            "0",
        ),
        *("mimetypes", "ctypes.util"),
    ]
