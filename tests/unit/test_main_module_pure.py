"""The app's script as a module on the node, without services: script objects pickled by name
with a by-value fallback (``store.payload``), the script's path in the snapshot
(``store.snapshot.sources.script_in_snapshot``, ``job.main_module``), and loading it as ``__main__`` without its main guard."""

from __future__ import annotations

import functools
import linecache
import sys
import traceback
import types
from pathlib import Path

import pytest

from seml_hydra.job import main_module
from seml_hydra.job.main_module import load_script, script_as_main, script_dir, script_path
from seml_hydra.store.payload import dumps_main_by_name, loads_with_main, main_reference
from seml_hydra.store.snapshot.sources import script_in_snapshot

SCRIPT = """
import functools

FACTOR = {factor}


def make(x):
    return x * FACTOR


class Model:
    factor = FACTOR


def wrap(f):
    @functools.wraps(f)
    def wrapper(*a):
        return f(*a)
    return wrapper


def task(x):
    return make(x)


decorated = wrap(task)
"""


def fake_main(factor: int, name: str = "__main__") -> types.ModuleType:
    """A module named ``name`` whose objects say they are of ``__main__`` (as a script's)."""
    module = types.ModuleType(name)
    module.__dict__["__name__"] = "__main__"
    exec(compile(SCRIPT.format(factor=factor), f"<{name}>", "exec"), module.__dict__)
    return module


@pytest.fixture
def launch_main(monkeypatch):
    module = fake_main(2)
    monkeypatch.setitem(sys.modules, "__main__", module)
    return module


def test_a_scripts_objects_are_found_by_name_and_wrappers_unwrapped(launch_main):
    assert main_reference(launch_main.make, launch_main) == ("make", False)
    assert main_reference(launch_main.Model, launch_main) == ("Model", False)
    # @hydra.main leaves a functools.wraps wrapper under the task's name
    exec("def hmain(x):\n    return x\nraw = hmain\nhmain = wrap(hmain)\n", launch_main.__dict__)
    assert main_reference(launch_main.raw, launch_main) == ("hmain", True)
    assert main_reference(launch_main.hmain, launch_main) == ("hmain", False)


def test_closures_lambdas_and_other_modules_are_not_referenced(launch_main):
    exec("def outer():\n    def inner():\n        pass\n    return inner\n", launch_main.__dict__)
    assert main_reference(launch_main.outer(), launch_main) is None
    assert main_reference(lambda: 1, launch_main) is None
    assert main_reference(functools.partial, launch_main) is None
    assert main_reference(3, launch_main) is None


def test_the_payload_resolves_script_objects_in_the_nodes_module(launch_main):
    exec("def hmain(x):\n    return x\nraw = hmain\nhmain = wrap(hmain)\n", launch_main.__dict__)
    blob = dumps_main_by_name(
        {"task": launch_main.task, "cls": launch_main.Model, "raw": launch_main.raw}
    )
    node = fake_main(5, name="__mp_main__")
    exec("def hmain(x):\n    return -x\nhmain = wrap(hmain)\n", node.__dict__)
    loaded = loads_with_main(blob, node)
    assert loaded["task"] is node.task and loaded["task"](1) == 5
    assert loaded["cls"] is node.Model
    assert loaded["raw"] is node.hmain.__wrapped__


def test_without_the_script_the_payload_falls_back_to_the_by_value_copies(launch_main):
    blob = dumps_main_by_name({"task": launch_main.task, "wrapped": launch_main.decorated})
    loaded = loads_with_main(blob, None)
    assert loaded["task"](3) == 6  # the launch-time code, with its globals
    assert loaded["task"] is not launch_main.task
    assert loaded["wrapped"](3) == 6


