"""tools/lead/store_paths.py: the store's old flat module paths rewritten to its sub-packages."""

from __future__ import annotations

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "lead" / "store_paths.py"
_spec = importlib.util.spec_from_file_location("store_paths", SCRIPT)
assert _spec and _spec.loader
store_paths = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(store_paths)

OLD = """\
from seml_hydra.store.client import connect
from seml_hydra.store.snapshot import load_snapshot, materialized
from seml_hydra.store.server.mongod import free_port
import seml_hydra.store.tunnel_worker
from seml_hydra.store import errors, snapshot, tunnel as tun  # why
    from seml_hydra.store import (
        sources,
        results,
    )
from seml_hydra.store.errors import DatabaseError
target = "seml_hydra.store.retry.time.sleep"
"""

NEW = """\
from seml_hydra.store.db.client import connect
from seml_hydra.store.snapshot.node import load_snapshot, materialized
from seml_hydra.store.server.mongod import free_port
import seml_hydra.store.server.tunnel_worker
from seml_hydra.store import errors
from seml_hydra.store.snapshot import node as snapshot
from seml_hydra.store.server import tunnel as tun  # why
    from seml_hydra.store.snapshot import sources
    from seml_hydra.store import results
from seml_hydra.store.errors import DatabaseError
target = "seml_hydra.store.retry.time.sleep"
"""


def test_import_lines_get_the_new_paths_and_keep_their_bound_names():
    assert store_paths.rewrite(OLD) == NEW


def test_a_second_run_changes_nothing():
    assert store_paths.rewrite(NEW) == NEW
    everywhere = NEW.replace("store.retry.time", "store.db.retry.time")
    assert store_paths.rewrite(NEW, everywhere=True) == everywhere
    assert store_paths.rewrite(everywhere, everywhere=True) == everywhere


def test_everywhere_rewrites_dotted_names_and_file_paths_outside_imports():
    text = (
        'patch("seml_hydra.store.retry.time.sleep"); see seml_hydra/store/snapshot.py\n'
        "``store.collections.next_ids``, not self.store.client\n"
    )
    assert store_paths.rewrite(text) == text
    assert store_paths.rewrite(text, everywhere=True) == (
        'patch("seml_hydra.store.db.retry.time.sleep"); see seml_hydra/store/snapshot/node.py\n'
        "``store.db.collections.next_ids``, not self.store.client\n"
    )


def test_main_rewrites_the_files_in_place_and_names_them(tmp_path, capsys):
    changed, kept = tmp_path / "a.py", tmp_path / "b.py"
    changed.write_text(OLD)
    kept.write_text(NEW)
    assert store_paths.main([str(changed), str(kept)]) == 0
    assert changed.read_text() == NEW and kept.read_text() == NEW
    assert capsys.readouterr().out.splitlines() == [str(changed)]
    assert store_paths.main([str(tmp_path / "missing.py")]) == 2
