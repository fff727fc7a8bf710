"""What a point's ``hydra.launcher`` node becomes for Slurm (pure): validation, the submitit
executor parameters, the sbatch options recorded in the documents, the resource key that groups
points into array jobs, and how ids are cut into array tasks and arrays.

The mapping is derived from the config dataclass (``seml_hydra.config.SemlLauncherConf``), as
hydra-submitit-launcher derives its split from ``BaseQueueConf``: each field's ``ROLE`` metadata
says whether it is a generic submitit parameter (:data:`GENERIC_KEYS`), a Slurm-only one sent as
``slurm_<key>`` (:data:`SLURM_KEYS`), an argument of the executor's constructor
(:data:`EXECUTOR_KEYS`) or read by the launcher alone; its ``SBATCH`` metadata names its sbatch
option (:data:`SBATCH_NAMES`). A new field is classified where it is declared.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import shlex
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from seml_hydra import config
from seml_hydra.config import SemlLauncherConf
from seml_hydra.core.pruning import parse_pruner
from seml_hydra.job.devices import check_visible_gpus
from seml_hydra.job.entry import guarded_python
from seml_hydra.job.failfast import max_failures_problem
from seml_hydra.launch.after import dependency_type, parse_after

_FIELDS = dataclasses.fields(SemlLauncherConf)
#: the fields of ``hydra.launcher`` (``seml_hydra.config.SemlLauncherConf``)
LAUNCHER_FIELDS = tuple(f.name for f in _FIELDS)
#: generic submitit executor keys (applied to the Slurm and the local executor): role GENERIC
GENERIC_KEYS = tuple(f.name for f in _FIELDS if f.metadata.get(config.ROLE) == config.GENERIC)
#: Slurm-only launcher fields, passed to submitit as ``slurm_<key>``: role SLURM
SLURM_KEYS = tuple(f.name for f in _FIELDS if f.metadata.get(config.ROLE) == config.SLURM)
#: submitit executor constructor arguments, passed as ``<cluster>_<key>``: role EXECUTOR
EXECUTOR_KEYS = tuple(f.name for f in _FIELDS if f.metadata.get(config.ROLE) == config.EXECUTOR)
#: launcher-only fields that still change what a job is submitted with (its name, srun line)
LAUNCHER_RESOURCE_KEYS = (
    *("experiments_per_job", "name", "after", "after_kind", "gpu_bind", "visible_gpus"),
    "max_failures",  # its experiments form their own fail-fast group (job.failfast)
)
#: launcher field -> its sbatch option in ``slurm[0].sbatch_options`` (``SBATCH`` metadata)
SBATCH_NAMES: Mapping[str, str] = {
    f.name: f.metadata[config.SBATCH] for f in _FIELDS if f.metadata.get(config.SBATCH)
}


#: sbatch options the launcher sets itself; users must not set them through additional_parameters
RESERVED_SBATCH_OPTIONS = ("comment", "job-name", "job_name", "array", "output", "error")
#: launcher fields whose text is written into the sbatch script (``#SBATCH --<option>=<value>``):
#: the Slurm-only fields recorded as an sbatch option (the generic ones are numbers)
SCRIPT_TEXT_FIELDS = tuple(key for key in SLURM_KEYS if key in SBATCH_NAMES)
#: srun options the launcher sets itself (explicit task counts; submitit's output files)
RESERVED_SRUN_OPTIONS = (
    *("-n", "--ntasks", "--ntasks-per-node", "-o", "--output", "-e", "--error"),
    *("--gpus-per-task", "--gpu-bind"),  # the fields gpus_per_task and gpu_bind
)


def control_character(text: str) -> str | None:
    """The first control character of ``text`` (code point below 0x20 - null, tab, newline,
    carriage return... - or 0x7f, DEL), or None (pure)."""
    return next((c for c in text if ord(c) < 0x20 or ord(c) == 0x7F), None)


#: script values of :func:`script_values` that are not ``#SBATCH`` lines (shell lines, the srun
#: line, the command), by field name or ``<field>[`` prefix: shlex quoting holds there
NON_SBATCH_FIELDS = ("python", "gpu_bind", "setup[", "srun_args[")


def option_key(extra: Mapping[str, Any], option: str) -> str | None:
    """The key of the raw sbatch options ``extra`` (``additional_parameters``) that sets
    ``option``, also by an abbreviation sbatch takes as it (getopt's unique prefixes, at least
    two letters: ``begi`` is ``--begin``, ``depend`` is ``--dependency``), with ``_`` for ``-``
    as submitit writes them; None when none does. Pure."""
    for key in extra:
        name = str(key).replace("_", "-")
        if len(name) >= 2 and option.startswith(name):
            return str(key)
    return None


def script_text_problem(text: str, *, sbatch_line: bool = True) -> str | None:
    """What breaks ``text`` in the job script, or None (pure): a control character anywhere
    (:func:`control_character`: a newline ends the ``#SBATCH`` block or a shell line and runs
    the rest as a shell command) and, as the value of an ``#SBATCH --<key>=<value>`` line
    (``sbatch_line``), a backslash, which sbatch drops there even inside quotes (Slurm 22.05:
    ``--comment='a\\b'`` gives the comment ``ab``, so ``seml queue`` and ``cancel`` would not
    find the collection's jobs)."""
    char = control_character(text)
    if char is not None:
        return f"contains the control character {char!r}"
    if sbatch_line and "\\" in text:
        return "contains a backslash, which sbatch drops from #SBATCH lines"
    return None


def script_values(launcher: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(field, text)`` of every launcher value that reaches the sbatch script (pure):
    :data:`SCRIPT_TEXT_FIELDS`, ``submitit_folder`` (the ``--output`` path), ``name`` (the job
    name's prefix), ``python`` and ``gpu_bind`` (on the srun line), each ``setup`` line
    (``setup[i]``), each ``srun_args`` entry (``srun_args[i]``) and each
    ``additional_parameters`` key and value. ``None`` is left out (never sent); other values as
    ``str()``, as submitit writes them."""
    keys = (*SCRIPT_TEXT_FIELDS, "submitit_folder", "name", "python", "gpu_bind")
    out = [(key, str(launcher[key])) for key in keys if launcher.get(key) is not None]
    for key in ("setup", "srun_args"):
        lines = launcher.get(key)
        if isinstance(lines, str):
            lines = [lines]
        for i, line in enumerate(lines or ()):
            out.append((f"{key}[{i}]", str(line)))
    for key, value in (launcher.get("additional_parameters") or {}).items():
        out.append(("additional_parameters (an option name)", str(key)))
        if value is not None:
            out.append((f"additional_parameters.{key}", str(value)))
    return out


def check_script_values(
    launcher: Mapping[str, Any], *, job_name: str | None = None, sbatch: bool = True
) -> None:
    """Refuse a launcher whose values would break the sbatch script.

    submitit writes each option as one ``#SBATCH --<key>=<value>`` line and each ``setup``
    entry as one shell line: a newline in a value ends the ``#SBATCH`` block (sbatch ignores
    every ``#SBATCH`` line after a command) and runs the rest as a shell command. So no value
    of :func:`script_values` (nor ``job_name``, the ``--job-name``) may hold a control
    character (:func:`control_character`); ``setup`` is a list of lines by design, but each
    entry must be one line. With ``sbatch`` (a Slurm submission; False for the local
    executor, which writes no ``#SBATCH`` line) the values that become ``#SBATCH`` lines may
    not hold a backslash either (:func:`script_text_problem`).

    Raises:
        ValueError: naming the field and the character, e.g. ``hydra.launcher.partition=
            'debug\\n#x' contains the control character '\\n'``.
    """
    values = script_values(launcher)
    if job_name is not None:
        values.append(("job name ([<name>_]<collection>_<batch_id>)", job_name))
    for name, text in values:
        sbatch_line = sbatch and not name.startswith(NON_SBATCH_FIELDS)
        problem = script_text_problem(text, sbatch_line=sbatch_line)
        if problem is not None:
            what = name if name.startswith("job name") else f"hydra.launcher.{name}"
            hint = (
                " (setup is a list: one shell line per entry)" if name.startswith("setup") else ""
            )
            raise ValueError(
                f"{what}={text!r} {problem}: values written into the Slurm job script must be "
                f"a single line of printable text{hint}."
            )


def validate_launcher(launcher: Mapping[str, Any], executor: str = "slurm") -> None:
    """Reject launcher values that cannot work, before anything is staged.

    Raises ``ValueError`` with the field and what to do: unknown fields (a typo added with
    ``+hydra.launcher.mem_gbb=4``), non-positive counts, times or sizes, reserved sbatch options in
    ``additional_parameters``; ``experiments_per_job > 1`` with more than one task (mutually
    exclusive, as in SEML's multi-task change); non-positive counts; a control character (a
    newline...) in a value that goes into the job script (:func:`check_script_values`); a
    ``max_failures`` that is not an integer >= 1 (``job.failfast.max_failures_problem``).
    """
    unknown = sorted(set(launcher) - set(LAUNCHER_FIELDS) - {"_target_"})
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, LAUNCHER_FIELDS, n=1)
            hints.append(f"{key}" + (f" (did you mean {close[0]}?)" if close else ""))
        raise ValueError(
            f"unknown launcher field(s) hydra.launcher.{', '.join(hints)}; the fields are listed "
            "in the README (raw sbatch options go in hydra.launcher.additional_parameters)."
        )
    for key in ("nodes", "tasks_per_node", "experiments_per_job", "timeout_min"):
        if not isinstance(launcher.get(key), int) or launcher[key] < 1:
            raise ValueError(f"hydra.launcher.{key}={launcher.get(key)!r}: must be an integer >= 1")
    counts = ("cpus_per_task", "gpus_per_node", "gpus_per_task", "cpus_per_gpu")
    for key in (*counts, "mem_gb", "array_parallelism"):
        value = launcher.get(key)
        if value is not None and (isinstance(value, bool) or not value > 0):
            raise ValueError(f"hydra.launcher.{key}={value!r}: must be positive (or null)")
    problem = max_failures_problem(launcher.get("max_failures"))
    if problem is not None:
        raise ValueError(f"{problem}; nothing was staged")
    dependency_type(launcher.get("after_kind", "ok"))
    parse_pruner(launcher.get("pruner"))
    check_visible_gpus(launcher)
    if launcher.get("after") is not None:
        parse_after(launcher["after"], "")
        if option_key(launcher.get("additional_parameters") or {}, "dependency"):
            raise ValueError(
                "hydra.launcher.after and hydra.launcher.additional_parameters.dependency both "
                "set the array's Slurm --dependency (sbatch would keep only one): use after "
                "(and after_kind) for a batch of this collection, or write the whole "
                "dependency in additional_parameters.dependency."
            )
    exclusive = launcher.get("exclusive")
    if exclusive is not None and not isinstance(exclusive, (bool, str)):
        raise ValueError(
            f"hydra.launcher.exclusive={exclusive!r}: must be true, user, mcs or topo (or null)"
        )
    srun_args = launcher.get("srun_args")
    if srun_args is not None:
        if isinstance(srun_args, str) or not all(isinstance(a, str) for a in srun_args):
            raise ValueError(
                f"hydra.launcher.srun_args={srun_args!r}: must be a list of strings, one srun "
                "argument each, e.g. [--cpu-bind=cores]"
            )
        taken = [a for a in srun_args if a.split("=", 1)[0] in RESERVED_SRUN_OPTIONS]
        if taken:
            raise ValueError(
                f"hydra.launcher.srun_args sets {', '.join(taken)}, which the launcher sets "
                "itself (the task counts from nodes x tasks_per_node; submitit's output files)."
            )
    reserved = [
        k for k in (launcher.get("additional_parameters") or {}) if k in RESERVED_SBATCH_OPTIONS
    ]
    if reserved:
        raise ValueError(
            f"hydra.launcher.additional_parameters sets {', '.join(reserved)}, which the launcher "
            "sets itself (comment = collection, job-name = <collection>_<batch>, array, output). "
            "Remove them; use hydra.launcher.collection to change the comment."
        )
    if launcher["experiments_per_job"] > 1 and launcher["nodes"] * launcher["tasks_per_node"] > 1:
        raise ValueError(
            f"hydra.launcher.experiments_per_job={launcher['experiments_per_job']} with "
            f"{launcher['nodes']} node(s) x {launcher['tasks_per_node']} task(s): several "
            "experiments per job and multi-task jobs are mutually exclusive. Set "
            "experiments_per_job=1 or nodes=1 tasks_per_node=1."
        )
    check_script_values(launcher, sbatch=executor == "slurm")


#: the fields only the Slurm launcher uses (sbatch options, the script's setup, srun's
#: arguments, Slurm's signal); ``seml_local`` runs without them (``gpus_per_task`` it uses)
SLURM_ONLY_FIELDS = (*(k for k in SLURM_KEYS if k != "gpus_per_task"), "gpu_bind")
_DEFAULTS = {
    f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    for f in _FIELDS
}


def slurm_only_fields(launcher: Mapping[str, Any]) -> list[str]:
    """The :data:`SLURM_ONLY_FIELDS` of ``launcher`` (a ``hydra.launcher`` node) set to
    something else than their default, in field order (pure): what ``seml_local`` ignores."""
    return [k for k in SLURM_ONLY_FIELDS if k in launcher and launcher[k] != _DEFAULTS[k]]


def job_name(collection_name: str, batch_id: int, prefix: str | None = None) -> str:
    """The array's ``--job-name``: ``<collection>_<batch_id>``, after ``<prefix>_`` when the
    launcher's ``name`` is set (the recovery of interrupted submissions finds a batch's arrays
    by it: :func:`is_batch_job_name`)."""
    base = f"{collection_name}_{batch_id}"
    return f"{prefix}_{base}" if prefix else base


def is_batch_job_name(name: str | None, collection_name: str, batch_id: Any) -> bool:
    """Whether ``name`` is a :func:`job_name` of batch ``batch_id`` of ``collection_name``,
    with any prefix (pure)."""
    base = job_name(collection_name, batch_id)
    return bool(name) and (name == base or str(name).endswith(f"_{base}"))


def resource_key(launcher: Mapping[str, Any]) -> str:
    """A string identifying the resource set of a launcher node (points with equal keys share
    one array job): JSON of every executor parameter's field (:data:`GENERIC_KEYS`,
    :data:`SLURM_KEYS`, :data:`EXECUTOR_KEYS`) and :data:`LAUNCHER_RESOURCE_KEYS` (how ids are
    cut into array tasks, the job name's prefix), keys sorted, a missing field as ``null``.
    Pure."""
    keys = (*GENERIC_KEYS, *SLURM_KEYS, *EXECUTOR_KEYS, *LAUNCHER_RESOURCE_KEYS)
    return json.dumps({k: launcher.get(k) for k in keys}, sort_keys=True, default=str)


def executor_arguments(
    launcher: Mapping[str, Any], cluster: str, *, default_python: str | None = None
) -> dict[str, Any]:
    """The ``AutoExecutor`` constructor arguments of a launcher node for executor ``cluster``
    (``"slurm"`` or ``"local"``): each set :data:`EXECUTOR_KEYS` field as ``<cluster>_<key>``
    (``python`` -> ``slurm_python``, as hydra-submitit-launcher passes it). Pure.

    A Slurm job without an srun step (:func:`runs_without_srun`) gets ``slurm_python`` as
    ``exec <python>`` (``python``, else ``default_python``: submitit's own default, the
    launching interpreter quoted; ``sys.executable`` when None): the batch shell becomes the
    task's Python, so the signal Slurm sends the batch shell before the time limit
    (``--signal=B:...``, :func:`executor_parameters`) reaches submitit's handler.

    Every job's Python runs ``seml_hydra.job.entry`` first (``<cluster>_python`` =
    ``job.entry.guarded_python(python)``), which refuses a pickle another user could have
    written before submitit unpickles it.
    """
    out = {f"{cluster}_{k}": launcher[k] for k in EXECUTOR_KEYS if launcher.get(k) is not None}
    python = launcher.get("python") or default_python or shlex.quote(sys.executable)
    if cluster == "slurm" and runs_without_srun(launcher):
        python = f"exec {python}"
    out[f"{cluster}_python"] = guarded_python(python)
    return out


def runs_without_srun(launcher: Mapping[str, Any]) -> bool:
    """Whether a Slurm job of this launcher node runs its one task as the batch script itself,
    without an srun step (pure): a single task (``nodes`` x ``tasks_per_node`` = 1) and no
    srun-only option (``srun_args``, ``gpu_bind``). As hydra-submitit-launcher's
    ``use_srun=False`` (submitit >= 1.5): no job step to start and end, ~0.1-0.2 s less per
    task. Jobs of several tasks keep srun: it starts the ranks."""
    return (
        launcher["nodes"] * launcher["tasks_per_node"] == 1
        and not launcher.get("srun_args")
        and launcher.get("gpu_bind") is None
    )


def executor_parameters(launcher: Mapping[str, Any], *, comment: str, name: str) -> dict[str, Any]:
    """submitit ``update_parameters`` kwargs for a launcher node (pure).

    :data:`GENERIC_KEYS` go as they are, :data:`SLURM_KEYS` as ``slurm_<key>`` (as
    hydra-submitit-launcher prefixes what is not in ``BaseQueueConf``); ``None`` is never sent,
    nor an empty ``additional_parameters`` (a copy, without the options set to None or False:
    :func:`sent_options`). Plus ``name`` (the job
    name), ``slurm_comment`` (``comment``: the collection) and ``slurm_srun_args``: the srun step
    always gets the task count explicitly (``--ntasks``, ``--ntasks-per-node``), never a bare
    srun that lets Slurm guess it (SEML multi-task change). A single-task job without
    srun-only options runs without an srun step instead (:func:`runs_without_srun`):
    ``slurm_use_srun=False`` and the time-limit signal in the batch form,
    ``additional_parameters.signal`` = :func:`batch_signal` (a ``signal`` the user set there
    stays); its Python is ``exec``'d by the batch shell (:func:`executor_arguments`).

    Raises ``KeyError`` for a node without ``nodes`` or ``tasks_per_node``.
    """
    params: dict[str, Any] = {k: launcher[k] for k in GENERIC_KEYS if launcher.get(k) is not None}
    params["name"] = name
    for key in SLURM_KEYS:
        value = launcher.get(key)
        if isinstance(value, Mapping):  # additional_parameters: a copy, and not sent when empty
            value = sent_options(value) or None
        if value is not None:
            params[f"slurm_{key}"] = value
    params["slurm_comment"] = comment
    ntasks = launcher["nodes"] * launcher["tasks_per_node"]
    if runs_without_srun(launcher):
        # the batch shell (exec'd into Python: executor_arguments) is the task: Slurm signals
        # it before the time limit only with the B: form (a bare --signal goes to job steps)
        params["slurm_use_srun"] = False
        extra = dict(params.get("slurm_additional_parameters") or {})
        extra.setdefault("signal", batch_signal(launcher.get("signal_delay_s", 90)))
        params["slurm_additional_parameters"] = extra
        return params
    params["slurm_srun_args"] = [
        f"--ntasks={ntasks}",
        f"--ntasks-per-node={launcher['tasks_per_node']}",
        *gpu_srun_args(launcher),
        *(launcher.get("srun_args") or ()),
    ]
    return params


def batch_signal(delay_s: int, signal: str | None = None) -> str:
    """sbatch's ``--signal`` for a job without an srun step: ``B:<signal>@<delay_s>``, sent to
    the batch shell ``delay_s`` seconds before the time limit. ``signal``: submitit's
    (``SUBMITIT_PREEMPT_SIGNAL``, ``USR2`` by default) when None."""
    if signal is None:
        signal = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return f"B:{signal}@{int(delay_s)}"


def gpu_srun_args(launcher: Mapping[str, Any]) -> list[str]:
    """The srun arguments that bind GPUs to the step's tasks (pure): ``--gpus-per-task=<n>``
    (``gpus_per_task``) and ``--gpu-bind=<value>`` (``gpu_bind``), each only when set."""
    out = []
    if launcher.get("gpus_per_task") is not None:
        out.append(f"--gpus-per-task={launcher['gpus_per_task']}")
    if launcher.get("gpu_bind") is not None:
        out.append(f"--gpu-bind={launcher['gpu_bind']}")
    return out


def sbatch_options(launcher: Mapping[str, Any], *, comment: str, name: str) -> dict[str, Any]:
    """The sbatch options a point is submitted with, under sbatch's own names
    (:data:`SBATCH_NAMES`; ``mem_gb`` as :func:`mem_option`), plus ``ntasks``, ``comment``,
    ``job-name`` and the ``additional_parameters`` (recorded in ``slurm[0].sbatch_options`` as
    SEML does). ``None`` is left out. Pure."""
    out = {}
    for key, flag in SBATCH_NAMES.items():
        if launcher.get(key) is not None:
            out[flag] = mem_option(launcher[key]) if key == "mem_gb" else launcher[key]
    out["ntasks"] = launcher["nodes"] * launcher["tasks_per_node"]
    out["comment"] = comment
    out["job-name"] = name
    out.update(sent_options(launcher.get("additional_parameters") or {}))
    return out


def group_labels(options: Sequence[Mapping[str, Any]]) -> list[str]:
    """What tells the resource groups of one submission apart, one label per group (pure):
    ``"key=value, ..."`` of the sbatch options (:func:`sbatch_options`) whose values differ
    between the groups, in key order, each group naming those it sets; ``comment`` and
    ``job-name`` are left out (the submission's lines name the job). ``["", ...]`` when the
    options are the same (groups of another payload, batch or executor) and ``[""]`` for one
    group. E.g. ``[{"ntasks": 1}, {"ntasks": 2}]`` -> ``["ntasks=1", "ntasks=2"]``."""
    if len(options) < 2:
        return [""] * len(options)
    keys = sorted({k for o in options for k in o} - {"comment", "job-name"})
    missing = object()
    differing = [k for k in keys if len({repr(o.get(k, missing)) for o in options}) > 1]
    return [", ".join(f"{k}={o[k]}" for k in differing if k in o) for o in options]


def sent_options(extra: Mapping[str, Any]) -> dict[str, Any]:
    """The raw sbatch options of ``additional_parameters`` that go to sbatch (pure): all but
    those set to ``None`` or ``False``, which mean "not set" (submitit would write
    ``--hold=False``, which sbatch refuses: "option '--hold' doesn't allow an argument")."""
    return {k: v for k, v in extra.items() if v is not None and v is not False}


def mem_option(mem_gb: float) -> str:
    """sbatch's ``--mem`` value for ``mem_gb`` GB: ``16.0`` -> ``"16G"``, ``0.5`` -> ``"512M"``
    (sbatch rejects ``16.0G``; same rule as submitit's ``_convert_mem``)."""
    mem = float(mem_gb)
    return f"{int(mem)}G" if mem.is_integer() else f"{int(mem * 1024)}M"


def chunk(ids: Sequence[int], size: int) -> list[list[int]]:
    """Split ``ids`` into consecutive groups of at most ``size`` (one group per array task)."""
    return [list(ids[i : i + size]) for i in range(0, len(ids), size)]


def split_array(id_groups: Sequence[Sequence[int]], max_array_size: int) -> list[list[list[int]]]:
    """Cut an array's task list into arrays of at most ``max_array_size`` tasks (Slurm's
    ``MaxArraySize``: task ids must stay below it). Pure."""
    size = max(1, int(max_array_size))
    return [[list(g) for g in id_groups[i : i + size]] for i in range(0, len(id_groups), size)]
