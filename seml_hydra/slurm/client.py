"""Running Slurm's command-line tools safely: :func:`run_slurm`, :func:`squeue_jobs`,
:func:`sacct_jobs`, :func:`scontrol_show_job`, :func:`show_config`, :func:`cluster_name`,
:func:`max_array_size`, :func:`scancel`, :func:`hold`, :func:`release`, :func:`current_user`.

They run Slurm's clients with argument lists (never a shell), with a timeout, and only when
called (importing this module runs nothing). Every failure raises :class:`SlurmError`; a query
that failed never returns ``[]``, so "no rows" always means Slurm answered "no such jobs". The
output is parsed by ``seml_hydra.slurm.parse`` and ``seml_hydra.slurm.records`` (pure). ``SLURM_BITSTR_LEN=0`` is set so array
task lists are never cut to 64 characters with a ``...`` (the default), and the
``SQUEUE_*``/``SACCT_*``/``SLURM_TIME_FORMAT`` variables of the caller are dropped so that they
cannot change the format we parse.
"""

from __future__ import annotations

import getpass
import os
import re
import shlex
import subprocess
from collections.abc import Callable, Sequence

from seml_hydra.core.errors import UserError
from seml_hydra.core.processes import run_captured
from seml_hydra.slurm.parse import (
    parse_scontrol_show_config,
    parse_scontrol_show_job,
    validated_ids,
)
from seml_hydra.slurm.records import (
    FIELD_SEP,
    SacctRow,
    SqueueRow,
    parse_sacct,
    parse_squeue,
    sacct_format,
    squeue_fields,
    squeue_format,
)
from seml_hydra.slurm.usage import USAGE_FIELDS, TaskUsage, parse_usage

__all__ = [
    "DEFAULT_MAX_ARRAY_SIZE",
    "SlurmError",
    "cluster_name",
    "current_user",
    "hold",
    "max_array_size",
    "release",
    "run_slurm",
    "sacct_jobs",
    "scancel",
    "scontrol_show_job",
    "show_config",
    "squeue_jobs",
]

#: Slurm's own default for ``MaxArraySize`` (task ids must be below it)
DEFAULT_MAX_ARRAY_SIZE = 1001

# --------------------------------------------------------------------------------------------
# Running Slurm commands
# --------------------------------------------------------------------------------------------


class SlurmError(UserError):
    """A Slurm command failed, timed out, or is not installed.

    Attributes: ``cmd`` (the argument list), ``returncode`` (None if it did not run to the
    end), ``stderr`` (what Slurm said). The message contains the command and stderr.
    """

    def __init__(
        self,
        cmd: Sequence[str],
        message: str,
        *,
        returncode: int | None = None,
        stderr: str = "",
    ) -> None:
        self.cmd = list(cmd)
        self.returncode = returncode
        self.stderr = stderr
        detail = f": {stderr.strip()}" if stderr.strip() else ""
        super().__init__(f"`{shlex.join(self.cmd)}` {message}{detail}")


#: environment variables that would change what squeue/sacct print
_DROPPED_ENV_PREFIXES = ("SQUEUE_", "SACCT_")
_DROPPED_ENV = frozenset({"SLURM_TIME_FORMAT"})

#: Slurm sometimes reports a failed query on stderr with exit status 0
#: (``squeue -u nosuchuser`` -> "squeue: error: Invalid user: nosuchuser", exit 0)
_STDERR_ERROR_RE = re.compile(r"\berror\b", re.IGNORECASE)


def _slurm_env() -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(_DROPPED_ENV_PREFIXES) and k not in _DROPPED_ENV
    }
    env["SLURM_BITSTR_LEN"] = "0"
    return env


