"""Experiment documents: sweep point -> MongoDB document, and the small pure helpers around them.

The schema follows SEML 0.5's ``ExperimentDoc`` (``src/seml/document.py``): ``_id``, ``batch_id``,
``status``, ``config``, ``config_unresolved``, ``config_hash``, ``add_time``, ``seml{...}``,
``slurm[...]``, ``git{path, commit, dirty}``. Ours adds ``seed`` (fixed at staging) and a ``hydra``
sub-document (overrides, job num, sweep dir, and the point's Hydra node as a diff against the
batch's base node). Sacred's ``MongoObserver`` later fills the run fields (``start_time``,
``heartbeat``, ``host``, ``captured_out``, ``result``, ``stop_time``, ``fail_trace``).

Everything here is pure: no I/O, no clock, no randomness (callers pass ``add_time`` and ``seed``).
"""

from __future__ import annotations

import base64
import binascii
import copy
import enum
import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence, Set
from datetime import date, datetime, time
from pathlib import PurePath
from typing import Any, TypedDict

from seml_hydra.core import states
from seml_hydra.core.overrides import overrides_to_nested

#: ``seml.version``: the SEML schema our documents follow. SEML >= 0.5 silently "migrates" (rewrites)
#: every document below [0, 5, 0] on any command, so this is SEML's version, not ours
VERSION = [0, 5, 7]


class GitDoc(TypedDict):
    """``git`` block (SEML 0.5): remote URL or repository path, commit, dirty flag."""

    path: str
    commit: str
    dirty: bool


class HydraDoc(TypedDict, total=False):
    """``hydra`` block (ours): how Hydra saw this sweep point."""

    overrides: list[str]  # the point's task overrides, e.g. ["model=small", "optimizer.lr=0.1"]
    job_num: int  # hydra.job.num
    job_name: str  # hydra.job.name
    sweep_dir: str  # hydra.sweep.dir, resolved
    output_dir: str  # absolute hydra.runtime.output_dir of this point
    choices: dict[str, Any]  # hydra.runtime.choices (config-group selections)
    node_diff: list[dict[str, Any]]  # the point's Hydra node as a diff against the batch's base
    node_from_doc: bool  # node_diff leaves out NODE_FIELDS and job.override_dirname
    working_dir: str  # set by the run step: where the task ran
    task_name: str  # set by the run step
    added_seed: bool  # config.seed was added at staging (the app has none): not in the task's cfg


def to_bson_safe(value: Any) -> Any:
    """Return ``value`` with paths turned into strings and tuples into lists, recursively.

    Resolved OmegaConf containers hold only JSON types, ``bytes`` and ``pathlib`` paths; MongoDB
    stores all of them but paths. Other objects are returned unchanged (pymongo raises on them).
    Plain ``dict``/``list``/scalars are tested by exact type first (``isinstance`` against the
    ``Mapping`` ABC costs ~10x more, and staging calls this for every point).
    """
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is dict:
        return {k if type(k) is str else str(k): to_bson_safe(v) for k, v in value.items()}
    if kind is list or kind is tuple:
        return [to_bson_safe(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): to_bson_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_bson_safe(v) for v in value]
    if isinstance(value, PurePath):
        return str(value)
    return value


#: keys Sacred refuses in a config (``sacred.config.utils.assert_is_valid_key``: its jsonpickle
#: tags; a ``.`` anywhere or a leading ``$`` are refused too, :func:`sacred_key_problem`)
SACRED_RESERVED_KEYS = frozenset(
    {
        "py/bytes", "py/function", "py/id", "py/initargs", "py/iterator", "py/mod", "py/newargs",
        "py/newargsex", "py/newobj", "py/object", "py/property", "py/reduce", "py/ref",
        "py/repr", "py/seq", "py/set", "py/state", "py/tuple", "py/type",
    }
)  # fmt: skip


