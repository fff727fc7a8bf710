"""seml_hydra.store.snapshot.bytecode: the compiled code of a snapshot's modules kept by content when a
snapshot directory goes, and given to a later directory with the same sources, so that their
import loads it instead of compiling; a changed source is compiled as before. The imports run
in fresh interpreters that report what they compiled."""

from __future__ import annotations

import importlib.util
import os
import py_compile
import subprocess
import sys
from pathlib import Path

from conftest import MODULE_SOURCE, import_fresh, module_project

from seml_hydra.store.snapshot.bytecode import (
    KEEP_DAYS,
    checked_hash_pyc,
    restore_bytecode,
    store_bytecode,
)

SOURCE = (
    "VALUE = 41\n\n\ndef where():\n    import inspect\n    return inspect.getsourcefile(where)\n"
)


def test_a_later_directory_with_the_same_sources_loads_their_bytecode(tmp_path):
    cache = tmp_path / "cache"
    first = module_project(tmp_path / "first")
    value, compiled = import_fresh(first, "pkg.mod")
    assert value == f"41 {first / 'pkg' / 'mod.py'}" and len(compiled) == 2  # both compiled
    assert store_bytecode(first, cache) == 2
    assert cache.stat().st_mode & 0o777 == 0o700
    second = module_project(tmp_path / "second")  # new files, new modification times
    assert restore_bytecode(second, cache) == 2
    value, compiled = import_fresh(second, "pkg.mod")
    assert compiled == []  # nothing compiled again
    assert value == f"41 {second / 'pkg' / 'mod.py'}"  # the code names its new file


def test_a_changed_source_is_compiled_and_runs_its_new_code(tmp_path):
    cache = tmp_path / "cache"
    first = module_project(tmp_path / "first")
    import_fresh(first, "pkg.mod")
    store_bytecode(first, cache)
    second = module_project(tmp_path / "second", MODULE_SOURCE.replace("41", "42"))
    assert restore_bytecode(second, cache) == 1  # the unchanged __init__.py only
    value, compiled = import_fresh(second, "pkg.mod")
    assert value.startswith("42 ") and compiled == [str(second / "pkg" / "mod.py")]


def test_only_a_valid_timestamp_pyc_is_converted(tmp_path):
    path = tmp_path / "m.py"
    path.write_text(MODULE_SOURCE)
    pyc = Path(py_compile.compile(str(path), cfile=str(tmp_path / "m.pyc"), doraise=True))
    data, source, stat = pyc.read_bytes(), path.read_bytes(), path.stat()
    converted = checked_hash_pyc(data, source, stat)
    assert converted[:4] == importlib.util.MAGIC_NUMBER
    assert converted[4:8] == (3).to_bytes(4, "little")  # hash-based, checked
    assert converted[8:16] == importlib.util.source_hash(source) and converted[16:] == data[16:]
    assert checked_hash_pyc(b"\0\0\0\0" + data[4:], source, stat) is None  # another Python
    assert checked_hash_pyc(converted, source, stat) is None  # not timestamp-based
    path.write_text(MODULE_SOURCE + "#\n")  # another size
    assert checked_hash_pyc(data, path.read_bytes(), path.stat()) is None


def test_entries_unused_for_long_are_removed_when_storing(tmp_path):
    cache = tmp_path / "cache"
    first = module_project(tmp_path / "first")
    import_fresh(first, "pkg.mod")
    store_bytecode(first, cache)
    entries = sorted(cache.glob("*.pyc"))
    old = entries[0].stat().st_mtime - (KEEP_DAYS + 1) * 86400
    os.utime(entries[0], (old, old))
    store_bytecode(tmp_path / "nothing", cache)
    assert sorted(cache.glob("*.pyc")) == entries[1:]


def _run(directory: Path, code: str, *flags: str) -> str:
    """``code`` run by a fresh interpreter (``flags`` first) that writes bytecode, with
    ``directory`` first on ``sys.path``; its output, stripped."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONOPTIMIZE")
    }
    script = f"import sys; sys.path.insert(0, {str(directory)!r})\n{code}"
    return subprocess.run(
        [sys.executable, *flags, "-c", script], capture_output=True, text=True, env=env, check=True
    ).stdout.strip()


def test_bytecode_of_an_optimizing_interpreter_is_not_given_to_another(tmp_path):
    # a job run by `python -O` (hydra.launcher.python, PYTHONOPTIMIZE) compiles its modules
    # without their asserts: a later job run without -O must not load that code
    cache = tmp_path / "cache"
    source = "DEBUG = __debug__\n"
    first, second = tmp_path / "first", tmp_path / "second"
    for directory in (first, second):
        directory.mkdir()
        (directory / "m.py").write_text(source)
    store = (
        "import m, pathlib\nfrom seml_hydra.store.snapshot.bytecode import store_bytecode\n"
        f"print(m.DEBUG, store_bytecode(pathlib.Path({str(first)!r}), pathlib.Path({str(cache)!r})))"
    )
    assert _run(first, store, "-O") == "False 1"
    restore_bytecode(second, cache)  # by an interpreter without -O
    assert _run(second, "import m; print(m.DEBUG)") == "True"
