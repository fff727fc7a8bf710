"""The key a code snapshot is materialized under on a node
(``seml_hydra.store.snapshot.node.snapshot_key``): the same for every task running the same files,
so the tasks of a batch on one node share one directory. Pure."""

from __future__ import annotations

from seml_hydra.store.snapshot.node import snapshot_key

FILES = [["app.py", "65f0c0ffee0000000000000a"], ["conf/config.yaml", "65f0c0ffee0000000000000b"]]


def test_every_task_of_a_batch_gets_the_same_key_whatever_its_array_task():
    assert snapshot_key("semltest", FILES) == snapshot_key("semltest", [list(f) for f in FILES])
    assert snapshot_key("semltest", FILES).startswith("semltest_")


def test_other_files_another_cluster_or_another_path_get_another_key():
    other_id = [FILES[0], ["conf/config.yaml", "65f0c0ffee0000000000000c"]]
    other_path = [FILES[0], ["conf/other.yaml", FILES[1][1]]]
    keys = {snapshot_key("semltest", FILES), snapshot_key("local", FILES)}
    keys |= {snapshot_key("semltest", other_id), snapshot_key("semltest", other_path)}
    assert len(keys) == 4
