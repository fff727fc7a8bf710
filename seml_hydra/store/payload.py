"""The batch payload in GridFS: what every job of a launch needs besides the documents.

One place for its whole life: defined (:class:`Payload`), pickled by the launcher
(:func:`pickled_payload`), stored (:func:`put_payload`) with the batch's base Hydra node as JSON
in the file's ``metadata.hydra_base`` (readable without unpickling: :func:`hydra_base`,
:func:`hydra_base_for`), loaded on the compute node once per process (:func:`load_payload`),
deleted when staging stored nothing that needs it (:func:`delete_payload`) and removed by
``seml delete``/``drop`` once no experiment names it (:func:`delete_orphan_payloads`).

A document names its payload by the GridFS file id, as a string, in ``seml.payload_file``.
Payloads pickled before the sub-package layout name the class ``seml_hydra.run.Payload``: that
name is a deprecated name of ``seml_hydra.job.runner`` (``seml_hydra._compat``), which imports
:class:`Payload`, so they still load. pymongo, gridfs, cloudpickle and Hydra are imported where used (job start-up).

Objects of the app's script (``__main__``: the task function, a class or function a config
names as ``__main__.X``) are pickled by name with their by-value pickle as the fallback
(:func:`main_attribute`): a job that loaded the script from its code snapshot
(``seml_hydra.job.main_module``) gets the script's own objects, whose frames name the real file
and line; without the script (no snapshot) the by-value copy, as cloudpickle makes it.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from seml_hydra.core.errors import UserError
from seml_hydra.store.snapshot.sources import delete_unused_files, unused_files

if TYPE_CHECKING:
    from seml_hydra.core.schema import Database

#: ``metadata.kind`` of a payload file in ``fs.files``
PAYLOAD_KIND = "seml_hydra_payload"

#: payloads already loaded in this process, by file id: ``(Payload, base Hydra node)``
_LOADED: dict[str, tuple[Payload, dict[str, Any]]] = {}
#: the app's script module the payload being unpickled resolves ``__main__`` objects in
_UNPICKLING_MAIN: list[types.ModuleType | None] = [None]


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


def pickled_payload(
    task_function: Any, hydra_context: Any, typed_hydra_base: Any, main_by_name: bool = True
) -> bytes:
    """The batch payload as bytes (cloudpickle), with this process' Hydra singletons.

    Args:
        task_function: the ``@hydra.main`` task.
        hydra_context: Hydra's ``HydraContext`` of the launch.
        typed_hydra_base: the typed base Hydra node (``core.hydra_node.typed_hydra_node`` of the
            first point's node), stored pickled in :attr:`Payload.typed_hydra_base`.
        main_by_name: pickle the script's objects by name (:func:`dumps_main_by_name`), for
            jobs that load the script from the code snapshot; False: all by value (no
            snapshot), as cloudpickle does.

    Pickled at launch, before anything is staged, so an unpicklable task (a lock in a closure,
    an open file...) fails first. Raises :class:`UnpicklableTaskError` saying so.
    """
    import pickle

    from hydra.core.singleton import Singleton

    payload = Payload(
        task_function, hydra_context, Singleton.get_state(), pickle.dumps(typed_hydra_base)
    )
    try:
        if main_by_name:
            return dumps_main_by_name(payload)
        import cloudpickle

        return bytes(cloudpickle.dumps(payload))
    except Exception as error:
        raise UnpicklableTaskError(
            f"the task function cannot be pickled ({type(error).__name__}: {error}). Jobs "
            "receive the task by pickle: move objects such as locks, open files or clients "
            "out of module globals and closures, and create them inside the task."
        ) from None


def main_reference(obj: Any, main: Any) -> tuple[str, bool] | None:
    """How ``obj`` is found by name in the script module ``main`` (pure): ``(qualified name,
    unwrap)`` when ``obj`` is a function or class defined in it (``__module__ == "__main__"``)
    and ``getattr`` along its ``__qualname__`` gives ``obj`` itself (``unwrap`` False) or a
    wrapper of it (``unwrap`` True: ``inspect.unwrap`` gives ``obj``; ``@hydra.main`` leaves
    the wrapper under the task's name); else None (a closure, a lambda, a shadowed name)."""
    if not isinstance(obj, (types.FunctionType, type)) or obj.__module__ != "__main__":
        return None
    name = getattr(obj, "__qualname__", "")
    found = _attribute(main, name)
    if found is obj:
        return name, False
    if callable(found):
        try:
            if inspect.unwrap(found) is obj:
                return name, True
        except ValueError:  # a cycle of __wrapped__
            return None
    return None


def _attribute(module: Any, qualname: str) -> Any:
    """``module.<qualname>`` following the dots, None when a part is missing or the name is
    local (``<locals>``, ``<lambda>``)."""
    if not qualname or "<" in qualname:
        return None
    obj = module
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def main_attribute(qualname: str, unwrap: bool, by_value: bytes) -> Any:
    """Unpickle an object of the app's script (:func:`main_reference`): the object named
    ``qualname`` (unwrapped if ``unwrap``) in the script module :func:`load_payload` was given,
    else (no module, or the name is not in it) the by-value pickle ``by_value``."""
    import cloudpickle

    module = _UNPICKLING_MAIN[0]
    found = _attribute(module, qualname) if module is not None else None
    if found is not None:
        return inspect.unwrap(found) if unwrap else found
    return cloudpickle.loads(by_value)


def dumps_main_by_name(obj: Any) -> bytes:
    """``cloudpickle.dumps(obj)``, but each function or class of the script (``__main__``) that
    :func:`main_reference` finds by name is pickled as a call of :func:`main_attribute` with its
    name and its own by-value pickle. Raises what cloudpickle raises."""
    import io
    import sys

    import cloudpickle

    main = sys.modules.get("__main__")

    class _Pickler(cloudpickle.Pickler):  # type: ignore[misc]  # cloudpickle ships no types
        def reducer_override(self, obj: Any) -> Any:
            ref = main_reference(obj, main) if main is not None else None
            if ref is None:
                return super().reducer_override(obj)
            return main_attribute, (*ref, cloudpickle.dumps(obj))

    out = io.BytesIO()
    _Pickler(out).dump(obj)
    return out.getvalue()


def put_payload(
    db: Database,
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


def delete_payload(db: Database, payload_id: str) -> None:
    """Delete payload ``payload_id`` (a file id string) from GridFS: a launch whose staging
    failed or stored no experiment to submit. Nothing happens when it is gone already."""
    import gridfs
    from bson import ObjectId

    gridfs.GridFS(db).delete(ObjectId(payload_id))


def load_payload(
    db: Database, payload_id: str, main: types.ModuleType | None = None
) -> tuple[Payload, dict[str, Any]]:
    """The payload and its base Hydra node from GridFS file ``payload_id``, loaded (and
    unpickled) once per process: every experiment of a job, and every requeue inside one
    process, reuses it. ``main``: the app's script loaded as a module
    (``seml_hydra.job.main_module``), where its objects are looked up by name
    (:func:`main_attribute`); None: their by-value copies. Raises ``gridfs.errors.NoFile``
    when it is gone, pymongo errors."""
    if payload_id not in _LOADED:
        import gridfs
        from bson import ObjectId

        grid_out = gridfs.GridFS(db).get(ObjectId(payload_id))
        metadata: Any = grid_out.metadata  # written with the file by the launcher
        _LOADED[payload_id] = (
            loads_with_main(grid_out.read(), main),
            metadata["hydra_base"],
        )
    return _LOADED[payload_id]


def loads_with_main(blob: bytes, main: types.ModuleType | None) -> Any:
    """``cloudpickle.loads(blob)`` resolving the script's objects (:func:`main_attribute`) in
    ``main`` (None: their by-value copies)."""
    import cloudpickle

    _UNPICKLING_MAIN[0] = main
    try:
        return cloudpickle.loads(blob)
    finally:
        _UNPICKLING_MAIN[0] = None


def hydra_base(db: Database, payload_id: str) -> dict[str, Any]:
    """The base Hydra node stored with payload ``payload_id`` (``metadata.hydra_base``; no
    unpickling). Raises ``AttributeError`` when the payload is gone, pymongo errors."""
    import gridfs
    from bson import ObjectId

    found = gridfs.GridFS(db).find_one({"_id": ObjectId(payload_id)})
    if found is None:
        raise AttributeError(f"payload {payload_id} is gone")
    metadata: Any = found.metadata  # written with the file by the launcher
    base: dict[str, Any] = metadata["hydra_base"]
    return base


def hydra_base_for(
    db: Database, doc: Mapping[str, Any], base: dict[str, Any], payload_id: str
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
    db: Database, name: str, only: set[str] | None = None, dry_run: bool = False
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

    ids: list[Any] = []
    for file_id in only:
        try:
            ids.append(ObjectId(file_id))
        except (InvalidId, TypeError):
            ids.append(file_id)
    return {**candidates, "_id": {"$in": ids}}
