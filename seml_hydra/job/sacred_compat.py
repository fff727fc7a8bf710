"""Import Sacred fast and without its setuptools warning.

sacred 0.8.7 imports ``pkg_resources`` at module level (``sacred.dependencies``,
``sacred.observers.mongo``). Importing setuptools' ``pkg_resources`` costs ~40 ms (half of
Sacred's import in a job) and warns that it is deprecated (setuptools 81 removed it). Sacred
needs only two things from it: ``resource_filename`` for its ``mime.types`` when the Mongo
observer is imported, and ``working_set`` when it discovers dependencies (which seml-hydra's
runs turn off). So while Sacred is imported, ``pkg_resources`` is a stand-in module that answers
``resource_filename`` with ``importlib.resources`` and imports the real ``pkg_resources`` on any
other attribute (then with the deprecation warning silenced). A filter set at package import
would not last: Hydra imports plugins inside ``warnings.catch_warnings()``.

The rest of Sacred's import that a seml-hydra run does not use is deferred the same way
(:func:`import_sacred`; ~20 ms CPU of the ~45 ms Sacred's import costs in a job): modules
Sacred imports at its top but uses only inside functions a run does not call
(:data:`LAZY_MODULES`: ``cpuinfo``, only when ``/proc/cpuinfo`` cannot be read; ``pydoc``, for
Sacred's command-line help; ``xml.etree.ElementTree``, to parse ``nvidia-smi``'s output) are
stand-ins that import the real module on first use; the Mongo observer's mime-type table
(``sacred.observers.mongo.mimetype_detector``: the system's mime files and Sacred's own, parsed
at import, read only when an artifact is added) is built on first use; and
``sacred.optional`` gets the C library (for ``fflush``) by its glibc name instead of through
``ctypes.util.find_library``, which runs ``ldconfig -p`` in a subprocess.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import types
import warnings
from collections.abc import Iterator
from typing import Any

#: the modules imported with the stand-in in place (Sacred's package and its Mongo observer)
_SACRED_MODULES = ("sacred", "sacred.observers", "sacred.observers.mongo")
#: modules sacred 0.8.7 imports at its top level and uses only inside functions a seml-hydra
#: run does not call (``host_info``: ``cpuinfo`` when ``/proc/cpuinfo`` is unreadable,
#: ``xml.etree.ElementTree`` for ``nvidia-smi -q -x``; ``commands``: ``pydoc`` for the
#: command-line help): while Sacred is imported they are :class:`LazyModule` stand-ins
LAZY_MODULES = ("cpuinfo", "pydoc", "xml.etree.ElementTree")


class LazyModule(types.ModuleType):
    """A stand-in for the module ``name`` that imports the real one on first attribute access
    (then the real one is in ``sys.modules`` as usual) and answers from it."""

    def __getattr__(self, attribute: str) -> Any:
        name = self.__name__
        if sys.modules.get(name) is self:
            del sys.modules[name]
        return getattr(importlib.import_module(name), attribute)


class LazyMimeTypes:
    """``mimetypes.MimeTypes(*args, **kwargs)`` built on first use: building one reads the
    system's mime files (``mimetypes.init``) and the given ones, ~10 ms."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._arguments = (args, kwargs)
        self._built: Any = None

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("_"):
            raise AttributeError(attribute)
        if self._built is None:
            import mimetypes

            args, kwargs = self._arguments
            self._built = mimetypes.MimeTypes(*args, **kwargs)
        return getattr(self._built, attribute)


def c_library_name(find_library: Any = None) -> str | None:
    """The C library's name for ``ctypes`` as ``ctypes.util.find_library("c")`` gives it:
    ``libc.so.6`` under glibc (``os.confstr("CS_GNU_LIBC_VERSION")``), else what
    ``find_library`` (``ctypes.util``'s when None) answers."""
    with contextlib.suppress(ValueError, OSError, AttributeError):
        if (os.confstr("CS_GNU_LIBC_VERSION") or "").startswith("glibc"):
            return "libc.so.6"
    if find_library is None:
        from ctypes.util import find_library
    return find_library("c")


@contextlib.contextmanager
def _deferred_imports() -> Iterator[None]:
    """While Sacred is imported: :data:`LAZY_MODULES` not imported yet are stand-ins,
    ``mimetypes.MimeTypes`` builds lazily and ``find_library("c")`` needs no subprocess (see
    the module docstring). Everything is put back afterwards; the stand-ins stay only where
    Sacred's modules bound them."""
    import ctypes.util
    import mimetypes

    stand_ins = {name: LazyModule(name) for name in LAZY_MODULES if name not in sys.modules}
    sys.modules.update(stand_ins)
    mime_types, find_library = mimetypes.MimeTypes, ctypes.util.find_library
    mimetypes.MimeTypes = LazyMimeTypes  # type: ignore[misc,assignment]
    ctypes.util.find_library = lambda name: (
        c_library_name(find_library) if name == "c" else find_library(name)
    )
    try:
        yield
    finally:
        mimetypes.MimeTypes, ctypes.util.find_library = mime_types, find_library  # type: ignore[misc]
        for name, stand_in in stand_ins.items():
            if sys.modules.get(name) is stand_in:
                del sys.modules[name]


