"""The experiment document as types: one MongoDB document per sweep point, SEML 0.5.7's fields
(``seml/document.py`` of SEML 0.5.7: ``ExperimentDoc`` and its blocks) plus ours, and the
pymongo types of the database and its collections.

For the type checker only: nothing here checks a document at run time, and a document read
from the database may hold fields of other SEML versions or be missing any of these (readers
still ``.get`` what a run may not have written). Blocks whose every field may be missing are
``total=False``; ``ExperimentDoc``'s fields staging always writes are required.

pymongo is imported for the type checker only (``TYPE_CHECKING``): importing this module
imports no pymongo. :data:`Database`, :data:`Collection` and :data:`ExperimentCollection` are
for annotations only (at run time they are strings).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeAlias, TypedDict, cast

from seml_hydra.core.documents import GitDoc, HydraDoc

if TYPE_CHECKING:
    import pymongo.collection
    import pymongo.database

__all__ = [
    "AttemptDoc",
    "Collection",
    "Database",
    "ExecutionDoc",
    "ExperimentCollection",
    "ExperimentDoc",
    "FailFastDoc",
    "GitDoc",
    "HostDoc",
    "HydraDoc",
    "PrunedDoc",
    "SacredExperimentDoc",
    "SemlDoc",
    "SlurmDoc",
    "StatDoc",
    "StatsDoc",
    "experiment_collection",
]


class SemlDoc(TypedDict, total=False):
    """``seml`` block. SEML 0.5.7's fields, of which seml-hydra writes ``version``,
    ``executable``, ``name``, ``working_dir``, ``output_dir``, ``command`` and (documents of
    earlier versions) ``source_files``; the rest may come from documents SEML staged."""

    version: list[int | str]  # SEML's schema version, ``core.documents.VERSION``
    executable: str  # the app's script (absolute)
    name: str  # the experiment's name (Slurm job name, Sacred's experiment name)
    working_dir: str
    output_dir: str
    description: str
    conda_environment: str | None
    stash_all_py_files: bool
    output_file: str
    #: ``[[path relative to the project root, GridFS id], ...]``: the code snapshot as SEML and
    #: documents of earlier seml-hydra versions store it (now: ``source_manifest``)
    source_files: list[list[Any]]
    use_uploaded_sources: bool
    command: str | None
    command_unresolved: str | None
    temp_dir: str | None
    env: dict[str, str] | None
    # ours
    source_manifest: Any  # GridFS id of the launch's manifest (``store.snapshot.sources``)
    main_file: str  # the script's path inside the snapshot
    payload_file: Any  # GridFS id of the batch payload (``store.payload``)
    launcher: str  # the launcher that staged it (``manage.start``'s launchers)
    launched_from_python: bool  # no command line to print (``seml print-command``)


class SlurmDoc(TypedDict, total=False):
    """One entry of ``slurm``: SEML's ``experiments_per_job``, ``sbatch_options`` (staging
    writes both) and what a submission writes (``manage.lifecycle.SLURM_JOB_FIELDS``)."""

    experiments_per_job: int
    sbatch_options: dict[str, Any]
    sbatch_options_template: str | None
    array_id: int
    task_id: int
    job_id: str
    num_tasks: int
    output_files_template: str
    reschedule_file: str
    submitting: Any  # the submission mark while ``sbatch`` runs (``launch.submit``)


class ExecutionDoc(TypedDict, total=False):
    """``execution`` block: where the run was claimed (``job.slurm_env``, ``job.claim``);
    SEML's ``cluster``, ``array_id``, ``task_id``, ``slurm_output_file`` and ours."""

    cluster: str  # Slurm's cluster, or "local"
    array_id: int
    task_id: int
    slurm_output_file: str
    restart: int  # the task's requeue count when it claimed the run
    claim_time: datetime


class SacredExperimentDoc(TypedDict, total=False):
    """``experiment`` block, Sacred's (``job.observer.sacred_experiment_info``)."""

    base_dir: str
    dependencies: list[str]
    mainfile: str
    name: str
    repositories: list[Any]
    sources: list[list[Any]]  # ``[[path, GridFS id of Sacred's copy], ...]``


