"""The store's user errors: what goes wrong with the database, explained for the user.

Lowest module of ``store``: the settings, the client and the embedded ``mongod`` raise these,
and nothing here imports them back.
"""

from __future__ import annotations

from seml_hydra.core.errors import UserError

__all__ = ["DatabaseError", "InvalidCollectionName"]


class DatabaseError(UserError):
    """A database problem explained for the user.

    The message is complete and never contains a password; callers print ``str(err)`` and
    need no traceback.
    """


class InvalidCollectionName(DatabaseError, ValueError):
    """A collection name that MongoDB (or seml-hydra) does not accept."""
