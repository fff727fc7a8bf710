"""Writing a node's code snapshot into the directory a job has just made
(``seml_hydra.store.snapshot.node.write_new_tree``)."""

import os
import stat

import pytest

from seml_hydra.store.snapshot.node import write_new_tree


def test_a_new_snapshot_tree_gets_every_file_and_private_folders(tmp_path):
    root = tmp_path / "snap"
    root.mkdir(mode=0o700)
    files = [(root / "app.py", b"x = 1\n"), (root / "pkg" / "sub" / "m.py", b"y" * 300_000)]
    write_new_tree(files)
    assert (root / "app.py").read_bytes() == b"x = 1\n"
    assert (root / "pkg" / "sub" / "m.py").read_bytes() == b"y" * 300_000
    for folder in (root / "pkg", root / "pkg" / "sub"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700


def test_a_new_snapshot_tree_never_writes_over_or_through_what_is_there(tmp_path):
    root = tmp_path / "snap"
    root.mkdir(mode=0o700)
    (root / "app.py").write_bytes(b"old")
    with pytest.raises(FileExistsError):
        write_new_tree([(root / "app.py", b"new")])
    assert (root / "app.py").read_bytes() == b"old"
    target = tmp_path / "elsewhere.py"
    os.symlink(target, root / "link.py")
    with pytest.raises(FileExistsError):  # O_EXCL: a link there counts as there
        write_new_tree([(root / "link.py", b"new")])
    assert not target.exists()
