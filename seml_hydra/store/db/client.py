"""Connecting to the database of some :class:`~seml_hydra.store.db.settings.DbSettings`: one
cached ``MongoClient`` per settings and process, through an SSH tunnel when the settings say so,
with errors explained for the user (never showing a password).

``pymongo`` is imported inside :func:`connect`, so that importing this module stays cheap.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import TYPE_CHECKING, Any
from urllib.parse import quote_plus

from seml_hydra.core.schema import experiment_collection
from seml_hydra.store.db.collections import validate_collection_name
from seml_hydra.store.db.retry import retry_budget_s, retrying, short_reason
from seml_hydra.store.db.settings import HOW_TO_CONFIGURE, DbSettings
from seml_hydra.store.errors import DatabaseError
from seml_hydra.store.masking import scrub
from seml_hydra.store.server import tunnel

if TYPE_CHECKING:
    import pymongo

    from seml_hydra.core.schema import Database, ExperimentCollection

__all__ = ["connect", "get_collection", "reset_client_cache", "skip_exit_join"]

#: Server selection timeout of clients that go through a tunnel: long enough to ride out a
#: reconnection of the SSH connection (the tunnel process checks it every few seconds).
TUNNEL_SELECTION_TIMEOUT_S = 60.0

_CLIENTS: dict[tuple[DbSettings, float], pymongo.MongoClient[dict[str, Any]]] = {}
_CLIENTS_LOCK = threading.Lock()


def _forget_clients_after_fork() -> None:
    # MongoClient is not fork-safe: a child builds its own clients.
    _CLIENTS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_clients_after_fork)


def reset_client_cache() -> None:
    """Close and forget every client cached by :func:`connect` (for tests and shutdown)."""
    with _CLIENTS_LOCK:
        clients = list(_CLIENTS.values())
        _CLIENTS.clear()
    for client in clients:
        client.close()


def skip_exit_join() -> None:
    """Let the interpreter exit without waiting for pymongo's monitor threads.

    pymongo (>= 4.9) registers an atexit hook that joins its monitor threads, which sleep in
    0.5 s steps: a process that used MongoDB idles up to ~0.5 s at exit. Call this once every
    write is done (the ``seml`` command when it returns, a job when its experiments are
    recorded): the hook is dropped and the daemon monitor threads end with the interpreter.
    Without pymongo imported, or with other pymongo internals, it does nothing.
    """
    hook = getattr(sys.modules.get("pymongo.synchronous.monitor"), "_shutdown_resources", None)
    if hook is not None:
        atexit.unregister(hook)


def connect(settings: DbSettings, timeout_s: float = 5.0, *, retry: bool = False) -> Database:
    """Connect to the database of ``settings`` and check that the server answers.

    One ``MongoClient`` is cached per ``(settings, timeout_s)`` and process (forgotten in a
    forked child), so repeated calls are cheap: only the first one pings.

    Args:
        settings: from :func:`seml_hydra.store.db.settings.resolve_db_settings`.
        timeout_s: seconds to wait for the server (``serverSelectionTimeoutMS`` and
            ``connectTimeoutMS``) in each attempt.
        retry: keep pinging an unreachable server through
            :func:`~seml_hydra.store.db.retry.retrying` (jobs: an outage at their start is ridden
            out) instead of failing after ``timeout_s``.

    Returns:
        The ``pymongo`` database ``settings.database``.

    Raises:
        DatabaseError: the server is unreachable within about ``timeout_s`` (the message
            names the server and how to configure another one), authentication failed
            (``OperationFailure`` code 18: names user and database, never the password),
            or the settings are invalid for pymongo.
    """
    key = (settings, float(timeout_s))
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
    if client is not None:
        return client.get_database(settings.database)

    import pymongo
    from pymongo import errors

    ms = max(1, int(timeout_s * 1000))
    options: dict[str, Any] = {
        "serverSelectionTimeoutMS": ms,
        "connectTimeoutMS": ms,
        "appname": "seml-hydra",
    }
    options.update(dict(settings.extra))
    host, port = settings.host, settings.port
    if settings.ssh is not None:
        try:  # the tunnel's Unix socket: pymongo takes its percent-encoded path as the host
            host = quote_plus(
                tunnel.ensure_tunnel(dict(settings.ssh), (settings.host, settings.port)), safe=""
            )
        except tunnel.TunnelError as err:
            raise DatabaseError(scrub(f"{err} Settings from {settings.source}.")) from None
        options["directConnection"] = True
        options["serverSelectionTimeoutMS"] = max(ms, int(TUNNEL_SELECTION_TIMEOUT_S * 1000))
    try:
        if settings.uri is not None:
            client = pymongo.MongoClient(settings.uri, **options)
        else:
            if settings.username is not None:
                options.update(username=settings.username, password=settings.password or "")
                if settings.auth_source is not None:
                    options["authSource"] = settings.auth_source
            client = pymongo.MongoClient(host=host, port=port, **options)
    except (errors.ConfigurationError, TypeError, ValueError) as err:
        raise DatabaseError(
            scrub(f"Invalid MongoDB settings {settings.describe()}: {err}")
        ) from None

    budget = retry_budget_s() if retry else 0.0
    try:
        retrying(
            lambda: client.admin.command("ping"),
            f"connecting to {settings.server()}",
            budget_s=budget,
        )
    except errors.OperationFailure as err:
        client.close()
        if err.code == 18:
            raise DatabaseError(
                f"MongoDB authentication failed for user {settings.username!r} on database "
                f"{settings.auth_source or 'admin'!r} at {settings.server()} (settings from "
                f"{settings.source}). Check the user name and password there."
            ) from None
        raise DatabaseError(
            scrub(f"MongoDB at {settings.describe()} refused the connection: {err}")
        ) from None
    except errors.ConnectionFailure as err:  # includes ServerSelectionTimeoutError
        client.close()
        raise DatabaseError(
            scrub(
                f"Cannot reach MongoDB at {settings.server()} (settings from {settings.source}) "
                f"within {max(timeout_s, budget):g} s: {short_reason(err)}."
            )
            # the hint's own USER:PASSWORD placeholder is no password to mask
            + f" Start mongod there, or point seml-hydra at a reachable server: {HOW_TO_CONFIGURE}."
        ) from None
    except errors.PyMongoError as err:
        client.close()
        raise DatabaseError(scrub(f"MongoDB error at {settings.describe()}: {err}")) from None

    with _CLIENTS_LOCK:
        cached = _CLIENTS.setdefault(key, client)
    if cached is not client:  # another thread won the race
        client.close()
    return cached.get_database(settings.database)


def get_collection(name: str, settings: DbSettings) -> ExperimentCollection:
    """The collection ``name`` in the database of ``settings``.

    Args:
        name: collection name, checked with
            :func:`~seml_hydra.store.db.collections.validate_collection_name` before any connection
            is made.
        settings: from :func:`seml_hydra.store.db.settings.resolve_db_settings`.

    Returns:
        A ``pymongo`` collection (from the cached client of :func:`connect`).

    Raises:
        InvalidCollectionName: bad ``name``.
        DatabaseError: as :func:`connect`.
    """
    validate_collection_name(name)
    return experiment_collection(connect(settings), name)
