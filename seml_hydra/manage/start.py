"""``start``: submit STAGED experiments from the database alone (the launch's payload and the
document's Hydra diff rebuild each submission request)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from seml_hydra.core import states
from seml_hydra.core.documents import point_hydra_node
from seml_hydra.core.jobenv import environment_problem, private_umask_kept
from seml_hydra.core.paths import launch_paths_problem, unsafe_import_dir
from seml_hydra.job.failfast import OFF_ON_COMMAND_LINE, max_failures_problem
from seml_hydra.launch.submit import SubmitRequest, submit_requests
from seml_hydra.manage.selection import ManageError, state_values
from seml_hydra.store.db.job_db import job_db_config, job_db_environment
from seml_hydra.store.db.settings import resolve_db_settings
from seml_hydra.store.payload import hydra_base
from seml_hydra.track.query import and_

#: the launchers a document may name (``seml.launcher``) and the submitit cluster of each
EXECUTORS = {"seml_hydra.slurm": "slurm", "seml_hydra.local": "local"}


@dataclass
class StartedArray:
    """One array job ``start`` submitted: its Slurm (or local) ``array_id``, job ``name``,
    ``cluster`` (``"slurm"``/``"local"``), submitit ``folder``, the experiment ``ids`` and the
    fail-fast limit its experiments carry (``max_failures``; None: no fail-fast)."""

    array_id: str
    name: str
    cluster: str
    folder: str
    ids: list[int]
    max_failures: int | None = None
    #: ``(k, n, max_array_size)``: the k-th of n arrays cut at MaxArraySize (SubmittedArray.part)
    part: tuple[int, int, int] | None = None
    #: its resource group's label among the start's groups (SubmittedArray.label)
    label: str = ""


def no_payload_message(doc: Mapping[str, Any]) -> str:
    """Why ``start`` cannot run ``doc``, a STAGED document without ``seml.payload_file`` (pure).

    Such a document is either one SEML staged from a YAML file, or one of ours after SEML
    0.5.7's own ``reset``, which keeps only the fields SEML knows
    (``get_experiment_reset_op``: ``hydra``, ``seed`` and ``seml.payload_file`` go); the two
    look alike, so the message names both, ours first when the document names an executable."""
    seml = doc.get("seml")
    if not isinstance(seml, Mapping):
        seml = {}
    executable = seml.get("executable")
    ours = (
        "this experiment's seml-hydra fields (payload, hydra, seed) are gone, as SEML's own "
        "`reset` removes them: re-launch the sweep (its points are found by config hash and "
        "run again) or, next time, use seml-hydra's `seml <collection> reset`"
    )
    if not executable:
        return (
            f"Experiment {doc.get('_id')} has no seml.payload_file: it was not staged by the "
            f"seml-hydra launcher, or {ours}. Nothing was submitted."
        )
    return (
        f"Experiment {doc.get('_id')} has no seml.payload_file, so there is no Hydra app for "
        f"seml-hydra to run: either {ours}; or it was staged by SEML from a YAML file (executable "
        f"{executable!r}): start it with SEML's own `seml <collection> start`. Nothing was "
        "submitted."
    )


def build_requests(
    db: Any, docs: Sequence[Mapping[str, Any]], max_failures: int | None = None
) -> list[tuple[str, Any]]:
    """``(working_dir, SubmitRequest)`` per STAGED document, rebuilt from the database alone:
    the launcher node is the batch payload's base Hydra node with the document's diff applied,
    its ``max_failures`` replaced by ``max_failures`` when given.
    Raises ManageError for a document staged by SEML itself (no ``seml.payload_file``), an
    unknown executor, or a payload that is gone."""

    bases: dict[str, dict[str, Any]] = {}
    judged: set[str] = set()
    out = []
    for doc in docs:
        seml = doc.get("seml") or {}
        payload = seml.get("payload_file")
        if not payload:
            raise ManageError(no_payload_message(doc))
        cluster = EXECUTORS.get(str(seml.get("launcher")))
        if cluster is None:
            raise ManageError(
                f"Experiment {doc['_id']} names the launcher {seml.get('launcher')!r}; "
                f"`seml start` knows {', '.join(EXECUTORS)}."
            )
        if payload not in bases:
            try:
                bases[payload] = hydra_base(db, payload)
            except Exception as error:
                raise ManageError(
                    f"The payload {payload} of experiment {doc['_id']} is gone from GridFS "
                    f"({type(error).__name__}); launch the sweep again."
                ) from None
        node = point_hydra_node(bases[payload], doc.get("hydra"))
        launcher = dict(node["launcher"])
        if max_failures is not None:
            launcher["max_failures"] = max_failures
        workdir = str(seml.get("working_dir") or os.getcwd())
        folder = str(launcher.get("submitit_folder"))
        if not os.path.isabs(folder):
            launcher["submitit_folder"] = os.path.join(workdir, folder)
        sweep = dict(node.get("sweep") or {})
        if sweep.get("dir") is not None and not os.path.isabs(str(sweep["dir"])):
            sweep["dir"] = os.path.join(workdir, str(sweep["dir"]))
        hydra = {**node, "launcher": launcher, "sweep": sweep}
        problem = launch_paths_problem(hydra, judged, workdir)
        if problem is None and workdir not in judged:
            # the jobs run (and import) there, with this environment's PATH and PYTHONPATH
            problem = unsafe_import_dir(workdir) or environment_problem(os.environ, workdir)
            judged.add(workdir)
        if problem is not None:  # checked at launch; it may have changed since
            raise ManageError(f"Experiment {doc['_id']}: {problem}; nothing was started.")
        out.append(
            (workdir, SubmitRequest(doc["_id"], launcher, payload, doc["batch_id"], cluster))
        )
    return out


def start(
    db: Any,
    collection_name: str,
    query: Mapping[str, Any],
    *,
    limit: int = 0,
    max_failures: int | None = None,
) -> list[StartedArray]:
    """Submit the matching STAGED experiments (at most ``limit``, 0 = all) from the database
    alone, one array job per batch and resource set. Submission runs in the launch's working
    directory (jobs start where the sweep was launched). ``max_failures``: fail-fast for what
    this call submits (``job.failfast``; None: each launch's own ``max_failures``). Raises
    ``SubmissionError`` when sbatch refuses (those experiments stay STAGED), ``ManageError``
    for a ``max_failures`` below 1."""
    problem = max_failures_problem(max_failures, "--max-failures", OFF_ON_COMMAND_LINE)
    if problem is not None:
        raise ManageError(f"{problem}; nothing was submitted.")

    q = and_(query, {"status": {"$in": state_values([states.STAGED])}})
    docs = list(db[collection_name].find(q).sort("_id", 1))
    if limit > 0:
        docs = docs[:limit]
    if not docs:
        return []
    old = [d["_id"] for d in docs if d.get("status") != states.STAGED]
    if old:  # SEML's "QUEUED": the submission step moves STAGED documents only
        db[collection_name].update_many(
            # only SEML's old spelling: a document a concurrent launch or start moved on
            # meanwhile (PENDING, RUNNING) must not be put back
            {"_id": {"$in": old}, "status": {"$in": list(states.ALIASES)}},
            {"$set": {"status": states.STAGED}},
        )
    settings = resolve_db_settings(None)
    by_dir: dict[str, list[Any]] = {}
    for workdir, request in build_requests(db, docs, max_failures):
        by_dir.setdefault(workdir, []).append(request)
    started = []
    launch_id = uuid.uuid4().hex[:12]  # one fail-fast launch (job.failfast) for every array
    for workdir, requests in by_dir.items():
        launch_db = requests[0].launcher.get("db")
        # what submitit writes (pickles, job folders) and the jobs write: not others' to change
        with _cwd(workdir), private_umask_kept():
            arrays = submit_requests(
                db[collection_name],
                collection_name,
                requests,
                db_cfg=job_db_config(settings, launch_db),
                job_env=job_db_environment(settings, launch_db),
                launch_id=launch_id,
            )
        for array in arrays:
            if not array.jobs:  # cancelled at once: its experiments were deleted meanwhile
                continue
            ids = sorted(i for _, group in array.jobs.values() for i in group)
            stops_at = (array.fail_fast or {}).get("max_failures")
            started.append(
                StartedArray(
                    array.array_id,
                    array.name,
                    array.cluster,
                    array.folder,
                    ids,
                    stops_at,
                    part=array.part,
                    label=array.label,
                )
            )
    return started


def fail_fast_lines(arrays: Sequence[StartedArray], option: int | None) -> list[str]:
    """What ``start`` says about the fail-fast limit it applies (pure): one line per limit of
    the ``arrays`` it started (``option``: the ``--max-failures`` given, else each launch's own
    ``max_failures``); none when no array has one. E.g. ``Fail-fast: once 2 of the 6
    experiment(s) started now ended FAILED, the others stop (--max-failures 2).``"""
    by_limit: dict[int, list[int]] = {}
    for array in arrays:
        if array.max_failures is not None:
            by_limit.setdefault(array.max_failures, []).extend(array.ids)
    source = "--max-failures" if option is not None else "their launch's max_failures ="
    return [
        f"Fail-fast: once {limit} of the {len(ids)} experiment(s) started now ended FAILED, "
        f"the others stop ({source} {limit})."
        for limit, ids in sorted(by_limit.items())
    ]


class _cwd:
    def __init__(self, path: str) -> None:
        self.path = path
        self.old = ""

    def __enter__(self) -> None:
        self.old = os.getcwd()
        if os.path.isdir(self.path):
            os.chdir(self.path)

    def __exit__(self, *exc: Any) -> None:
        os.chdir(self.old)
