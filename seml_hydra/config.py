"""Launcher configuration: the typed dataclasses behind ``hydra/launcher=seml`` and ``seml_local``.

The config IS the documentation (as in hydra-submitit-launcher's ``config.py``): every field says
what it does and its unit. A field left ``None`` is never sent to sbatch.

This module is imported at every Hydra start (through the plugin shim), so it imports nothing but
``dataclasses`` and ``typing``; registration in Hydra's ConfigStore lives in the shim.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SLURM_LAUNCHER_TARGET = "hydra_plugins.seml_launcher.seml_launcher.SemlSlurmLauncher"
LOCAL_LAUNCHER_TARGET = "hydra_plugins.seml_launcher.seml_launcher.SemlLocalLauncher"


@dataclass
class DbConf:
    """Where the experiment documents go. All ``None``: see ``seml_hydra.store.settings`` for the order
    (environment variable ``SEML_MONGODB_URI``, ``~/.config/seml/mongodb.config``, embedded)."""

    # a MongoDB URI, e.g. mongodb://user:pass@host:27017/seml
    url: str | None = None
    # a SEML-format mongodb.config (YAML: username, password, host, port, database)
    config_file: str | None = None
    # database name; overrides the one from the URL or the config file
    database: str | None = None


@dataclass
class SemlLauncherConf:
    """Fields shared by the Slurm and the local launcher."""

    _target_: str = SLURM_LAUNCHER_TARGET

    # MongoDB collection the sweep's experiments go to (SEML's "collection")
    collection: str = "${hydra.job.name}"
    db: DbConf = field(default_factory=DbConf)
    # submitit's working folder: pickles and the jobs' stdout/stderr (%j = Slurm job id)
    submitit_folder: str = "${hydra.sweep.dir}/.submitit/%j"
    # true: wait for the experiments and return their results to Hydra;
    # false: return right after submission with a `seml_hydra.Submission` handle per point
    wait: bool = True
    # seconds between two MongoDB polls while waiting
    poll_interval_s: float = 2.0
    # sweep points run one after another in one array task (1 = one experiment per task)
    experiments_per_job: int = 1
    # at most this many array tasks run at once (sbatch --array=...%k); null = no limit
    array_parallelism: int | None = None
    # stage a new copy of points whose config is already in the collection
    force: bool = False
    # store the app's imported modules and config files in GridFS; jobs run that snapshot
    snapshot: bool = True
    # the project the snapshot is taken from (default: the app's git root, else its directory)
    project_root: str | None = None
    # files above this size (KB) are left out of the snapshot, with a message
    snapshot_max_file_kb: int = 1024
    # more Sacred observers for the primary rank, as _target_ nodes, e.g.
    # [{_target_: sacred.observers.FileStorageObserver, basedir: runs}]
    observers: list[Any] = field(default_factory=list)
    # log levels on the primary rank (global rank 0) and on the others
    primary_log_level: str = "INFO"
    other_log_level: str = "ERROR"

    # -- resources (submitit's generic names; the Slurm ones become sbatch options) --
    nodes: int = 1
    tasks_per_node: int = 1
    cpus_per_task: int | None = None
    gpus_per_node: int | None = None
    # memory per node in GB
    mem_gb: float | None = None
    # wall time limit in minutes
    timeout_min: int = 60
    # Slurm signals the job this many seconds before the time limit (see seml_hydra.job.requeue)
    signal_delay_s: int = 120
    # requeues on timeout/preemption of a task that opted in, before it ends FAILED
    max_requeues: int = 3
    partition: str | None = None
    qos: str | None = None
    account: str | None = None
    constraint: str | None = None
    exclude: str | None = None
    gres: str | None = None
    # shell lines run in the sbatch script before the task starts (e.g. module load ...)
    setup: list[str] | None = None
    # raw sbatch options without the leading dashes, e.g. {mail-type: END}
    additional_parameters: dict[str, Any] = field(default_factory=dict)


@dataclass
class SemlLocalLauncherConf(SemlLauncherConf):
    """submitit's LocalExecutor: the same pipeline on this machine (a laptop, a test)."""

    _target_: str = LOCAL_LAUNCHER_TARGET
