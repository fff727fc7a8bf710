"""Experiments grouped by what decides their liveness: one MongoDB aggregate instead of one
decoded document per experiment (the CLI works on groups, not documents).

All experiments of one Slurm task (``experiments_per_job > 1``: thousands per task) share the
fields ``track.jobs`` and ``track.outputs`` read to judge them: ``status``, ``execution``,
``slurm[i]``'s job fields, ``seml.output_dir`` / ``working_dir``, ``host.hostname``, whether
they were cancelled and whether their heartbeat is fresh. :func:`group_pipeline` (pure) groups
the matching documents by exactly these fields; :func:`task_groups` runs it and returns one
:class:`Group` per distinct value: a *representative* document (:func:`representative`) that the
pure decisions (``task_of``, ``array_of``, ``decide_killed``, ``document_trace``...) take as they
would take any of its experiments, and the group's ids. A decision made for the representative
holds for every id of the group, so updates go by ``_id`` list of whole groups
(``update_many``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from seml_hydra.core import states
from seml_hydra.track.query import grouped

#: the document paths the liveness decisions read (``track.jobs.task_of``, ``array_of``,
#: ``local_process``, ``recorded_process_start``; ``track.outputs.output_file``, ``output_folder``, ``recorded_jobs``,
#: ``submission_problem``); ``execution.cancel_time`` and the heartbeat enter as booleans
GROUP_FIELDS = (
    "status",
    "execution.cluster",
    "execution.array_id",
    "execution.task_id",
    "execution.slurm_output_file",
    "execution.hostname",
    "execution.process_start",
    "slurm.cluster",
    "slurm.array_id",
    "slurm.task_id",
    "slurm.job_id",
    "slurm.num_tasks",
    "slurm.output_files_template",
    "seml.output_dir",
    "seml.working_dir",
    "host.hostname",
)

#: the top-level keys of a representative document that come from :data:`GROUP_FIELDS`
_TOP = tuple(dict.fromkeys(f.split(".")[0] for f in GROUP_FIELDS))

#: every top-level field :func:`group_fields` reads (:data:`GROUP_FIELDS`' and the heartbeat's):
#: two documents holding the same values there fall in the same group
JUDGED_FIELDS = (*_TOP, "heartbeat", "start_time")


@dataclass(frozen=True)
class Group:
    """Experiments judged alike: ``doc`` is the representative document (its ``_id`` is the
    group's index, not an experiment id), ``ids`` the experiments' ids in ``_id`` order.
    ``where``: a query matching exactly the group's experiments, which an update of the group
    uses instead of its ids (``track.killed``'s sampled groups); None: by its ids."""

    doc: dict[str, Any]
    ids: list[Any]
    where: dict[str, Any] | None = None


def same_as(sample: Mapping[str, Any]) -> dict[str, Any]:
    """The aggregation expression (for ``$expr``) that a document holds at every one of
    :data:`JUDGED_FIELDS` exactly what ``sample`` (a document read with them) holds, or lacks
    the field as ``sample`` does (pure). MongoDB compares the values as a ``$group`` key does,
    so the documents it matches are grouped with ``sample`` by :func:`task_groups`, whatever the
    time (a heartbeat is equal, hence as fresh). Sufficient, not necessary: a document of the
    same group holding a field the grouping does not read (``slurm[i].sbatch_options``) with
    another value is not matched."""
    return {
        "$and": [
            {"$eq": [f"${name}", {"$literal": sample[name]}]}
            if name in sample
            else {"$eq": [{"$type": f"${name}"}, "missing"]}
            for name in JUDGED_FIELDS
        ]
    }


def numbered(groups: Sequence[Group]) -> list[Group]:
    """``groups`` with each representative's ``_id`` its index in the list (pure): groups read
    by more than one query made indexes unique again."""
    return [Group({**g.doc, "_id": n}, g.ids, g.where) for n, g in enumerate(groups)]


def utc_now() -> datetime:
    """The current time as a naive UTC datetime (how pymongo returns Sacred's times)."""
    return datetime.now(timezone.utc).replace(tzinfo=None)


def _date_or_null(path: str) -> dict[str, Any]:
    return {"$cond": [{"$eq": [{"$type": path}, "date"]}, path, None]}


def group_fields(since: datetime) -> dict[str, Any]:
    """The projection :func:`task_groups` groups by (pure): :data:`GROUP_FIELDS`, and
    ``_fresh``: the Sacred ``heartbeat`` (else ``start_time``; the first of them that is a
    date, as ``track.jobs.last_sign_of_life``) is later than ``since`` (naive UTC), and
    ``_cancelled``: ``execution.cancel_time`` is set and not null (``manage.cancel.CANCEL_MARK``)."""
    sign = {
        "$cond": [
            {"$eq": [{"$type": "$heartbeat"}, "date"]},
            "$heartbeat",
            _date_or_null("$start_time"),
        ]
    }
    fields: dict[str, Any] = {field: 1 for field in GROUP_FIELDS}
    fields["_fresh"] = {"$gt": [sign, since]}
    fields["_cancelled"] = {"$ne": [{"$ifNull": ["$execution.cancel_time", None]}, None]}
    return fields


def representative(key: Mapping[str, Any], index: int, now: datetime) -> dict[str, Any]:
    """The document standing for a group whose aggregate key is ``key`` (pure): the key's
    fields, ``_id`` = ``index``, ``execution.cancel_time`` = ``now`` when cancelled and
    ``heartbeat`` = ``now`` when fresh (so ``track.jobs.last_sign_of_life`` and the
    ``cancel_time`` checks decide for it as for each of its experiments, given the same ``now``).
    """
    doc = {name: key[name] for name in _TOP if name in key}
    doc["_id"] = index
    if key.get("_cancelled"):
        execution = doc.get("execution")
        doc["execution"] = {**(execution if isinstance(execution, Mapping) else {})}
        doc["execution"]["cancel_time"] = now
    if key.get("_fresh"):
        doc["heartbeat"] = now
    return doc


def task_groups(
    collection: Any,
    query: Mapping[str, Any],
    *,
    now: datetime | None = None,
    heartbeat_stale_s: float = states.HEARTBEAT_STALE_S,
) -> list[Group]:
    """The :class:`Group` s of the documents of ``collection`` matching ``query``: one aggregate
    (``track.query.grouped`` on :func:`group_fields`), groups in the order of their first id. ``now`` (naive UTC,
    default: now) is the time the representatives' fresh heartbeats carry: pass the same
    ``now`` to ``track.jobs.decide_killed``. Raises pymongo errors."""
    now = now or utc_now()
    since = now - timedelta(seconds=heartbeat_stale_s)
    rows = grouped(collection, query, group_fields(since))
    return [Group(representative(key, i, now), ids) for i, (key, ids) in enumerate(rows)]


def ids_of(groups: Sequence[Group], indexes: Iterable[int] | None = None) -> list[Any]:
    """The experiment ids of ``groups`` (of those whose representative ``_id`` is among
    ``indexes`` when given), in group order (pure)."""
    wanted = None if indexes is None else set(indexes)
    return [i for g in groups if wanted is None or g.doc["_id"] in wanted for i in g.ids]


def docs_of(groups: Sequence[Group]) -> list[dict[str, Any]]:
    """The representatives of ``groups`` (pure)."""
    return [g.doc for g in groups]
