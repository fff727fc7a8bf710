"""The batch payload in GridFS: what every job of a launch needs besides the documents.

One place for its whole life: defined (:class:`Payload`), pickled by the launcher
(:func:`pickled_payload`), stored (:func:`put_payload`) with the batch's base Hydra node as JSON
in the file's ``metadata.hydra_base`` (readable without unpickling: :func:`hydra_base`,
:func:`hydra_base_for`), loaded on the compute node once per process (:func:`load_payload`),
deleted when staging stored nothing that needs it (:func:`delete_payload`) and removed by
``seml delete``/``drop`` once no experiment names it (:func:`delete_orphan_payloads`).

A document names its payload by the GridFS file id, as a string, in ``seml.payload_file``.
Payloads pickled before the sub-package layout name the class ``seml_hydra.run.Payload``: that
module is an alias of ``seml_hydra.job.runner``, which imports :class:`Payload`, so they still
load. pymongo, gridfs, cloudpickle and Hydra are imported where used (job start-up).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from seml_hydra.core.errors import UserError
from seml_hydra.store.sources import delete_unused_files, unused_files

#: ``metadata.kind`` of a payload file in ``fs.files``
PAYLOAD_KIND = "seml_hydra_payload"

#: payloads already loaded in this process, by file id: ``(Payload, base Hydra node)``
_LOADED: dict[str, tuple[Payload, dict[str, Any]]] = {}


@dataclass
class Payload:
    """What every job of a batch needs besides the documents; pickled once per batch into GridFS
    (``seml.payload_file``), so ``seml <collection> start`` can submit again from any shell.

    Attributes:
        task_function: the ``@hydra.main`` task (cloudpickled by value when defined in __main__).
        hydra_context: Hydra's ``HydraContext`` (config loader and callbacks) for ``run_job``.
        singleton_state: ``Singleton.get_state()`` of the launching process (ConfigStore...).
        typed_hydra_base: the base Hydra node typed (``core.hydra_node.typed_hydra_node``),
            pickled; None in payloads from before it existed.

    The batch's base Hydra node (each document stores its own diff to it) is kept as JSON in the
    GridFS file's ``metadata.hydra_base``, readable without unpickling (:func:`hydra_base`).
    """

    task_function: Any
    hydra_context: Any
    singleton_state: Any
    typed_hydra_base: bytes | None = None


class UnpicklableTaskError(UserError):
    """The task function (or what it closes over) cannot be pickled into the payload."""


def pickled_payload(task_function: Any, hydra_context: Any, typed_hydra_base: Any) -> bytes:
    """The batch payload as bytes (cloudpickle), with this process' Hydra singletons.

    Args:
        task_function: the ``@hydra.main`` task.
        hydra_context: Hydra's ``HydraContext`` of the launch.
        typed_hydra_base: the typed base Hydra node (``core.hydra_node.typed_hydra_node`` of the
            first point's node), stored pickled in :attr:`Payload.typed_hydra_base`.

    Pickled at launch, before anything is staged, so an unpicklable task (a lock in a closure,
    an open file...) fails first. Raises :class:`UnpicklableTaskError` saying so.
    """
    import pickle

    import cloudpickle
    from hydra.core.singleton import Singleton

    payload = Payload(
        task_function, hydra_context, Singleton.get_state(), pickle.dumps(typed_hydra_base)
    )
    try:
        return cloudpickle.dumps(payload)
    except Exception as error:
        raise UnpicklableTaskError(
            f"the task function cannot be pickled ({type(error).__name__}: {error}). Jobs "
            "receive the task by pickle: move objects such as locks, open files or clients "
            "out of module globals and closures, and create them inside the task."
        ) from None


def put_payload(
    db: Any,
    collection_name: str,
    blob: bytes,
    hydra_base: Mapping[str, Any],
    lease: Mapping[str, Any],
) -> str:
    """Store ``blob`` (:func:`pickled_payload`) in GridFS for collection ``collection_name``.

    ``hydra_base``: the batch's base Hydra node, BSON-safe (``documents.to_bson_safe``), kept in
    ``metadata.hydra_base``. ``lease``: a ``sources.new_lease()`` protecting the file from a
    concurrent ``delete``/``drop`` until the documents naming it are stored. Returns the file
    id as a string (what ``seml.payload_file`` holds). Raises pymongo errors.
    """
    import gridfs

    file_id = gridfs.GridFS(db).put(
        blob,
        filename=f"seml_hydra_payload_{collection_name}",
        metadata={
            "collection": collection_name,
            "kind": PAYLOAD_KIND,
            "hydra_base": dict(hydra_base),
            "leases": [dict(lease)],
        },
    )
    return str(file_id)


def delete_payload(db: Any, payload_id: str) -> None:
    """Delete payload ``payload_id`` (a file id string) from GridFS: a launch whose staging
    failed or stored no experiment to submit. Nothing happens when it is gone already."""
    import gridfs
    from bson import ObjectId

    gridfs.GridFS(db).delete(ObjectId(payload_id))


def load_payload(db: Any, payload_id: str) -> tuple[Payload, dict[str, Any]]:
    """The payload and its base Hydra node from GridFS file ``payload_id``, loaded (and
    unpickled) once per process: every experiment of a job, and every requeue inside one
    process, reuses it. Raises ``gridfs.errors.NoFile`` when it is gone, pymongo errors."""
    if payload_id not in _LOADED:
        import cloudpickle
        import gridfs
        from bson import ObjectId

        grid_out = gridfs.GridFS(db).get(ObjectId(payload_id))
        _LOADED[payload_id] = (cloudpickle.loads(grid_out.read()), grid_out.metadata["hydra_base"])
    return _LOADED[payload_id]


def hydra_base(db: Any, payload_id: str) -> dict[str, Any]:
    """The base Hydra node stored with payload ``payload_id`` (``metadata.hydra_base``; no
    unpickling). Raises ``AttributeError`` when the payload is gone, pymongo errors."""
    import gridfs
    from bson import ObjectId

    return gridfs.GridFS(db).find_one({"_id": ObjectId(payload_id)}).metadata["hydra_base"]


def hydra_base_for(
    db: Any, doc: Mapping[str, Any], base: dict[str, Any], payload_id: str
) -> dict[str, Any]:
    """The base Hydra node the diff of document ``doc`` (``hydra.node_diff``) refers to.

    ``base`` is the node of the payload ``payload_id`` of this launch: returned for a document of
    this launch (or without a payload), and when the document's own payload is gone (the diff
    still applies to it). For an experiment staged by an earlier launch, the node stored with
    that launch's payload (:func:`hydra_base`)."""
    stored = (doc.get("seml") or {}).get("payload_file")
    if stored in (None, payload_id):
        return base
    try:
        return hydra_base(db, stored)
    except Exception:  # payload gone
        return base