def run_slurm(args: Sequence[str], timeout_s: float = 30) -> str:
    """Run a Slurm client (``args[0]``) without a shell and return its stdout.

    ``args`` is an argument list (a plain string is refused: no shell quoting games). The
    environment is the caller's with ``SLURM_BITSTR_LEN=0`` and without ``SQUEUE_*``,
    ``SACCT_*`` and ``SLURM_TIME_FORMAT``. stdin is ``/dev/null``; output is decoded as
    UTF-8 with undecodable bytes replaced.

    Raises:
        SlurmError: the binary is missing ("Slurm command X not found: is Slurm installed /
            are you on a login node?"), it cannot be started, it ran longer than
            ``timeout_s`` seconds (it is killed), it exited non-zero, or it exited 0 but
            wrote an ``error`` to stderr (Slurm does that for some failed queries).
    """
    if isinstance(args, str) or not args:
        raise TypeError("run_slurm needs a non-empty argument list, not a string")
    cmd = [str(a) for a in args]
    try:
        proc = run_captured(cmd, timeout_s, env=_slurm_env())
    except FileNotFoundError as e:
        raise SlurmError(
            cmd,
            f"failed: Slurm command {cmd[0]!r} not found: is Slurm installed / "
            "are you on a login node?",
        ) from e
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr
        raise SlurmError(cmd, f"timed out after {timeout_s} s", stderr=err or "") from e
    except OSError as e:
        raise SlurmError(cmd, f"could not be started: {e}") from e
    if proc.returncode != 0:
        raise SlurmError(
            cmd,
            f"failed with exit status {proc.returncode}",
            returncode=proc.returncode,
            stderr=proc.stderr,
        )
    if _STDERR_ERROR_RE.search(proc.stderr):
        raise SlurmError(cmd, "reported an error (exit status 0)", returncode=0, stderr=proc.stderr)
    return proc.stdout


def _is_invalid_job_id(err: SlurmError) -> bool:
    return err.returncode not in (None, 0) and "Invalid job id specified" in err.stderr


def current_user() -> str:
    """Name of the user Slurm sees us as (the real uid's passwd entry; ``$USER`` as fallback).

    Raises:
        SlurmError: neither the passwd database nor the environment names the user.
    """
    try:
        import pwd

        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError, OSError):
        pass
    try:
        name = getpass.getuser()
    except Exception as e:  # getpass raises OSError (3.13) or KeyError (older) here
        raise SlurmError(["whoami"], f"failed: cannot determine the current user ({e})") from e
    if not name:
        raise SlurmError(["whoami"], "failed: cannot determine the current user")
    return name


def squeue_jobs(
    user: str | None = None,
    job_ids: Sequence[str] | None = None,
    all_users: bool = False,
    *,
    states: Sequence[str] | None = None,
    expand_arrays: bool = False,
    extra_fields: Sequence[str] = (),
    timeout_s: float = 30,
) -> list[SqueueRow]:
    """Jobs slurmctld knows, one :class:`SqueueRow` per squeue record.

    Args:
        user: only this user's jobs; None means :func:`current_user` unless ``all_users``.
        job_ids: only these jobs (``"123"``, ``"123_4"``, ``"123+1"``...; each is checked by
            :func:`parse_job_id`, ValueError otherwise). An empty sequence returns ``[]``
            without asking Slurm. Unknown ids are simply absent from the result.
        all_users: every user's jobs (``user`` must then be None).
        states: squeue ``--states`` (e.g. ``["all"]``, ``["PENDING", "RUNNING"]``); None is
            squeue's default (pending, running, suspended, completing... -- not finished).
        expand_arrays: pass ``--array`` so that every task, pending ones too, is its own row.
            By default a started task is one row (``123_4``) and the still-pending tasks of
            an array are one row with their range (``123_[5-9%2]``); use
            :attr:`SqueueRow.task_ids` to expand it.
        extra_fields: more squeue ``-o`` codes, in :attr:`SqueueRow.extra` (``"E"``: the
            job's remaining dependency, :attr:`SqueueRow.dependency`).

    Always passes ``--all`` (jobs in hidden partitions too). A job absent from the result is
    not known to slurmctld in the queried states -- purged after MinJobAge, or never
    existed; ask :func:`sacct_jobs` before deciding what happened to it.

    Raises:
        SlurmError: squeue failed, timed out, is missing, or printed an error (e.g. unknown
            user). Never returns ``[]`` on failure. Slurm's "Invalid job id specified" for
            ``job_ids`` is an answer (no such job), not a failure: it gives ``[]``.
        ValueError: a malformed job id or squeue record, or both ``user`` and ``all_users``.
    """
    if user is not None and all_users:
        raise ValueError("pass either user or all_users=True, not both")
    fields = squeue_fields(extra_fields)
    args = ["squeue", "--noheader", "--all", f"--format={squeue_format(fields)}"]
    if job_ids is not None:
        ids = validated_ids(job_ids)
        if not ids:
            return []
        args.append(f"--jobs={','.join(ids)}")
    if not all_users:
        args.append(f"--user={user if user is not None else current_user()}")
    if states is not None:
        if isinstance(states, str):
            states = [states]
        if not states or any(not re.fullmatch(r"[A-Za-z_]+", s) for s in states):
            raise ValueError(f"bad squeue states: {states!r}")
        args.append(f"--states={','.join(states)}")
    if expand_arrays:
        args.append("--array")
    try:
        out = run_slurm(args, timeout_s=timeout_s)
    except SlurmError as e:
        if job_ids is not None and _is_invalid_job_id(e):
            return []
        raise
    return parse_squeue(out, fields)