def sacred_key_problem(config: Any, clean: set[int] | None = None) -> list[str] | None:
    """The path (keys from the top, as strings; list items by index) of the first key of a
    resolved ``config`` that Sacred refuses as a config key, or ``None`` (pure).

    Sacred (``assert_is_valid_key``, run when the job hands the config to its ``Experiment``)
    refuses a key containing ``.``, starting with ``$``, one of its jsonpickle tags
    (:data:`SACRED_RESERVED_KEYS`) or starting with ``json://``; Hydra and OmegaConf accept
    them (``+tags={v1.0: 1}``). Keys are compared as the document stores them (``str(key)``,
    so a float key ``1.5`` is ``"1.5"``). ``clean``: ids of containers already found clean
    (updated in place; points of one launch share sub-dicts, each is walked once while they
    are alive)."""
    clean = set() if clean is None else clean
    stack: list[tuple[Any, list[str]]] = [(config, [])]
    walked: list[int] = []
    while stack:
        node, path = stack.pop()
        if id(node) in clean:
            continue
        walked.append(id(node))
        if isinstance(node, Mapping):
            for key, value in node.items():
                text = key if type(key) is str else str(key)
                if "." in text or text.startswith(("$", "json://")) or text in SACRED_RESERVED_KEYS:
                    return [*path, text]
                if isinstance(value, (Mapping, list, tuple)):
                    stack.append((value, [*path, text]))
        elif isinstance(node, (list, tuple)):
            for index, value in enumerate(node):
                if isinstance(value, (Mapping, list, tuple)):
                    stack.append((value, [*path, str(index)]))
    clean.update(walked)  # every container walked is clean
    return None


BSON_INT_RANGE = (-(2**63), 2**63)


def storable_result(value: Any) -> tuple[Any, list[str]]:
    """A task's return value as MongoDB can store and every reader understands it (pure).

    The value is stored as data, never as a pickled object, so MongoDB filters on it work
    (``{"result.acc": {"$gt": 0.9}}``). Exact ``str``/``int``/``float``/``bool``/``bytes``/``None``
    stay as they are; every numpy scalar and array, at any depth, becomes a Python number, bool,
    string or (nested) list (``tolist``; ``numpy.float64`` too, although it subclasses ``float``);
    ``datetime`` stays a ``datetime`` (a BSON date; ``date``/``time`` become ISO strings); an enum
    member becomes its value; mappings become dicts with ``str`` keys; tuples, lists, sets and
    other sequences lists; paths strings; other subclasses of ``str``/``int``/``float`` the plain
    type. Anything else (an open file, a model, an int beyond 64 bits) is stored as its ``repr``.

    The run step writes the value as it is (``seml_hydra.job.runner``: Sacred's own serializer would
    jsonpickle a ``datetime`` or a ``numpy.float64`` into a ``{"py/object": ...}`` dict).

    Returns ``(value, problems)``: ``problems`` names each replaced part (``"result.thing:
    Opaque"``) so the caller can warn.
    """
    problems: list[str] = []

    def convert(v: Any, path: str) -> Any:
        kind = type(v)
        if v is None or kind is str or kind is float or kind is bool or kind is bytes:
            return v
        if kind.__module__ == "numpy" and hasattr(v, "tolist"):
            return convert(v.tolist(), path)  # before float/int: numpy.float64 is a float
        if isinstance(v, enum.Enum):
            return convert(v.value, path)
        if isinstance(v, datetime):
            return v
        if isinstance(v, bool):
            return bool(v)
        if isinstance(v, int):
            if BSON_INT_RANGE[0] <= v < BSON_INT_RANGE[1]:
                return int(v)
        elif isinstance(v, float):
            return float(v)
        elif isinstance(v, str):
            return str(v)
        elif isinstance(v, bytes):
            return bytes(v)
        elif isinstance(v, (date, time)):
            return v.isoformat()
        elif isinstance(v, Mapping):
            return {str(k): convert(x, f"{path}.{k}") for k, x in v.items()}
        elif isinstance(v, (Sequence, Set)):
            return [convert(x, f"{path}[{i}]") for i, x in enumerate(v)]
        elif isinstance(v, PurePath):
            return str(v)
        problems.append(f"{path}: {type(v).__name__}")
        return repr(v)

    return convert(value, "result"), problems


#: jsonpickle tags (Sacred's serializer) restored as plain Python values by :func:`plain_result`
_PLAIN_TAGS = ("py/tuple", "py/set", "py/b64")
#: numpy classes whose jsonpickle form (``jsonpickle.ext.numpy``) holds its data as plain values
_NUMPY_FORMS = re.compile(r"numpy\.(ndarray|[a-z]+[0-9]*|bool_|str_|bytes_)")