def payload_ids(docs: Iterable[Mapping[str, Any]]) -> set[str]:
    """The payload file ids (strings) the documents ``docs`` name in ``seml.payload_file``."""
    found = set()
    for doc in docs:
        seml = doc.get("seml")
        if isinstance(seml, Mapping) and seml.get("payload_file"):
            found.add(str(seml["payload_file"]))
    return found


def delete_orphan_payloads(
    db: Any, name: str, only: set[str] | None = None, dry_run: bool = False
) -> list[Any]:
    """Delete the payloads of collection ``name`` no experiment of it names any more; with
    ``only``, just those of these file ids (strings). The payload of a launch still staging
    (leased, ``sources.delete_unused_files``) is kept. Returns the ids deleted (with
    ``dry_run``: those it would delete, deleting nothing); raises pymongo errors."""

    def used() -> set[str]:
        return {str(p) for p in db[name].distinct("seml.payload_file") if p}

    candidates: dict[str, Any] = {"metadata.collection": name, "metadata.kind": PAYLOAD_KIND}
    act = unused_files if dry_run else delete_unused_files
    return act(db, restricted_to(candidates, only), used)


def restricted_to(candidates: dict[str, Any], only: set[str] | None) -> dict[str, Any]:
    """The ``fs.files`` filter ``candidates`` restricted to the file ids ``only`` (strings of
    ObjectIds, or other ids as they are) when given, else ``candidates`` itself (pure). Used
    for payloads and code snapshot files alike."""
    if only is None:
        return candidates
    from bson import ObjectId
    from bson.errors import InvalidId

    ids = []
    for file_id in only:
        try:
            ids.append(ObjectId(file_id))
        except (InvalidId, TypeError):
            ids.append(file_id)
    return {**candidates, "_id": {"$in": ids}}
