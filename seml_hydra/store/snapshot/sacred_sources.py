"""Sacred's ``experiment.sources`` of a run: GridFS copies of its code snapshot's files, found
or stored in a few queries whatever the snapshot's size."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from seml_hydra.store.snapshot.node import gridfs_contents

if TYPE_CHECKING:
    from seml_hydra.core.schema import Collection, Database

#: ``metadata.kind`` of the GridFS copies of snapshot files a run lists in ``experiment.sources``
SACRED_SOURCE_KIND = "sacred_source"


def sacred_source_copies(db: Database, source_files: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """Sacred's ``experiment.sources`` of a run, ``[[relative path, GridFS id], ...]``, for the
    snapshot files ``source_files`` (``seml.source_files``): a copy of each, reused by a later run
    with the same path and content (``metadata.kind`` :data:`SACRED_SOURCE_KIND`, MD5 in
    ``metadata.content_hash``), as Sacred reuses its own (runs starting at the same time may
    each store one). Copies, not the snapshot files
    themselves: deleting a run deletes its ``experiment.sources`` (SEML 0.5.7's ``delete``,
    and ``seml_hydra.manage.lifecycle``'s when no other run names them) while the other
    experiments of its batch still run from, and restore, the snapshot. A snapshot file gone
    from GridFS is left out. Raises pymongo errors.

    Two queries when every copy exists (the snapshot files' ``metadata.content_hash``, the
    MD5 ``seml_hydra.store.snapshot.sources`` records at staging; then the copies of those paths and
    hashes, one per path and hash however many there are), plus two to read the files without
    a copy (``store.snapshot.node.gridfs_contents``) and one insert per new copy: a job of a
    70-file snapshot no longer makes ~200 round trips (``fs.get`` and ``find_one`` per file)
    before its task starts.
    """
    files = db["fs.files"]
    ids = list(dict.fromkeys(file_id for _, file_id in source_files))
    recorded = {
        f["_id"]: (f.get("metadata") or {}).get("content_hash")
        for f in files.find({"_id": {"$in": ids}}, {"metadata.content_hash": 1})
    }
    present = [(str(rel), file_id) for rel, file_id in source_files if file_id in recorded]
    copies = _existing_copies(files, [(rel, md5) for rel, i in present if (md5 := recorded[i])])
    missing = [i for rel, i in present if (rel, recorded[i]) not in copies]
    contents = gridfs_contents(db, missing) if missing else {}
    out = []
    for rel, file_id in present:
        key = (rel, recorded[file_id])
        if key not in copies:
            data = contents.get(file_id)
            if data is None:  # removed (or incomplete) since it was listed
                continue
            key = (rel, hashlib.md5(data).hexdigest())
            if key not in copies:  # a snapshot without a recorded hash: look once more
                copies.update(_existing_copies(files, [key]))
            if key not in copies:
                copies[key] = _put_copy(db, rel, key[1], data)
        out.append([rel, copies[key]])
    return out


def _existing_copies(
    files: Collection, keys: Sequence[tuple[str, str]]
) -> dict[tuple[str, str], Any]:
    """``{(path, md5): GridFS id}`` of the stored copies (:data:`SACRED_SOURCE_KIND`) among
    ``keys``, the oldest (smallest id) of each: one aggregate answering one document per
    ``(path, md5)``, however many copies the runs of a wave starting at the same time stored
    (a ``find`` returned them all, in batches of 101: a round trip per batch)."""
    if not keys:
        return {}
    match = {
        "metadata.kind": SACRED_SOURCE_KIND,
        "filename": {"$in": sorted({path for path, _ in keys})},
        "metadata.content_hash": {"$in": sorted({digest for _, digest in keys})},
    }
    group = {"_id": {"f": "$filename", "h": "$metadata.content_hash"}, "id": {"$min": "$_id"}}
    wanted = set(keys)
    out: dict[tuple[str, str], Any] = {}
    # the answer's first batch holds every group (a group is ~100 bytes of the 16 MB a batch
    # may hold)
    batch = max(101, 4 * len(keys))
    for g in files.aggregate([{"$match": match}, {"$group": group}], batchSize=batch):
        key = (g["_id"]["f"], g["_id"]["h"])
        if key in wanted:
            out[key] = g["id"]
    return out


def _put_copy(db: Database, rel: str, digest: str, data: bytes) -> Any:
    """Store ``data`` as the copy of snapshot file ``rel`` (MD5 ``digest``); its GridFS id."""
    import gridfs

    metadata = {"kind": SACRED_SOURCE_KIND, "content_hash": digest}
    return gridfs.GridFS(db).put(data, filename=rel, metadata=metadata)
