"""The app's script on the node: loaded from the code snapshot as a module, and what
``__main__`` is while the task runs.

A Hydra app is usually one script run as ``__main__``: its task function, and whatever its
configs name as ``__main__.X`` (a hydra-zen ``builds(make_model)``, a plain
``_target_: __main__.Foo``). On the node ``__main__`` is submitit's module, so those targets did
not resolve, and the task function (pickled by value by cloudpickle) showed its frames as
``File "<dynamic-code>"`` with no source line. As multiprocessing's ``spawn`` does, the job runs
the snapshot's copy of the script as a module named ``__main__``, as Python runs it, but with
its top-level ``if __name__ == "__main__":`` blocks left out (:func:`without_main_guard`: they
would start Hydra again on submitit's command line; multiprocessing's ``spawn`` avoids them by
naming the module ``__mp_main__``, which would change the app's logger names). The payload takes
the script's objects by name from it (``seml_hydra.store.payload.main_attribute``), and
``sys.modules["__main__"]`` (and ``["__mp_main__"]``) name it while the task runs
(:func:`script_as_main`).

The module's ``__file__`` is the snapshot copy (what ran; spawned worker processes re-run it);
its code objects name the script's path at launch (``seml.executable``), and ``linecache``
holds the snapshot's text under that path, so traces show the user's path with the lines that
ran (as Hydra's basic launcher shows them).
"""

from __future__ import annotations

import ast
import contextlib
import linecache
import logging
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from seml_hydra.core.scoped import temporarily

log = logging.getLogger(__name__)

#: the name under which multiprocessing's ``spawn`` re-runs a main script: also pointed at the
#: script while the task runs (objects pickled by a spawned child refer to it)
RUN_NAME = "__mp_main__"

#: scripts loaded in this process, by snapshot-relative path: every experiment of a job (one
#: payload, unpickled once: ``store.payload.load_payload``) shares one module
_LOADED: dict[str, types.ModuleType | None] = {}

#: the scripts being run by :func:`load_script` now (innermost last)
_LOADING: list[str] = []


class LaunchedWhileLoading(RuntimeError):
    """Raised by the launcher when the app's script, run on the node by :func:`load_script`,
    launches a sweep at its top level (outside a main guard: hydra-zen's ``launch(...)`` or a
    bare ``main()`` call). That launch would stage the points the job itself runs, find them
    RUNNING and wait for them: the job would wait for itself until killed."""


def refuse_launch_while_loading() -> None:
    """Raise :class:`LaunchedWhileLoading` when called while :func:`load_script` runs a script
    (the launcher calls it first): :func:`load_script` then logs it and the job runs the task
    pickled at launch, as hydra-submitit-launcher runs it."""
    if _LOADING:
        raise LaunchedWhileLoading(
            f"the app's script {_LOADING[-1]} launched a sweep at its top level while the job "
            'loaded it (put the launch under `if __name__ == "__main__":`)'
        )


def script_path(seml: Mapping[str, Any], files: Sequence[Sequence[Any]]) -> str | None:
    """The script's path relative to the snapshot root (``seml.main_file``, POSIX) when the
    snapshot ``files`` (``[[relative path, GridFS id], ...]``) holds it, else None (pure).
    ``seml``: a document's ``seml`` block."""
    rel = seml.get("main_file")
    names = {str(r) for r, _ in files}
    return rel if isinstance(rel, str) and rel in names else None


def script_dir(rel_path: str) -> str:
    """The directory of the script ``rel_path`` relative to the snapshot root (``""`` at the
    root) (pure): what goes first on ``sys.path``, where Python puts the script's directory."""
    parent = PurePosixPath(rel_path).parent.as_posix()
    return "" if parent == "." else parent


def load_script(snapshot: Path, rel_path: str, shown_as: str) -> types.ModuleType | None:
    """The snapshot's copy ``snapshot/rel_path`` of the script, executed as the module
    ``__main__`` without its main guard (cached per process by ``rel_path``); None when running
    it raised (logged
    as a warning: the job then uses the task's by-value copy, as before).

    ``shown_as``: the path its code objects (tracebacks) name, the script's path at launch;
    ``linecache`` gets the snapshot's text under that name. The module is registered in
    ``sys.modules`` under :data:`RUN_NAME` only while :func:`script_as_main` runs.
    """
    if rel_path in _LOADED:
        return _LOADED[rel_path]
    path = snapshot.joinpath(*PurePosixPath(rel_path).parts)
    source = path.read_text()
    module = types.ModuleType("__main__")
    module.__file__ = str(path)
    module.__builtins__ = __builtins__  # type: ignore[attr-defined]
    lines = source.splitlines(keepends=True)
    linecache.cache[shown_as] = (len(source), None, lines, shown_as)
    _LOADING.append(rel_path)
    loaded: types.ModuleType | None = module
    try:
        with script_as_main(module):
            exec(compile(without_main_guard(source), shown_as, "exec"), module.__dict__)
    except (Exception, SystemExit) as error:
        log.warning(
            "Could not load the app's script %s from the code snapshot (%s: %s); running the "
            "task pickled at launch instead (`__main__.X` targets do not resolve).",
            rel_path,
            type(error).__name__,
            error,
        )
        loaded = None
    finally:
        _LOADING.pop()
    _LOADED[rel_path] = loaded
    return loaded


def _is_main_guard(node: ast.stmt) -> bool:
    """Whether ``node`` is ``if __name__ == "__main__":`` (either operand order)."""
    if not isinstance(node, ast.If) or not isinstance(test := node.test, ast.Compare):
        return False
    if len(test.ops) != 1 or not isinstance(test.ops[0], ast.Eq):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s for s in sides if isinstance(s, ast.Name) and s.id == "__name__"]
    mains = [s for s in sides if isinstance(s, ast.Constant) and s.value == "__main__"]
    return len(names) == 1 and len(mains) == 1


def without_main_guard(source: str) -> ast.Module:
    """The script ``source`` parsed, with each top-level ``if __name__ == "__main__":`` block
    replaced by its ``else`` part (usually nothing), line numbers unchanged (pure). Raises
    ``SyntaxError`` for a script that does not parse."""
    tree = ast.parse(source)
    body: list[ast.stmt] = []
    for node in tree.body:
        body.extend(node.orelse if isinstance(node, ast.If) and _is_main_guard(node) else [node])
    tree.body = body
    return tree


@contextlib.contextmanager
def script_as_main(module: types.ModuleType | None) -> Iterator[None]:
    """``sys.modules["__main__"]`` and ``sys.modules["__mp_main__"]`` name ``module`` inside
    the block, and what they were afterwards. Nothing changes for ``None``."""
    if module is None:
        yield
        return
    with temporarily(sys.modules, {"__main__": module, RUN_NAME: module}):
        yield
