"""Launcher configuration: the typed dataclasses behind ``hydra/launcher=seml`` and ``seml_local``.

The config IS the documentation (as in hydra-submitit-launcher's ``config.py``): every field says
what it does and its unit. A field left ``None`` is never sent to sbatch.

Every field of the launcher says how it reaches submitit, in its metadata (``ROLE``), as
hydra-submitit-launcher derives its split from ``BaseQueueConf`` (generic keys as they are, the
others with the executor's prefix): :data:`GENERIC` (a submitit generic executor parameter,
same name, Slurm and local executor), :data:`SLURM` (Slurm only: ``slurm_<name>``),
:data:`EXECUTOR` (an argument of the executor's constructor, ``<cluster>_<name>``, as
hydra-submitit-launcher passes ``python``) or :data:`LAUNCHER` (read by the launcher or the
jobs, never an executor parameter). ``SBATCH``
names the sbatch option a value is recorded under in ``slurm[0].sbatch_options`` (SEML's
record). ``seml_hydra.launch.sbatch`` derives the executor parameters, the sbatch options and
the resource key from them; a field without a role fails ``tests/unit/test_submit_params.py``.

This module is imported at every Hydra start (through the plugin shim), so it imports nothing but
``dataclasses``, ``typing`` and ``collections.abc``; registration in Hydra's ConfigStore lives in
the shim. Its dataclasses are pickled by name inside payloads (Hydra's ConfigStore state): keep
their names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, field
from typing import Any

SLURM_LAUNCHER_TARGET = "hydra_plugins.seml_launcher.seml_launcher.SemlSlurmLauncher"
LOCAL_LAUNCHER_TARGET = "hydra_plugins.seml_launcher.seml_launcher.SemlLocalLauncher"

#: metadata key of a launcher field: how it reaches submitit (one of :data:`ROLES`)
ROLE = "submitit"
#: metadata key of a launcher field: its sbatch option name in ``slurm[0].sbatch_options``
SBATCH = "sbatch"
#: submitit's generic executor parameter of the same name (both executors)
GENERIC = "generic"
#: Slurm only: submitit's ``slurm_<name>`` parameter (an ``#SBATCH`` line or the script's setup)
SLURM = "slurm"
#: an argument of submitit's executor constructor: ``<cluster>_<name>`` to ``AutoExecutor``
EXECUTOR = "executor"
#: read by the launcher or the jobs; never an executor parameter
LAUNCHER = "launcher"
ROLES = (GENERIC, SLURM, EXECUTOR, LAUNCHER)


def _field(role: str, default: Any, factory: Callable[[], Any] | None, sbatch: str | None) -> Any:
    metadata = {ROLE: role, SBATCH: sbatch}
    if factory is not None:
        return field(default_factory=factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def generic(default: Any = MISSING, *, sbatch: str | None = None) -> Any:
    """A dataclass field with role :data:`GENERIC`, recorded as sbatch option ``sbatch``."""
    return _field(GENERIC, default, None, sbatch)


def slurm(
    default: Any = MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    sbatch: str | None = None,
) -> Any:
    """A dataclass field with role :data:`SLURM`, recorded as sbatch option ``sbatch``."""
    return _field(SLURM, default, factory, sbatch)


def executor(default: Any = MISSING) -> Any:
    """A dataclass field with role :data:`EXECUTOR` (an executor constructor argument)."""
    return _field(EXECUTOR, default, None, None)


def launcher_only(default: Any = MISSING, *, factory: Callable[[], Any] | None = None) -> Any:
    """A dataclass field with role :data:`LAUNCHER` (never sent to submitit)."""
    return _field(LAUNCHER, default, factory, None)


@dataclass
class DbConf:
    """Where the experiment documents go. All ``None``: see ``seml_hydra.store.db.settings`` for the order
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

    # the launcher class Hydra instantiates (set by hydra/launcher=seml or seml_local)
    _target_: str = launcher_only(SLURM_LAUNCHER_TARGET)

    # MongoDB collection the sweep's experiments go to (SEML's "collection")
    collection: str = launcher_only("${hydra.job.name}")
    # where the documents go: db.url, db.config_file, db.database (all null: SEML_MONGODB_URI,
    # then ~/.config/seml/mongodb.config, then the embedded MongoDB)
    db: DbConf = launcher_only(factory=DbConf)
    # submitit's working folder: pickles and the jobs' stdout/stderr (%j = Slurm job id)
    submitit_folder: str = launcher_only("${hydra.sweep.dir}/.submitit/%j")
    # true: wait for the experiments and return their results to Hydra;
    # false: return right after submission with a `seml_hydra.Submission` handle per point
    wait: bool = launcher_only(True)
    # seconds between two MongoDB polls while waiting (stretched when counting is slow)
    poll_interval_s: float = launcher_only(0.25)
    # fail-fast: once this many experiments of the launch ended FAILED, its other experiments
    # stop (INTERRUPTED, running ones cancelled) and a waiting launcher exits non-zero; the jobs
    # keep the rule, so it holds with wait=false too (seml_hydra.job.failfast); null = off.
    # An integer >= 1, checked by the launcher (typed Any so that 1.5, abc or true get its
    # one-line refusal instead of OmegaConf's conversion error)
    max_failures: Any = launcher_only(None)
    # sweep points run one after another in one array task (1 = one experiment per task)
    experiments_per_job: int = launcher_only(1)
    # at most this many array tasks run at once (sbatch --array=...%k); null = no limit
    array_parallelism: int | None = slurm(None)
    # stage a new copy of points whose config is already in the collection
    force: bool = launcher_only(False)
    # the experiments' description (SEML's seml.description; per point, so ${...} of the
    # app's config resolves for each); `seml <collection> description set` changes it later
    description: str | None = launcher_only(None)
    # store the project's Python files and the app's config files in GridFS; jobs run that snapshot
    snapshot: bool = launcher_only(True)
    # the project the snapshot is taken from (default: the app's git root, else its directory)
    project_root: str | None = launcher_only(None)
    # files above this size (KB) are left out of the snapshot, with a message
    snapshot_max_file_kb: int = launcher_only(1024)
    # more Sacred observers for the primary rank, as _target_ nodes, e.g.
    # [{_target_: sacred.observers.FileStorageObserver, basedir: runs}]
    observers: list[Any] = launcher_only(factory=list)
    # start only after this batch: its id (3) or collection:batch (train:3); Slurm only
    after: str | None = launcher_only(None)
    # ok: after it COMPLETED (sbatch --dependency=afterok); any: after it ended (afterany)
    after_kind: str = launcher_only("ok")
    # early stopping through seml_hydra.report(name, value, step) (seml_hydra.core.pruning):
    # {rule: asha, metric: loss, mode: min, min_step: 1, reduction_factor: 3, max_step: null}
    # or {rule: median, metric: loss, mode: min, warmup_steps: 0, min_experiments: 5,
    # max_step: null} (max_step: the run's last step, no decision at or past it); null: off
    pruner: Any = launcher_only(None)
    # log level on the primary rank (global rank 0)
    primary_log_level: str = launcher_only("INFO")
    # log level on the other ranks
    other_log_level: str = launcher_only("ERROR")

    # -- resources (submitit's generic names; the Slurm ones become sbatch options) --

    # nodes per experiment (sbatch --nodes); every rank runs the task
    nodes: int = generic(1, sbatch="nodes")
    # tasks (ranks) per node (sbatch --ntasks-per-node)
    tasks_per_node: int = generic(1, sbatch="ntasks-per-node")
    # CPUs per task (sbatch --cpus-per-task; null: Slurm's default, 1)
    cpus_per_task: int | None = generic(None, sbatch="cpus-per-task")
    # GPUs per node (sbatch --gpus-per-node), shared by the node's tasks
    gpus_per_node: int | None = generic(None, sbatch="gpus-per-node")
    # memory per node in GB (recorded as sbatch's --mem=<n>G: seml_hydra.launch.sbatch.mem_option)
    mem_gb: float | None = generic(None, sbatch="mem")
    # GPUs per task, bound to it (sbatch and srun --gpus-per-task): each rank sees its own
    gpus_per_task: int | None = slurm(None, sbatch="gpus-per-task")
    # how srun binds GPUs to tasks (srun --gpu-bind, e.g. single:1, per_task:1, closest)
    gpu_bind: str | None = launcher_only(None)
    # seml_local only: the machine's GPU ids to spread over the jobs and their ranks (job i,
    # rank r gets its own gpus_per_task of them; seml_hydra.job.devices.local_rank_gpus)
    visible_gpus: list[Any] | None = launcher_only(None)
    # CPUs per allocated GPU (sbatch --cpus-per-gpu; Slurm wants gpus_per_task with it)
    cpus_per_gpu: int | None = slurm(None, sbatch="cpus-per-gpu")
    # memory per allocated GPU, in sbatch's syntax: 8G, 4096 (MB), ...
    mem_per_gpu: str | None = slurm(None, sbatch="mem-per-gpu")
    # memory per allocated CPU, in sbatch's syntax: 8G, 4096 (MB), ...
    mem_per_cpu: str | None = slurm(None, sbatch="mem-per-cpu")
    # wall time limit in minutes
    timeout_min: int = generic(60, sbatch="time")
    # Slurm signals the job this many seconds before the time limit (see seml_hydra.job.requeue)
    signal_delay_s: int = slurm(120)
    # requeues on timeout/preemption of a task that opted in, before it ends FAILED
    max_requeues: int = launcher_only(3)
    # the Slurm partition (sbatch --partition)
    partition: str | None = slurm(None, sbatch="partition")
    # quality of service (sbatch --qos)
    qos: str | None = slurm(None, sbatch="qos")
    # the account charged (sbatch --account)
    account: str | None = slurm(None, sbatch="account")
    # node features required (sbatch --constraint, e.g. a100|h100)
    constraint: str | None = slurm(None, sbatch="constraint")
    # nodes never used (sbatch --exclude, e.g. node[3-4])
    exclude: str | None = slurm(None, sbatch="exclude")
    # generic resources per node (sbatch --gres, e.g. gpu:2)
    gres: str | None = slurm(None, sbatch="gres")
    # only these nodes (sbatch --nodelist, e.g. node[1-2])
    nodelist: str | None = slurm(None, sbatch="nodelist")
    # the nodes to itself: true (sbatch --exclusive), or user / mcs / topo (--exclusive=<value>)
    exclusive: Any = slurm(None, sbatch="exclusive")
    # Slurm mails mail_user on these events, e.g. END,FAIL (sbatch --mail-type)
    mail_type: str | None = slurm(None, sbatch="mail-type")
    # who gets the mails of mail_type (sbatch --mail-user)
    mail_user: str | None = slurm(None, sbatch="mail-user")
    # a prefix of the job name: <name>_<collection>_<batch_id> (null: <collection>_<batch_id>)
    name: str | None = launcher_only(None)
    # stderr into the stdout file (one <job>_<rank>_log.out, no .err)
    stderr_to_stdout: bool | None = generic(None)
    # the command the job runs Python with (default: this interpreter), e.g.
    # "apptainer exec img.sif python" or "/opt/conda/envs/x/bin/python"
    python: str | None = executor(None)
    # extra srun arguments, one list entry each, e.g. [--cpu-bind=cores, --container-image=x]
    srun_args: list[str] | None = slurm(None)
    # shell lines run in the sbatch script before the task starts (e.g. module load ...)
    setup: list[str] | None = slurm(None)
    # raw sbatch options without the leading dashes, e.g. {mail-type: END}
    additional_parameters: dict[str, Any] = slurm(factory=dict)


@dataclass
class SemlLocalLauncherConf(SemlLauncherConf):
    """submitit's LocalExecutor: the same pipeline on this machine (a laptop, a test)."""

    # the launcher class Hydra instantiates (set by hydra/launcher=seml_local)
    _target_: str = launcher_only(LOCAL_LAUNCHER_TARGET)
