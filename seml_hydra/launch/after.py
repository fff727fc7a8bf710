"""Batches that wait for each other: ``hydra.launcher.after=<batch>`` -> a Slurm dependency.

``after`` names an earlier batch (``3``: batch 3 of this collection; ``train:3``: batch 3 of
collection ``train``); the arrays of this launch are submitted with ``--dependency=
afterok:<its arrays>`` (``after_kind=any``: ``afterany``), the array ids being the earlier
batch's ``slurm[].array_id`` in its documents. Checked before staging (an unknown batch is a
``LaunchError``) and resolved again at each submission (``seml start`` too): experiments of
the earlier batch that already finished need no dependency, and one that failed makes an
``afterok`` dependency impossible, said at once instead of leaving the array PENDING
(Slurm's ``DependencyNeverSatisfied``, which the wait loop reports when it happens later).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from seml_hydra.core import states

#: ``after_kind`` -> Slurm's dependency type
AFTER_KINDS = {"ok": "afterok", "any": "afterany"}


def parse_after(value: Any, collection_name: str) -> tuple[str, int]:
    """``(collection, batch id)`` of an ``after`` value (pure): ``3`` or ``"3"`` -> this
    ``collection_name``'s batch 3; ``"train:3"`` -> batch 3 of ``train``.

    Raises:
        ValueError: naming the value and the accepted forms.
    """
    text = str(value).strip()
    collection, _, batch = text.rpartition(":")
    if isinstance(value, bool) or not batch.strip().isdigit():
        raise ValueError(
            f"hydra.launcher.after={value!r}: must be a batch id (3) or collection:batch "
            "(train:3, quoted on the command line: 'hydra.launcher.after=\"train:3\"')"
        )
    return collection.strip() or collection_name, int(batch)


def dependency_type(kind: Any) -> str:
    """Slurm's dependency type of ``after_kind`` (``ok`` -> ``afterok``, ``any`` ->
    ``afterany``; :data:`AFTER_KINDS`). Raises ValueError for another value."""
    if kind not in AFTER_KINDS:
        raise ValueError(f"hydra.launcher.after_kind={kind!r}: must be one of ok, any")
    return AFTER_KINDS[kind]


def dependency_of(docs: list[Mapping[str, Any]], kind: str, what: str) -> str | None:
    """The ``--dependency`` value on the batch whose documents are ``docs`` (pure): ``<type>:
    <array>:<array>...`` over the arrays (``slurm[].array_id``) of its experiments that are
    still PENDING/RUNNING/RESCHEDULED; None when none is (the batch is done: nothing to wait
    for). ``what`` names the batch in messages (``batch 3 of train``).

    Raises:
        ValueError: no documents (an unknown batch); with ``kind`` ``ok``, an experiment that
            FAILED, was KILLED or INTERRUPTED (the dependency could never be satisfied) or is
            still STAGED (never submitted: it would wait for nothing).
    """
    dep_type = dependency_type(kind)
    if not docs:
        raise ValueError(
            f"hydra.launcher.after: there is no {what} (`seml <collection> status` lists the "
            "batches); nothing was staged"
        )
    if dep_type == "afterok":
        bad = sorted(
            {str(d.get("status")) for d in docs} & {*states.RERUNNABLE, states.STAGED},
            key=states.ALL.index,
        )
        if bad:
            raise ValueError(
                f"hydra.launcher.after: {what} has {'/'.join(bad)} experiments, so an afterok "
                "dependency on it can never be satisfied; reset and start them first, or use "
                "hydra.launcher.after_kind=any; nothing was staged"
            )
    arrays = sorted(
        {
            str(entry["array_id"])
            for d in docs
            if d.get("status") in states.ACTIVE
            for entry in (d.get("slurm") or [])[:1]
            if isinstance(entry, Mapping) and str(entry.get("array_id", "")).isdigit()
        },
        key=int,
    )
    return f"{dep_type}:{':'.join(arrays)}" if arrays else None


def batch_dependency(db: Any, collection_name: str, launcher: Mapping[str, Any]) -> str | None:
    """The ``--dependency`` of a launcher node with ``after`` set (None without ``after``, or
    when the batch it names is done): reads that batch's documents in ``db`` (pymongo) and
    applies :func:`dependency_of`. Raises ValueError as :func:`parse_after` and
    :func:`dependency_of` do."""
    after = launcher.get("after")
    if after is None:
        return None
    name, batch_id = parse_after(after, collection_name)
    docs = list(db[name].find({"batch_id": batch_id}, {"status": 1, "slurm.array_id": 1}))
    return dependency_of(docs, launcher.get("after_kind") or "ok", f"batch {batch_id} of {name}")