def sacct_jobs(job_ids: Sequence[str], *, timeout_s: float = 60) -> list[SacctRow]:
    """Accounting records (``sacct -X``: allocations, no steps) of ``job_ids``.

    Ids are checked by :func:`parse_job_id` (ValueError otherwise); an empty sequence gives
    ``[]`` without asking Slurm. An array id gives one row per started task and one for the
    still-pending remainder (``123_[5-9]``); unknown ids give no row. Pending jobs without an
    eligible time (held) are listed only because ids are given. sacct reflects slurmctld
    with a short delay (slurmdbd).

    Raises:
        SlurmError: sacct failed (accounting disabled, slurmdbd down...), timed out or is
            missing.
    """
    ids = validated_ids(job_ids)
    if not ids:
        return []
    args = [
        "sacct",
        "--noheader",
        "--parsable2",
        "--allocations",
        f"--delimiter={FIELD_SEP}",
        f"--format={sacct_format()}",
        f"--jobs={','.join(ids)}",
    ]
    return parse_sacct(run_slurm(args, timeout_s=timeout_s))


def sacct_usage(job_ids: Sequence[str], *, timeout_s: float = 60) -> dict[str, TaskUsage]:
    """What ``job_ids`` (array or job ids) asked for and used, per job or array task, from
    Slurm's accounting with the jobs' steps (``slurm.usage.parse_usage``); unknown ids give
    nothing, an empty sequence ``{}`` without asking Slurm. Raises :class:`SlurmError` as
    :func:`sacct_jobs` (accounting disabled, slurmdbd down, sacct missing)."""
    ids = validated_ids(job_ids)
    if not ids:
        return {}
    args = [
        "sacct",
        "--noheader",
        "--parsable2",
        f"--format={','.join(USAGE_FIELDS)}",
        f"--jobs={','.join(ids)}",
    ]
    return parse_usage(run_slurm(args, timeout_s=timeout_s))


def scontrol_show_job(job_id: str, *, timeout_s: float = 30) -> list[dict[str, str]]:
    """``scontrol show job <job_id>`` parsed by :func:`parse_scontrol_show_job`.

    An array id gives one record per started task plus one for the pending remainder; a
    het job id one per component. A job slurmctld does not know (purged or never existed:
    "Invalid job id specified") gives ``[]``.

    Raises:
        ValueError: ``job_id`` is not a job id (see :func:`parse_job_id`).
        SlurmError: any other failure.
    """
    (jid,) = validated_ids([job_id])
    try:
        out = run_slurm(["scontrol", "show", "job", jid], timeout_s=timeout_s)
    except SlurmError as e:
        if _is_invalid_job_id(e):
            return []
        raise
    return parse_scontrol_show_job(out)