def plain_result(value: Any, path: str = "result") -> tuple[Any, list[str]]:
    """A stored result as plain data, without running any code (pure).

    Results stored by Sacred's serializer (jsonpickle) may hold tagged dicts. Only tags that are
    data are decoded: ``{"py/tuple": [...]}`` -> tuple, ``{"py/set": [...]}`` -> set,
    ``{"py/b64": ...}`` -> bytes, a numpy array or scalar (``{"py/object": "numpy.ndarray",
    "values": [...]}`` / ``{"py/object": "numpy.float64", "value": 0.9}``) -> its (nested) list or
    number, and ``json://`` dict keys (jsonpickle's non-string keys) -> the plain key they encode.
    Any other dict with a ``py/...`` key (``py/reduce``, ``py/object``, ``py/function``,
    ``py/type``, ``py/id``, ...) would need code to rebuild (jsonpickle imports and calls what it
    names): it is returned as it is stored, as a plain dict, and named in the problems.

    Args:
        value: the stored value (``doc["result"]``), as pymongo returns it.
        path: the name of ``value`` in the problems (``"result"``).

    Returns:
        ``(plain value, problems)``; each problem is ``"<path>: <tag>"``, e.g.
        ``"result.model: py/reduce"``.
    """
    problems: list[str] = []

    def key_of(key: Any) -> Any:
        if isinstance(key, str) and key.startswith("json://"):
            try:
                decoded = json.loads(key[len("json://") :])
            except ValueError:
                return key
            if isinstance(decoded, (str, int, float, bool)) or decoded is None:
                return decoded
        return key

    def restore(v: Any, where: str) -> Any:
        if isinstance(v, list):
            return [restore(x, f"{where}[{i}]") for i, x in enumerate(v)]
        if not isinstance(v, dict):
            return v
        tags = [k for k in v if isinstance(k, str) and k.startswith("py/")]
        if not tags:
            return {key_of(k): restore(x, f"{where}.{k}") for k, x in v.items()}
        if len(v) == 1 and tags[0] in _PLAIN_TAGS:
            tag, inner = tags[0], v[tags[0]]
            if tag == "py/b64" and isinstance(inner, str):
                try:
                    return base64.b64decode(inner, validate=True)
                except (binascii.Error, ValueError):
                    pass
            elif tag != "py/b64" and isinstance(inner, list):
                items = [restore(x, f"{where}[{i}]") for i, x in enumerate(inner)]
                if tag == "py/tuple":
                    return tuple(items)
                try:
                    return set(items)
                except TypeError:  # an unhashable item: keep the list
                    return items
        cls = v.get("py/object")
        data = [k for k in ("values", "value") if k in v]
        if (
            isinstance(cls, str)
            and _NUMPY_FORMS.fullmatch(cls)
            and tags == ["py/object"]
            and len(data) == 1
            and set(v) <= {"py/object", "dtype", data[0]}
        ):
            return restore(v[data[0]], where)
        problems.append(f"{where}: {', '.join(sorted(tags))}")
        for k, x in v.items():  # name the stored objects under its plain keys too
            if not (isinstance(k, str) and k.startswith("py/")):
                restore(x, f"{where}.{k}")
        return v

    return restore(value, path), problems


def config_hash(config: Mapping[str, Any]) -> str:
    """MD5 hex digest of ``config`` as sorted JSON: SEML 0.5's ``make_hash``, so a config staged by
    SEML and by us with the same values gets the same hash. Non-JSON leaves hash by ``str()``."""
    text = json.dumps(config, sort_keys=True, default=str)
    return hashlib.md5(text.encode("utf-8")).hexdigest()


#: launcher fields that change what an experiment computes (its ranks), not just where it runs
SHAPE_FIELDS = ("nodes", "tasks_per_node", "gpus_per_node")


def experiment_hash(config: Mapping[str, Any], launcher: Mapping[str, Any] | None = None) -> str:
    """The ``config_hash`` that identifies an experiment in its collection.

    For a single-task point (1 node, 1 task, no GPU count) it is SEML's :func:`config_hash` of
    the config, so SEML and seml-hydra agree. A point with another shape (``nodes``,
    ``tasks_per_node``, ``gpus_per_node``) runs as a different experiment, so its shape is
    hashed with the config: sweeping ``slurm=cpu,multinode`` over one config gives two.
    Time, memory and partition are not part of the identity.
    """
    shape = {k: (launcher or {}).get(k) for k in SHAPE_FIELDS}
    if shape in (
        {"nodes": 1, "tasks_per_node": 1, "gpus_per_node": None},
        {k: None for k in SHAPE_FIELDS},
    ):
        return config_hash(config)
    return config_hash({**config, "__seml_hydra_shape__": shape})


_DELETED = "__seml_hydra_deleted__"


