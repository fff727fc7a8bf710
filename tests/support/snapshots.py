"""Helpers of the tests that drive a node's code snapshot directly
(``seml_hydra.store.snapshot.node.materialized``): a stored one-module snapshot, a fresh import
of a module's ``VALUE``, a snapshot directory's registry."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from seml_hydra.store.snapshot import sources


def module_snapshot(db: Any, tmp_path: Path, name: str, value: int) -> list:
    """A stored snapshot of one module ``<name>.py`` holding ``VALUE = value``."""
    root = tmp_path / f"proj_{name}"
    root.mkdir()
    (root / f"{name}.py").write_text(f"VALUE = {value!r}\n")
    files, _ = sources.select_sources([str(root / f"{name}.py")], [], root)
    return sources.upload_sources(db, "col", 1, files)


def import_value(name: str) -> Any:
    """``VALUE`` of module ``name`` imported afresh from ``sys.path``."""
    importlib.invalidate_caches()
    sys.modules.pop(name, None)
    try:
        return importlib.import_module(name).VALUE
    finally:
        sys.modules.pop(name, None)


def registry_of(runtime: Path, directory: Path) -> Path:
    """The registry (``src-<key>-<host>.json``) of the snapshot directory ``directory``."""
    return runtime / f"{directory.name.rsplit('-', 1)[0]}.json"
