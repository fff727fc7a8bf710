"""Module names of the flat layout before the sub-packages (seml-hydra 0.1.0 before
2026-11-30), kept only so that what names them from outside still loads: batch payloads
pickled into GridFS and submitit job files (``seml_hydra.run.Payload``,
``seml_hydra.run.JobRunner``), and apps or their code snapshots that import
``seml_hydra.rank``. Importing one of them gives the module it moved to (the same object, not a
copy) with a ``DeprecationWarning``; they are removed in :data:`REMOVED_IN`. New code imports
from ``seml_hydra`` (``from seml_hydra import current_plan, log_scalar, on_requeue``).

``seml_hydra/__init__.py`` installs the finder (:func:`install`); it imports nothing until an
old name is asked for.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

#: old module name -> the module it moved to
MOVED = {
    "seml_hydra.run": "seml_hydra.job.runner",
    "seml_hydra.rank": "seml_hydra.job.rank",
    "seml_hydra.metrics": "seml_hydra.job.metrics",
    "seml_hydra.requeue": "seml_hydra.job.requeue",
}
#: the version without the old names
REMOVED_IN = "0.3.0"


class _MovedModules:
    """A ``sys.meta_path`` finder whose loader hands out the moved module for an old name (the
    finder and loader protocols, without ``importlib.abc``, whose import loads
    ``importlib.resources``: every ``seml --help`` imports this module)."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return self.load_module(spec.name)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the moved module is loaded already."""

    def load_module(self, fullname: str) -> ModuleType:
        """The module ``fullname`` moved to, with a ``DeprecationWarning`` (also the loader
        protocol's older entry)."""
        new = MOVED[fullname]
        warnings.warn(
            f"{fullname} is deprecated and will be removed in seml-hydra {REMOVED_IN}: "
            f"import {new} (apps: from seml_hydra import ...)",
            DeprecationWarning,
            stacklevel=3,
        )
        return importlib.import_module(new)


def install() -> None:
    """Add the finder to ``sys.meta_path`` once per process."""
    if not any(isinstance(finder, _MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModules())