def _real_pkg_resources() -> types.ModuleType:
    """Setuptools' ``pkg_resources`` (imported now if needed), without its warning.

    Raises:
        ImportError: setuptools is not installed (or is >= 81).
    """
    import importlib

    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="pkg_resources is deprecated", category=UserWarning
        )
        return importlib.import_module("pkg_resources")


def _resource_filename(package: str, resource: str) -> str:
    """``pkg_resources.resource_filename`` for a resource inside an installed package."""
    from importlib.resources import files

    return str(files(package).joinpath(resource))


def _stand_in() -> types.ModuleType:
    """The module Sacred binds as ``pkg_resources`` (see the module docstring)."""
    module = types.ModuleType(
        "pkg_resources", "seml_hydra stand-in; see seml_hydra.job.sacred_compat"
    )
    module.resource_filename = _resource_filename  # type: ignore[attr-defined]
    module.__getattr__ = lambda name: getattr(_real_pkg_resources(), name)  # type: ignore
    return module


def import_sacred() -> Any:
    """Import and return the ``sacred`` package (and its Mongo observer) as described in the
    module docstring: without setuptools' ``pkg_resources`` and with what a run does not use
    deferred (:func:`_deferred_imports`). Importing it again costs nothing; ``sys.modules``
    is left as it was (a later ``import pkg_resources`` or ``import pydoc`` gets the real
    module)."""
    if "sacred.observers.mongo" in sys.modules:
        return sys.modules["sacred"]
    installed = "pkg_resources" not in sys.modules
    if installed:
        sys.modules["pkg_resources"] = _stand_in()
    try:
        with warnings.catch_warnings(), _deferred_imports():
            warnings.filterwarnings(
                "ignore", message="pkg_resources is deprecated", category=UserWarning
            )
            for name in _SACRED_MODULES:
                __import__(name)
    finally:
        if installed:
            sys.modules.pop("pkg_resources", None)
    return sys.modules["sacred"]


def experiment(name: str) -> Any:
    """A Sacred ``Experiment`` for a run whose sources and dependencies seml-hydra records
    itself: no source or dependency discovery, no git info, no main file.

    With numpy installed, sacred 0.8.7's ``gather_sources_and_dependencies`` always adds numpy
    as a dependency through ``PackageDependency.create``, which first reads ``top_level.txt`` of
    every installed distribution (tens of ms in an ML environment). Its module -> distribution
    cache is primed with numpy's entry (``importlib.metadata``) so that scan never runs. And
    ``Experiment.__init__`` takes its caller's globals from ``inspect.stack()``, which also reads
    every frame's file and source line: the first call maps every imported module to its file
    (~20-30 ms in a job); the frames alone give the same globals.

    Args:
        name: the experiment's name (SEML's ``seml.name``).
    Returns:
        ``sacred.Experiment`` with ``interactive=True``, ``mainfile=None`` and empty
        ``sources``/``dependencies``.
    """
    import_sacred()
    from sacred import SETTINGS, Experiment
    from sacred.dependencies import PackageDependency

    SETTINGS.DISCOVER_SOURCES = "none"
    SETTINGS.DISCOVER_DEPENDENCIES = "none"
    if "numpy" not in PackageDependency.modname_to_dist:
        from importlib import metadata

        try:
            version = metadata.version("numpy")
        except metadata.PackageNotFoundError:
            version = None
        PackageDependency.modname_to_dist["numpy"] = ("numpy", version)
    ex = _without_source_lookup(lambda: Experiment(name, interactive=True, save_git_info=False))
    ex.mainfile, ex.sources, ex.dependencies = None, set(), set()
    return ex


def _frames(context: int = 1) -> list[tuple[Any, ...]]:
    """``inspect.stack()`` reduced to what Sacred reads (``stack()[i][0]``, a frame): one
    1-tuple per frame, from the caller outwards, without file names or source lines."""
    frames: list[tuple[Any, ...]] = []
    frame: types.FrameType | None = sys._getframe(1)
    while frame is not None:
        frames.append((frame,))
        frame = frame.f_back
    return frames


def _without_source_lookup(make: Any) -> Any:
    """``make()`` while ``sacred.experiment`` sees an ``inspect`` whose ``stack()`` is
    :func:`_frames`; only that module's global is swapped, and restored."""
    import inspect

    import sacred.experiment as module

    frames_only = types.SimpleNamespace(**vars(inspect))
    frames_only.stack = _frames
    # a stand-in for the inspect module: Sacred only calls its stack()
    module.inspect = frames_only  # type: ignore[assignment]
    try:
        return make()
    finally:
        module.inspect = inspect
