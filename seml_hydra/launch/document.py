"""Document building for one launch (pure): a composed sweep point -> its STAGED experiment
document (``seml_hydra.core.documents.build_document``), and the blocks every point of the launch
shares.

The launcher (``seml_hydra.launch.launcher``) does the I/O around it: it stores the payload and
the code snapshot, reads the git state (``store.snapshot.gitinfo.git_info``), takes the clock and draws
the seeds, then hands :class:`LaunchDocs` and each point to :func:`make_document`.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from seml_hydra.core.documents import (
    DIRNAME_PATH,
    NODE_FIELDS,
    GitDoc,
    HydraDoc,
    adds_seed,
    build_document,
    covered,
    dict_diff,
    diff_along,
    override_dirname,
    patch_tree,
    pick_seed,
    same,
    to_bson_safe,
)
from seml_hydra.core.hydra_node import JOB_ID_TOKEN
from seml_hydra.launch.compose import SweepPoint
from seml_hydra.launch.sbatch import job_name, sbatch_options
from seml_hydra.store.masking import mask_credentials


@dataclass(frozen=True)
class LaunchDocs:
    """What every document of one launch shares.

    Attributes:
        collection_name: the collection (``--comment``, and the job name's prefix).
        base_hydra: the first point's resolved ``hydra`` node: every point's ``node_diff``
            is taken against it (it is stored with the payload as ``metadata.hydra_base``).
        seml: the ``seml`` block (:func:`seml_doc`, plus ``source_manifest`` naming the snapshot).
        git: ``{path, commit, dirty}`` of the app's working dir, or None outside git.
        add_time: staging time (UTC), the same for all documents of the launch.
        base_origin: the base point's ``SweepPoint.origin`` (fast path), or None.
        memo: what the documents share, computed once per launch (:func:`hydra_doc`'s
            diff trees and converted blocks, :func:`make_document`'s sbatch options); filled
            as the documents are built.
    """

    collection_name: str
    base_hydra: Mapping[str, Any]
    seml: Mapping[str, Any]
    git: GitDoc | None
    add_time: datetime
    base_origin: Any = None
    memo: dict[Any, Any] = field(default_factory=dict, compare=False, repr=False)


#: at most this many results in a ``LaunchDocs.memo``
MEMO_ENTRIES = 1000


def _memo(memo: dict[Any, Any] | None, tag: str, obj: Any, make: Any) -> Any:
    """``make(obj)``, once per object ``obj`` (and ``tag``) in ``memo`` (no memo: each time);
    the points of a launch share most sub-objects, and so their documents share the results.
    ``obj`` is kept in ``memo``, so its ``id`` is not reused meanwhile; past
    :data:`MEMO_ENTRIES` (points that share nothing: full compositions) nothing more is kept."""
    if memo is None:
        return make(obj)
    key = (tag, id(obj))
    hit = memo.get(key)
    if hit is None:
        hit = (obj, make(obj))
        if len(memo) < MEMO_ENTRIES:
            memo[key] = hit
    return hit[1]


def node_diff(
    point: SweepPoint,
    base_hydra: Mapping[str, Any],
    base_origin: Any = None,
    memo: dict[Any, Any] | None = None,
) -> list[dict[str, Any]]:
    """``core.documents.dict_diff(base_hydra, point.hydra)``: when the point and the base
    point come from one fast-path combination (``SweepPoint.origin``, ``base_origin``), read
    only the paths either of them patched (``core.documents.diff_along``, its tree built
    once per pair of origins in ``memo``): the same entries, in the same order."""
    origin = point.origin
    if origin is None or base_origin is None or origin.base is not base_origin.base:
        return dict_diff(base_hydra, point.hydra)
    key = ("tree", id(origin), id(base_origin))
    hit = memo.get(key) if memo is not None else None
    if hit is None:
        hit = (origin, base_origin, patch_tree(origin.base, origin.paths | base_origin.paths))
        if memo is not None and len(memo) < MEMO_ENTRIES:
            memo[key] = hit  # the origins are kept: their ids are not reused meanwhile
    tree = hit[2]
    if tree is None:
        return dict_diff(base_hydra, point.hydra)
    return diff_along(base_hydra, point.hydra, tree)


def hydra_doc(
    point: SweepPoint,
    base_hydra: Mapping[str, Any],
    base_origin: Any = None,
    memo: dict[Any, Any] | None = None,
) -> HydraDoc:
    """The document's ``hydra`` block of ``point`` (see ``core.documents.HydraDoc``), BSON-safe
    (``core.documents.to_bson_safe``); its Hydra node is stored as the diff against
    ``base_hydra`` (:func:`node_diff`, ``core.documents.dict_diff``). Only the values are made
    safe: the diff's paths are lists of the node's keys (strings). With a ``memo``
    (``LaunchDocs.memo``) the blocks the points share (``choices``, the sweep dir) are
    converted once and shared by the documents."""
    hydra = point.hydra
    diff = []
    for entry in node_diff(point, base_hydra, base_origin, memo):
        if "value" in entry:
            value = entry["value"]
            safe = to_bson_safe(value)
            if safe is not value:
                entry = {**entry, "value": safe}
        diff.append(entry)
    block: HydraDoc = {
        "overrides": to_bson_safe(point.overrides),
        "job_num": point.job_num,
        "job_name": to_bson_safe(hydra["job"]["name"]),
        "sweep_dir": _memo(
            memo, "abspath", hydra["sweep"]["dir"], lambda d: os.path.abspath(str(d))
        ),
        "output_dir": to_bson_safe(hydra["runtime"]["output_dir"]),
        "choices": _memo(memo, "safe", hydra["runtime"].get("choices", {}), to_bson_safe),
        "node_diff": diff,
        **({"added_seed": True} if adds_seed(point.config) else {}),
    }
    if fields_hold_node(block, hydra):
        omitted = [list(path) for path, _ in NODE_FIELDS]
        dirname = hydra["job"]["override_dirname"]
        if same(override_dirname(hydra), dirname):
            omitted.append(list(DIRNAME_PATH))
        elif not covered(diff, DIRNAME_PATH):  # the reader must not derive it: an explicit entry
            diff = [*diff, {"path": list(DIRNAME_PATH), "value": to_bson_safe(dirname)}]
        block["node_diff"] = [entry for entry in diff if entry["path"] not in omitted]
        block["node_from_doc"] = True
    return block


def fields_hold_node(block: Mapping[str, Any], hydra: Mapping[str, Any]) -> bool:
    """Whether the ``hydra`` block ``block`` (:func:`hydra_doc`) holds the point's node
    ``hydra`` at every ``core.documents.NODE_FIELDS`` path as its own field, so its
    ``node_diff`` can leave them out (``node_from_doc``, read back by
    ``core.documents.point_hydra_node``): each path is a leaf of the node, no diff entry sets a
    level above it, and its BSON-safe value is the field's (``core.documents.same``: not, e.g.,
    ``hydra.overrides.task`` with an interpolation resolved). Not when the output dir holds the
    job-id token: the job rewrites the document's ``output_dir`` (``job.runner``), so the field
    would not stay the node's. And the node has a string ``job.override_dirname``, which the
    reader derives (``core.documents.override_dirname``) unless the diff holds it."""
    diff = block["node_diff"]
    if JOB_ID_TOKEN in str(block["output_dir"]):
        return False
    for path, name in NODE_FIELDS:
        node: Any = hydra
        for key in path:
            if not isinstance(node, Mapping) or key not in node:
                return False
            node = node[key]
        if isinstance(node, Mapping) or covered(diff, path[:-1]):
            return False
        if not same(to_bson_safe(node), block[name]):
            return False
    job = hydra.get("job")
    return isinstance(job, Mapping) and isinstance(job.get("override_dirname"), str)


def seml_doc(
    first: SweepPoint, *, payload_id: str, executor: str, argv: Sequence[str]
) -> dict[str, Any]:
    """The ``seml`` block shared by a launch's documents (SEML 0.5's names where SEML has one):
    ``executable`` (absolute ``argv[0]``), ``name`` (``hydra.job.name``), ``working_dir``
    (Hydra's ``runtime.cwd``), ``output_dir`` (the absolute submitit folder), ``command`` (the
    command line, MongoDB passwords masked: ``store.masking.mask_credentials``), ``launcher``
    (``seml_hydra.<executor>``) and ``payload_file`` (the GridFS id of the batch payload).

    Args:
        first: the launch's first point (its ``hydra`` node and launcher).
        payload_id: the payload file's id, as a string.
        executor: ``"slurm"`` or ``"local"``.
        argv: the launch's command line (``sys.argv``).
    """
    return {
        "executable": os.path.abspath(argv[0]) if argv and argv[0] else "",
        "name": first.hydra["job"]["name"],
        "working_dir": first.hydra["runtime"]["cwd"],
        "output_dir": os.path.abspath(str(first.launcher["submitit_folder"])),
        "command": mask_credentials(" ".join(argv)),
        "launcher": f"seml_hydra.{executor}",
        "payload_file": payload_id,
    }


def draw_seed(config: Mapping[str, Any], rng: random.Random) -> int:
    """The experiment's seed: the app's own integer ``seed`` (``core.documents.pick_seed``),
    else a number in ``[0, 2**31)`` drawn from ``rng`` (the launcher's ``SystemRandom``)."""
    return pick_seed(config, rng.randrange(2**31))


#: bytes drawn per seed by :func:`draw_seeds` (SystemRandom's ``randrange(2**31)`` reads 4 too)
SEED_BYTES = 4


def draw_seeds(
    configs: Sequence[Mapping[str, Any]], random_bytes: Callable[[int], bytes] = os.urandom
) -> list[int]:
    """The seeds of many experiments at once: :func:`draw_seed` per config, the drawn numbers
    from ONE ``random_bytes(4 * len(configs))`` call (``os.urandom``; the launcher draws a
    staging chunk's seeds together). Each drawn seed is 4 bytes with one bit dropped, a uniform
    number in ``[0, 2**31)``: what ``random.SystemRandom().randrange(2**31)`` returns from its
    own ``os.urandom(4)``. Pure but for ``random_bytes``."""
    raw = random_bytes(SEED_BYTES * len(configs))
    drawn = memoryview(raw).cast("I")  # 4-byte unsigned ints (any byte order: still uniform)
    return [pick_seed(config, value >> 1) for config, value in zip(configs, drawn)]


def point_seml(docs: LaunchDocs, point: SweepPoint) -> dict[str, Any]:
    """The ``seml`` block of ``point``: the launch's, plus ``description`` (SEML's
    ``seml.description``) when the point's ``hydra.launcher.description`` is a non-empty
    string (resolved with the point's config, so it may differ per point)."""
    seml = dict(docs.seml)
    description = point.launcher.get("description")
    if isinstance(description, str) and description.strip():
        seml["description"] = description
    return seml


def make_document(
    docs: LaunchDocs,
    point: SweepPoint,
    *,
    exp_id: int,
    batch_id: int,
    seed: int,
    safe_config: Mapping[str, Any] | None = None,
    config_hash: str | None = None,
) -> dict[str, Any]:
    """The STAGED document of ``point`` (``core.documents.build_document``): its config and
    overrides, :func:`hydra_doc`, the launch's ``seml`` and ``git`` blocks, and the sbatch
    options it is submitted with (``launch.sbatch.sbatch_options``, job name
    ``[<name>_]<collection>_<batch_id>``); the point's description is stored as
    ``seml.description`` (:func:`point_seml`).

    Args:
        docs: the launch's shared blocks.
        point: the composed point.
        exp_id, batch_id: from the collection's atomic counters.
        seed: from :func:`draw_seed` / :func:`draw_seeds`.
        safe_config, config_hash: the point's BSON-safe config and its ``experiment_hash``
            when the caller has them already (the launcher hashes each point once, to look
            for duplicates), else computed here.
    """
    return build_document(
        exp_id=exp_id,
        batch_id=batch_id,
        config=point.config,
        overrides=point.overrides,
        hydra=hydra_doc(point, docs.base_hydra, docs.base_origin, docs.memo),
        seed=seed,
        seml=point_seml(docs, point),
        sbatch_options=_memo(
            docs.memo,
            f"sbatch_options {batch_id}",
            point.launcher,
            lambda launcher: sbatch_options(
                launcher,
                comment=docs.collection_name,
                name=job_name(docs.collection_name, batch_id, launcher.get("name")),
            ),
        ),
        experiments_per_job=point.launcher["experiments_per_job"],
        git=docs.git,
        add_time=docs.add_time,
        launcher=point.launcher,
        safe_config=safe_config,
        config_hash=config_hash,
        safe_hydra=True,
    )


def refreshed_fields(docs: LaunchDocs, point: SweepPoint, batch_id: int) -> dict[str, Any]:
    """The fields set on an existing document that this launch runs again (a re-run or a
    re-submission): this launch's ``hydra`` and ``seml`` blocks and its ``batch_id``. The
    re-run joins this batch: it names this batch's source files, which SEML's delete removes
    with the last document of the batch (``store.snapshot.sources.upload_sources``)."""
    return {
        "hydra": hydra_doc(point, docs.base_hydra, docs.base_origin, docs.memo),
        "seml": point_seml(docs, point),
        "batch_id": batch_id,
    }