def test_the_scripts_path_in_the_snapshot(tmp_path):
    (tmp_path / "sub").mkdir()
    app = tmp_path / "sub" / "app.py"
    app.write_text("")
    files = [["sub/app.py", 1], ["sub/models.py", 2]]
    assert script_in_snapshot(str(app), tmp_path, files) == "sub/app.py"
    assert script_in_snapshot(str(app), tmp_path, files[1:]) is None  # not snapshotted
    assert script_in_snapshot("/elsewhere/app.py", tmp_path, files) is None
    assert script_in_snapshot("", tmp_path, files) is None
    assert script_path({"main_file": "sub/app.py"}, files) == "sub/app.py"
    assert script_path({"main_file": "gone.py"}, files) is None
    assert script_path({}, files) is None  # staged before main_file existed
    assert script_dir("sub/app.py") == "sub"
    assert script_dir("a/b/app.py") == "a/b"
    assert script_dir("app.py") == ""


def test_the_script_runs_as_main_without_its_guard_with_traces_naming_its_launch_path(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(main_module, "_LOADED", {})
    (tmp_path / "app.py").write_text(
        "RAN = []\n"
        "def boom():\n"
        "    raise ValueError('boom')\n"
        "if __name__ == '__main__':\n"
        "    RAN.append('guard')\n"
        "else:\n"
        "    RAN.append('else')\n"
        "NAME = __name__\n"
    )
    module = load_script(tmp_path, "app.py", "/home/u/proj/app.py")
    # named as Python names the script (logger names stay ``__main__``), guard left out
    assert module.__name__ == "__main__" and module.NAME == "__main__"
    assert module.RAN == ["else"]
    assert module.__file__ == str(tmp_path / "app.py")
    assert load_script(tmp_path, "app.py", "/home/u/proj/app.py") is module  # once a process
    try:
        module.boom()
    except ValueError:
        trace = traceback.format_exc()
    assert "File \"/home/u/proj/app.py\", line 3, in boom\n    raise ValueError('boom')" in trace
    linecache.checkcache()  # the launch path does not exist: the snapshot's text stays
    assert linecache.getline("/home/u/proj/app.py", 3).strip() == "raise ValueError('boom')"
    before = sys.modules["__main__"]
    with script_as_main(module):
        assert sys.modules["__main__"] is module and sys.modules["__mp_main__"] is module
    assert sys.modules["__main__"] is before


def test_a_script_that_fails_to_load_gives_none(tmp_path, monkeypatch):
    """An unguarded ``main()`` exits (Hydra's error on submitit's argv): the job then runs the
    by-value task, as before."""
    monkeypatch.setattr(main_module, "_LOADED", {})
    (tmp_path / "app.py").write_text("import sys\nsys.exit(1)\n")
    before = sys.modules["__main__"]
    assert load_script(tmp_path, "app.py", str(Path("/x/app.py"))) is None
    assert sys.modules["__main__"] is before


def test_a_script_launching_its_sweep_at_top_level_is_refused_while_the_job_loads_it(
    tmp_path, monkeypatch, caplog
):
    """hydra-zen's ``launch(...)`` at a script's top level (no main guard) ran again when the
    job loaded the script: it staged the job's own points, found them RUNNING and waited for
    them forever. The launcher refuses while the script loads; the job runs the task pickled at
    launch (``load_script`` gives None). Outside a load the launcher goes on as before."""
    monkeypatch.setattr(main_module, "_LOADED", {})
    (tmp_path / "app.py").write_text(
        "from seml_hydra.launch.launcher import SemlLauncher\n"
        "SemlLauncher(collection='c').launch([['x=1']], 0)\n"
    )
    with caplog.at_level("WARNING", logger=main_module.__name__):
        assert load_script(tmp_path, "app.py", "/x/app.py") is None
    assert "LaunchedWhileLoading" in caplog.text and "app.py launched a sweep" in caplog.text
    main_module.refuse_launch_while_loading()  # the load is over: nothing refused


def test_without_a_snapshot_the_payload_pickles_the_script_by_value(launch_main):
    from seml_hydra.store.payload import pickled_payload

    assert b"main_attribute" in pickled_payload(launch_main.task, None, None)
    by_value = pickled_payload(launch_main.task, None, None, main_by_name=False)
    assert b"main_attribute" not in by_value