def show_config(*, timeout_s: float = 30) -> dict[str, str]:
    """``scontrol show config`` parsed by :func:`parse_scontrol_show_config`.

    Raises:
        SlurmError: scontrol failed (e.g. slurmctld unreachable), timed out or is missing.
    """
    return parse_scontrol_show_config(run_slurm(["scontrol", "show", "config"], timeout_s))


#: this process's answer of :func:`cluster_name` (the cluster does not change under a process)
_cluster_name: str | None = None


def cluster_name(*, timeout_s: float = 30) -> str:
    """This cluster's ``ClusterName`` (``scontrol show config``), asked once per process.

    It is what Slurm exports to jobs as ``SLURM_CLUSTER_NAME``; submissions record it in
    ``slurm[0].cluster`` so that another cluster's ``status`` can tell the experiment is not
    its own (job ids are per cluster).

    Raises:
        SlurmError: scontrol failed, or its config names no cluster. A failure is not cached.
    """
    global _cluster_name
    if _cluster_name is None:
        name = (show_config(timeout_s=timeout_s).get("ClusterName") or "").strip()
        if not name:
            raise SlurmError(["scontrol", "show", "config"], "printed no ClusterName")
        _cluster_name = name
    return _cluster_name


def max_array_size(*, timeout_s: float = 30) -> int:
    """The cluster's ``MaxArraySize``: array task ids must be ``< max_array_size()``.

    Slurm's default (:data:`DEFAULT_MAX_ARRAY_SIZE`, 1001) when the config does not print it.

    Raises:
        SlurmError: scontrol failed, or printed a MaxArraySize that is not an integer.
    """
    value = show_config(timeout_s=timeout_s).get("MaxArraySize")
    if value is None:
        return DEFAULT_MAX_ARRAY_SIZE
    try:
        return int(value)
    except ValueError as e:
        raise SlurmError(
            ["scontrol", "show", "config"], f"printed a bad MaxArraySize {value!r}"
        ) from e


def _act(args: list[str], job_ids: Sequence[str], timeout_s: float) -> None:
    ids = validated_ids(job_ids)
    if not ids:
        return
    run_slurm([*args, *ids] if args[0] == "scancel" else [*args, ",".join(ids)], timeout_s)


def scancel(job_ids: Sequence[str], *, timeout_s: float = 30) -> None:
    """Cancel jobs (``scancel id...``); an empty sequence does nothing.

    Slurm 22.05 accepts ids of jobs that already ended or are unknown silently.

    Raises:
        ValueError: a malformed id.
        SlurmError: scancel failed, with Slurm's message.
    """
    _act(["scancel"], job_ids, timeout_s)


def _scontrol_job_action(action: str, what: str) -> Callable[..., None]:
    """``scontrol <action> id,id...`` as a function of ``job_ids`` (:func:`hold`,
    :func:`release`); ``what`` begins its docstring."""

    def act(job_ids: Sequence[str], *, timeout_s: float = 30) -> None:
        _act(["scontrol", action], job_ids, timeout_s)

    act.__name__ = act.__qualname__ = action
    act.__doc__ = f"""{what} (``scontrol {action} id,id...``); an empty sequence does nothing.

    Raises:
        ValueError: a malformed id.
        SlurmError: with Slurm's message, e.g. "Invalid job id specified" or "Job has already
            finished".
    """
    return act


#: hold pending jobs (``scontrol hold``)
hold = _scontrol_job_action("hold", "Hold pending jobs")
#: release held jobs (``scontrol release``)
release = _scontrol_job_action("release", "Release held jobs")


def start_now(job_ids: Sequence[str], *, timeout_s: float = 30) -> None:
    """Let pending jobs start at once: ``scontrol update JobId=id,id... StartTime=now`` (their
    ``--begin`` time moved to now; a user may do this to their own jobs, and Slurm 22.05 takes
    ids of jobs that already started or ended silently). An empty sequence does nothing.

    Raises:
        ValueError: a malformed id.
        SlurmError: scontrol failed, with Slurm's message.
    """
    ids = validated_ids(job_ids)
    if ids:
        run_slurm(["scontrol", "update", f"JobId={','.join(ids)}", "StartTime=now"], timeout_s)
