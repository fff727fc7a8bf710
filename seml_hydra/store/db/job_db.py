"""How the jobs reach the database the way the launcher did: the ``db`` config they resolve
on their node (:func:`job_db_config`, pickled: never a secret) and the environment variables
the submission hands them (:func:`job_db_environment`: a URI's password). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from seml_hydra.store.db.settings import ENV_URI, DbSettings
from seml_hydra.store.masking import url_has_password

__all__ = ["job_db_config", "job_db_environment"]


def job_db_config(
    settings: DbSettings, launcher_db: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """What jobs resolve the database from on their node (jobs reach the database the
    way the launcher did), never holding a secret (it is pickled into the submitit folder):

    - the launch's own ``db`` config (``url``, ``config_file``, ``database``) when it had one,
      except a ``url`` with a password (also a masked one, as ``seml start`` reads it back from
      the stored Hydra config): the password reaches the jobs through their environment
      instead (:func:`job_db_environment`);
    - the config file the settings came from (its path, so a node reads the same file even
      when its ``XDG_CONFIG_HOME``/``HOME`` differ; with an ``ssh_config`` block the node then
      opens its own tunnel);
      this includes the embedded server's 0600 credentials file (jobs cannot start it; they
      read its current port, user and password there);
    - else ``None`` (jobs read ``SEML_MONGODB_URI``: inherited, or set by
      :func:`job_db_environment`).

    Args:
        settings: the settings this process connected with (they may hold the password).
        launcher_db: the launch's ``hydra.launcher.db`` mapping, or None.

    Returns:
        A ``db`` mapping for :func:`seml_hydra.store.db.settings.resolve_db_settings` on the
        node, or None.
    """
    return _job_db(settings, launcher_db)[0]


def job_db_environment(
    settings: DbSettings, launcher_db: Mapping[str, Any] | None
) -> dict[str, str]:
    """Environment variables the jobs need besides :func:`job_db_config`: ``SEML_MONGODB_URI``
    with the full URI (password included) when the settings came from a URI with a password
    and the jobs get no URL or config file. The submission sets them in the environment of
    ``sbatch`` / the local job process only (readable by their owner alone, in
    ``/proc/<pid>/environ``; Slurm keeps a job's environment in its private state), never in a
    file, a pickle or on a command line.

    Returns:
        ``{"SEML_MONGODB_URI": uri}`` or ``{}``.
    """
    return _job_db(settings, launcher_db)[1]


def _job_db(
    settings: DbSettings, launcher_db: Mapping[str, Any] | None
) -> tuple[dict[str, Any] | None, dict[str, str]]:
    cfg = {k: v for k, v in dict(launcher_db or {}).items() if v}
    if url_has_password(cfg.get("url")):
        del cfg["url"]  # the settings of this process hold it (or the seml command's own)
    env: dict[str, str] = {}
    if not cfg.get("url") and not cfg.get("config_file"):
        if settings.config_file is not None:
            cfg["config_file"] = settings.config_file
        elif settings.uri is not None and settings.password is not None:
            env[ENV_URI] = settings.uri
    return cfg or None, env
