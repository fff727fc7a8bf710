"""Batch dependencies, the pure parts: ``hydra.launcher.after`` parsed, the
``--dependency`` built from the earlier batch's documents, its refusals, squeue's %E read
back and shown by ``seml queue``. No Slurm, no MongoDB."""

from __future__ import annotations

import pytest
from support.launcher_conf import launcher

from seml_hydra.launch.after import dependency_of, parse_after
from seml_hydra.launch.sbatch import resource_key, validate_launcher
from seml_hydra.launch.wait import stuck_message
from seml_hydra.slurm.records import (
    FIELD_SEP,
    RECORD_SEP,
    SQUEUE_FIELDS,
    parse_squeue,
    squeue_fields,
)


def doc(status: str, array_id=None) -> dict:
    return {"status": status, "slurm": [{"array_id": array_id}] if array_id else []}


@pytest.mark.parametrize(
    "value, expected",
    [(3, ("here", 3)), ("3", ("here", 3)), ("train:12", ("train", 12)), (" a:b:4 ", ("a:b", 4))],
)
def test_parse_after(value, expected):
    assert parse_after(value, "here") == expected


@pytest.mark.parametrize("value", ["x", "train:", "train:x", "", True, "-1", "1.5"])
def test_parse_after_refuses_what_is_no_batch(value):
    with pytest.raises(ValueError, match=r"hydra\.launcher\.after=.*batch id \(3\) or"):
        parse_after(value, "here")


def test_dependency_on_the_active_arrays_afterok_by_default():
    docs = [doc("RUNNING", 12), doc("PENDING", 13), doc("PENDING", 12), doc("COMPLETED", 9)]
    assert dependency_of(docs, "ok", "batch 1 of c") == "afterok:12:13"
    assert dependency_of(docs, "any", "batch 1 of c") == "afterany:12:13"


def test_a_finished_batch_needs_no_dependency():
    assert dependency_of([doc("COMPLETED", 5), doc("COMPLETED", 6)], "ok", "b") is None
    assert dependency_of([doc("FAILED", 5), doc("COMPLETED", 6)], "any", "b") is None


def test_an_unknown_batch_is_refused():
    with pytest.raises(ValueError, match="there is no batch 4 of c"):
        dependency_of([], "ok", "batch 4 of c")


@pytest.mark.parametrize("status", ["FAILED", "KILLED", "INTERRUPTED", "STAGED"])
def test_afterok_on_a_batch_that_cannot_succeed_is_refused(status):
    docs = [doc("RUNNING", 12), doc(status, 11)]
    with pytest.raises(ValueError, match=f"batch 1 of c has {status} experiments"):
        dependency_of(docs, "ok", "batch 1 of c")
    assert dependency_of(docs, "any", "batch 1 of c") == "afterany:12"


def test_validate_launcher_checks_after_and_after_kind():
    validate_launcher(launcher(after="train:3", after_kind="any"))
    with pytest.raises(ValueError, match=r"after_kind='notok': must be one of ok, any"):
        validate_launcher(launcher(after=3, after_kind="notok"))
    with pytest.raises(ValueError, match=r"hydra\.launcher\.after='x'"):
        validate_launcher(launcher(after="x"))


def test_a_dependency_makes_its_own_array():
    base = resource_key(launcher())
    assert resource_key(launcher(after="3")) != base
    assert resource_key(launcher(after="3", after_kind="any")) != resource_key(launcher(after="3"))


def test_squeue_dependency_is_read_from_its_extra_field():
    fields = squeue_fields(("E",))
    assert fields[-2:] == SQUEUE_FIELDS[-2:] and "E" in fields
    values = {
        "i": "20_[0]",
        "A": "20",
        "F": "20",
        "K": "0",
        "T": "PENDING",
        "r": "DependencyNeverSatisfied",
        "N": "",
        "M": "0:00",
        "u": "me",
        "j": "coll_2",
        "k": "coll",
    }
    text = ""
    for dep in ("afterok:19_*(failed)", "(null)"):
        text += FIELD_SEP.join({**values, "E": dep}[c] for c in fields) + RECORD_SEP + "\n"
    failed, none = parse_squeue(text, fields)
    assert failed.dependency == "afterok:19_*(failed)"
    assert none.dependency is None
    assert failed.name == "coll_2" and failed.comment == "coll"


def test_seml_queue_shows_a_pending_jobs_dependency():
    from rich.console import Console

    from seml_hydra.cli.global_cmds import _queue_table
    from seml_hydra.manage.inspection import QueueRow

    row = QueueRow(
        "c", "20_[0]", "PENDING", "Dependency", None, 0.0, "c_2", [3], "afterok:19_*(unfulfilled)"
    )
    console = Console(record=True, width=200, color_system=None)
    console.print(_queue_table([row]))
    assert "Dependency (afterok:19_*(unfulfilled))" in console.export_text()


def test_the_stuck_message_of_a_dependency_that_failed():
    message = stuck_message("20_0", "DependencyNeverSatisfied", "coll")
    assert message.startswith("Slurm will not start job 20_0 (DependencyNeverSatisfied): its")
    assert "`seml coll cancel`" in message


def test_the_stuck_message_of_a_held_job_says_release_not_cancel():
    """A held job only needs a release (attacker finding, session 7: the message said both
    "release it" and "Cancel it ... and change the resources")."""
    held = stuck_message("20_0", "JobHeldUser", "coll")
    assert held.endswith("it is held. Release it with `seml coll release`")
    admin = stuck_message("20_0", "JobHeldAdmin", "coll")
    assert "`seml coll release` as root" in admin
    assert all("cancel" not in m and "resources" not in m for m in (held, admin))