class HostDoc(TypedDict, total=False):
    """``host`` block, Sacred's (SEML 0.5 may store a plain host name instead)."""

    hostname: str
    os: list[str]
    python_version: str
    cpu: str
    gpus: dict[str, Any]
    ENV: dict[str, str]


class StatDoc(TypedDict):
    """Time and memory of one process (SEML 0.5's), seconds and bytes."""

    user_time: float
    system_time: float
    max_memory_bytes: int


class StatsDoc(TypedDict, total=False):
    """``stats`` block (``job.stats``): SEML 0.5's keys, plus ``max_rss_mb`` (MiB)."""

    real_time: float  # seconds
    self: StatDoc
    children: StatDoc
    max_rss_mb: float
    pytorch: dict[str, int]  # ``{"gpu_max_memory_bytes": B}`` when torch used a GPU


class FailFastDoc(TypedDict, total=False):
    """``fail_fast`` block (``job.failfast``): the launch's group and its ``max_failures``;
    ``reason`` and ``stop_time`` once the group was stopped (heartbeats then write nothing)."""

    group: str
    max_failures: int
    reason: str
    stop_time: datetime


class PrunedDoc(TypedDict):
    """``pruned`` block (``job.pruning``): the step and value a pruning rule stopped the run at."""

    step: int
    value: float
    rule: str


class AttemptDoc(TypedDict, total=False):
    """One entry of ``attempts``, an earlier run of the experiment (``core.attempts``): a field
    the run never wrote is missing."""

    attempt: int
    status: str
    start_time: datetime
    stop_time: datetime
    heartbeat: datetime
    host: str
    cluster: str
    array_id: int
    task_id: int
    restart: int
    output_file: str
    fail_trace_tail: list[str]
    reason: str
    pruned: PrunedDoc
    moved_by: str  # what moved it into the history (``core.attempts``)
    moved_time: datetime


class _StagedDoc(TypedDict):
    """The fields staging always writes (``core.documents.build_document``)."""

    _id: int
    batch_id: int
    status: str  # ``core.states``
    seed: int
    config: dict[str, Any]
    config_unresolved: dict[str, Any]
    config_hash: str
    add_time: datetime
    seml: SemlDoc
    slurm: list[SlurmDoc]


class ExperimentDoc(_StagedDoc, total=False):
    """An experiment document: the staged fields, then what launching and running it add."""

    hydra: HydraDoc  # ours: how Hydra saw the sweep point
    git: GitDoc
    fail_fast: FailFastDoc
    # the run (Sacred's observer, ``job.observer``; SEML's fields)
    execution: ExecutionDoc
    start_time: datetime
    heartbeat: datetime
    stop_time: datetime
    host: HostDoc
    experiment: SacredExperimentDoc
    meta: dict[str, Any]
    command: str
    format: str
    captured_out: str
    captured_out_incomplete: bool  # ours: the output after the last heartbeat may be missing
    result: Any
    info: dict[str, Any]
    artifacts: list[Any]
    resources: list[Any]
    fail_trace: list[str]
    stats: StatsDoc
    # ours
    pruning: dict[str, Any]  # ``{"values": {step: value}, "decisions": {step: bool}}``
    pruned: PrunedDoc
    attempts: list[AttemptDoc]
    requeues: int  # how often Slurm requeued the run (``job.requeue``)
    rank_failures: list[dict[str, Any]]  # ``job.failures``: a failed rank's trace, per rank


#: a MongoDB database (any of its collections holds plain documents)
Database: TypeAlias = "pymongo.database.Database[dict[str, Any]]"
#: a collection of plain documents (metrics, counters, GridFS's files)
Collection: TypeAlias = "pymongo.collection.Collection[dict[str, Any]]"
#: a collection of experiment documents
ExperimentCollection: TypeAlias = "pymongo.collection.Collection[ExperimentDoc]"


def experiment_collection(db: Database, name: str) -> ExperimentCollection:
    """The collection ``name`` of ``db`` as a collection of experiment documents (for the type
    checker: the same pymongo object ``db[name]`` is; no call to the server)."""
    return cast("ExperimentCollection", db[name])