def dict_diff(base: Mapping[str, Any], other: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The leaves where ``other`` differs from ``base``, as ``[{"path": [k, ...], "value": v}]``.

    Lists are leaves. A key of ``base`` missing from ``other`` gives ``{"path": ..., "delete":
    True}``. ``apply_diff(base, dict_diff(base, other)) == other`` for JSON-like dicts. Paths are
    lists (not dotted strings) so keys with dots survive MongoDB. Sub-dicts ``other`` shares
    with ``base`` (the same object: compose's fast path) are skipped unread.
    """
    out: list[dict[str, Any]] = []
    _diff_walk(base, other, [], out)
    return out


#: exact types that are not mappings (tested before the slower ``Mapping`` ABC check)
_NOT_MAPPINGS = frozenset({str, int, float, bool, list, tuple, type(None)})


def _is_mapping(value: Any) -> bool:
    kind = type(value)
    if kind is dict:
        return True
    return kind not in _NOT_MAPPINGS and isinstance(value, Mapping)


def _diff_walk(
    a: Mapping[str, Any], b: Mapping[str, Any], path: list[Any], out: list[dict[str, Any]]
) -> None:
    """:func:`dict_diff` below ``path``, appended to ``out`` (a module function, not a closure
    that calls itself: such a closure is a reference cycle, left for the garbage collector
    with its ``out`` list on every call)."""
    for key, value in b.items():
        if key in a and a[key] is value:  # shared by the points (compose's fast path)
            continue
        if key in a and _is_mapping(a[key]) and _is_mapping(value):
            _diff_walk(a[key], value, [*path, key], out)
        elif key not in a or not same(a[key], value):
            out.append({"path": [*path, key], "value": value})
    for key in a:
        if key not in b:
            out.append({"path": [*path, key], "delete": True})


#: a :func:`patch_tree`: the key paths of its leaves, in :func:`dict_diff`'s order
PatchTree = tuple[tuple[Any, ...], ...]


def patch_tree(base: Mapping[str, Any], paths: Iterable[Sequence[Any]]) -> PatchTree | None:
    """The leaves of ``base`` on the way to ``paths``, as key paths in the order
    :func:`dict_diff` visits them (depth first, in ``base``'s own key order), for
    :func:`diff_along` (pure). A path ends at the first level where ``base`` holds no dict (a
    list is a leaf for :func:`dict_diff`), and a path below another one is covered by it.
    ``None`` when a path names a key ``base`` does not have."""
    children: dict[Any, list[Sequence[Any]] | None] = {}
    for path in paths:
        if not path:
            continue
        key, rest = path[0], path[1:]
        if key not in base:
            return None
        if children.get(key, []) is None:
            continue  # a shorter path ends here: the whole value is compared
        if not rest or not isinstance(base[key], Mapping):
            children[key] = None
        else:
            children.setdefault(key, []).append(rest)  # type: ignore[union-attr]
    out: list[tuple[Any, ...]] = []
    for key in base:  # base's own order: dict_diff's order
        if key not in children:
            continue
        below_paths = children[key]
        if below_paths is None:
            out.append((key,))
            continue
        below = patch_tree(base[key], below_paths)
        if below is None:
            return None
        out.extend((key, *leaf) for leaf in below)
    return tuple(out)


def diff_along(
    base: Mapping[str, Any], other: Mapping[str, Any], tree: PatchTree
) -> list[dict[str, Any]]:
    """:func:`dict_diff` of two dicts that differ only along the paths of ``tree``
    (:func:`patch_tree` of the dict both were copied from, copying only the dicts on those
    paths and setting keys it has: ``launch.compose.fast``'s points), reading only those paths: the
    same entries in the same order, without visiting the keys they share (a level both share,
    the same object, is not read below). Pure; raises ``KeyError`` when a key of ``tree`` is
    missing from either (not such a pair)."""
    out: list[dict[str, Any]] = []
    for leaf in tree:
        old, new = base, other
        for key in leaf:
            old, new = old[key], new[key]
            if old is new:
                break
        else:
            if _is_mapping(old) and _is_mapping(new):
                _diff_walk(old, new, list(leaf), out)
            elif not same(old, new):
                out.append({"path": list(leaf), "value": new})
    return out


def same(a: Any, b: Any) -> bool:
    """Equal with equal types all the way down (``1``, ``1.0`` and ``True`` differ): how
    :func:`dict_diff` tells a changed leaf, and how the launcher's fast composition is checked
    against Hydra's own (``seml_hydra.launch.compose``)."""
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is str or kind is int or kind is float or kind is bool or a is None:
        return bool(a == b)  # the leaves, tested by exact type first (the ABC check is slow)
    if isinstance(a, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)


def diff_parent(root: Any, path: Sequence[Any]) -> tuple[Any, Any]:
    """Walk a diff entry's ``path`` (:func:`dict_diff`) from ``root`` to the container of its
    leaf: returns ``(that container, the leaf's key)``. A missing level on the way is created
    as an empty dict (``root`` changes in place then). Works on plain dicts and on OmegaConf
    ``DictConfig`` nodes alike (the created level is read back, so it is the container's own
    node). Raises what the containers raise for a level that is not a mapping (``TypeError``,
    OmegaConf's errors)."""
    *parents, leaf = path
    node = root
    for key in parents:
        if key not in node:
            node[key] = {}
        node = node[key]
    return node, leaf


def apply_diff(base: Mapping[str, Any], diff: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Return a deep copy of ``base`` with ``diff`` (from :func:`dict_diff`) applied."""
    result = copy.deepcopy(dict(base))
    for entry in diff:
        node, leaf = diff_parent(result, entry["path"])
        if entry.get("delete"):
            node.pop(leaf, None)
        else:
            node[leaf] = copy.deepcopy(entry["value"])
    return result


#: ``(path in the Hydra node, field of the document's hydra block)``: the node's leaves the block
#: holds as fields of its own (``launch.document.hydra_doc``). With ``node_from_doc`` set, the
#: block's ``node_diff`` leaves them out and :func:`point_hydra_node` takes them from the fields
NODE_FIELDS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("runtime", "output_dir"), "output_dir"),
    (("overrides", "task"), "overrides"),
    (("job", "num"), "job_num"),
)


#: where Hydra keeps ``job.override_dirname``, which :func:`override_dirname` derives
DIRNAME_PATH = ("job", "override_dirname")


def override_dirname(node: Mapping[str, Any]) -> str | None:
    """``job.override_dirname`` of a resolved Hydra ``node`` derived from its ``overrides.task``
    as Hydra 1.3 composes it (``config_loader_impl.get_overrides_dirname``: the task override
    strings sorted, joined by ``item_sep``, each ``=`` replaced by ``kv_sep``), or None when that
    needs Hydra's override parser (``exclude_keys`` not empty) or the node lacks what it reads.
    Pure. The launcher leaves the value out of a document's diff only when this gives it
    exactly (``launch.document.hydra_doc``)."""
    try:
        conf = node["job"]["config"]["override_dirname"]
        task = node["overrides"]["task"]
        kv_sep, item_sep = conf["kv_sep"], conf["item_sep"]
    except (KeyError, TypeError):
        return None
    if conf.get("exclude_keys") or not isinstance(task, list):
        return None
    if not (isinstance(kv_sep, str) and isinstance(item_sep, str)):
        return None
    if not all(isinstance(line, str) for line in task):
        return None
    return re.sub(pattern="[=]", repl=kv_sep, string=item_sep.join(sorted(task)))


def covered(diff: Sequence[Mapping[str, Any]], path: Sequence[Any]) -> bool:
    """Whether an entry of ``diff`` (:func:`dict_diff`) sets or deletes ``path`` or a level
    above it."""
    size = len(path)
    return any(list(entry["path"]) == list(path[: len(entry["path"])]) for entry in diff
               if len(entry["path"]) <= size)  # fmt: skip


def point_hydra_node(
    base: Mapping[str, Any], hydra_doc: Mapping[str, Any] | None
) -> dict[str, Any]:
    """The point's resolved Hydra node from the launch's base node ``base`` (the payload's
    ``metadata.hydra_base``) and the document's ``hydra`` block ``hydra_doc``: a deep copy of
    ``base`` with the block's ``node_diff`` applied (:func:`apply_diff`) and, when the block says
    ``node_from_doc``, the :data:`NODE_FIELDS` the diff left out set from the block's own fields
    (``hydra.output_dir``, ``hydra.overrides``, ``hydra.job_num``) and ``job.override_dirname``
    derived from them (:func:`override_dirname`). An entry of the diff for such a path (or above
    it) wins: documents staged before ``node_from_doc`` hold them in the diff, and
    rebuild as before. Pure; every reader of a document's node goes through it."""
    hydra_doc = hydra_doc or {}
    diff = hydra_doc.get("node_diff") or []
    node = apply_diff(base, diff)
    if hydra_doc.get("node_from_doc"):
        for path, field in NODE_FIELDS:
            if field in hydra_doc and not covered(diff, path):
                parent, leaf = diff_parent(node, path)
                parent[leaf] = copy.deepcopy(hydra_doc[field])
        if not covered(diff, DIRNAME_PATH):
            derived = override_dirname(node)
            if derived is not None:
                node["job"]["override_dirname"] = derived
    return node


def pick_seed(config: Mapping[str, Any], drawn: int) -> int:
    """The experiment's seed: the app's own integer ``seed`` config value when it has one, else
    ``drawn`` (a number the caller drew at staging). SEML fixes the seed before ranks diverge."""
    seed = config.get("seed")
    if isinstance(seed, int) and not isinstance(seed, bool):
        return seed
    return drawn


def adds_seed(config: Mapping[str, Any]) -> bool:
    """Whether staging adds the experiment's seed to the stored ``config`` (pure): when the app's
    config has no top-level ``seed`` key. Sacred keeps a run's seed in ``config.seed``
    (Omniboard and SEML show it there); an app's own ``seed`` key is the seed already
    (:func:`pick_seed`) and stays as the app has it."""
    return "seed" not in config


def task_config(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The config the task runs with, from an experiment document (pure): the stored ``config``
    without the ``seed`` staging added (``hydra.added_seed``, :func:`adds_seed`), so the task's
    cfg is the app's own; documents staged before (no flag) as they are."""
    config = dict(doc.get("config") or {})
    hydra = doc.get("hydra")
    if isinstance(hydra, Mapping) and hydra.get("added_seed"):
        config.pop("seed", None)
    return config


def build_document(
    *,
    exp_id: int,
    batch_id: int,
    config: Mapping[str, Any],
    overrides: Sequence[str],
    hydra: HydraDoc,
    seed: int,
    seml: Mapping[str, Any],
    sbatch_options: Mapping[str, Any],
    experiments_per_job: int,
    git: GitDoc | None,
    add_time: datetime,
    launcher: Mapping[str, Any] | None = None,
    safe_config: Mapping[str, Any] | None = None,
    config_hash: str | None = None,
    safe_hydra: bool = False,
) -> dict[str, Any]:
    """Build the STAGED document of one sweep point.

    Args:
        exp_id, batch_id: from the collection's atomic counters.
        config: the point's resolved app config (no ``hydra`` key), JSON-like.
        overrides: the point's task overrides (``hydra.overrides.task``).
        hydra: the ``hydra`` block (see :class:`HydraDoc`).
        seed: from :func:`pick_seed`.
        seml: the ``seml`` block (executable, name, working_dir, output_dir, payload file id...).
        sbatch_options: the sbatch options this point is submitted with (``slurm[0]``).
        experiments_per_job: SEML's ``slurm.experiments_per_job``.
        git: ``{path, commit, dirty}`` or ``None`` outside a git repository (then omitted).
        add_time: staging time (UTC).
        launcher: the point's ``hydra.launcher`` node, for :func:`experiment_hash`.
        safe_config: ``to_bson_safe(config)`` when the caller has it already (stored as is).
        config_hash: ``experiment_hash(safe_config, launcher)`` when the caller has it already
            (the launcher hashes every point once, to look for duplicates before building).
        safe_hydra: ``hydra`` is BSON-safe already (the launcher builds it so): stored as is.

    Returns the document as a dict ready for ``insert_many``.
    """
    if safe_config is None:
        safe_config = to_bson_safe(config)
    hydra_block = dict(hydra) if safe_hydra else to_bson_safe(dict(hydra))
    stored_config = safe_config
    if adds_seed(safe_config):
        stored_config = {**safe_config, "seed": seed}
        hydra_block["added_seed"] = True
    doc: dict[str, Any] = {
        "_id": exp_id,
        "batch_id": batch_id,
        "status": states.STAGED,
        "seed": seed,
        "config": stored_config,
        "config_unresolved": overrides_to_nested(overrides),
        "config_hash": config_hash or experiment_hash(safe_config, launcher),
        "add_time": add_time,
        "seml": {"version": list(VERSION), **dict(seml)},
        "slurm": [
            {
                "experiments_per_job": experiments_per_job,
                "sbatch_options": to_bson_safe(dict(sbatch_options)),
            }
        ],
        "hydra": hydra_block,
    }
    if git is not None:
        doc["git"] = dict(git)
    return doc
