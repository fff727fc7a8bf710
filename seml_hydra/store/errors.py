"""The store's user errors: what goes wrong with the database, explained for the user.

Lowest module of ``store``: the settings, the client and the embedded ``mongod`` raise these,
and nothing here imports them back.
"""

from __future__ import annotations

from seml_hydra.core.errors import UserError

__all__ = ["CollectionNotFound", "DatabaseError", "InvalidCollectionName"]


class DatabaseError(UserError):
    """A database problem explained for the user.

    The message is complete and never contains a password; callers print ``str(err)`` and
    need no traceback.
    """


class InvalidCollectionName(DatabaseError, ValueError):
    """A collection name that MongoDB (or seml-hydra) does not accept."""


class CollectionNotFound(DatabaseError, LookupError):
    """The collection named does not exist in the database (a typo, another database): raised
    by ``get_results``/``get_metrics`` instead of returning nothing. ``collection`` and
    ``database`` are the names; the message says where to look (``seml list``)."""

    def __init__(self, collection: str, database: str) -> None:
        self.collection, self.database = collection, database
        super().__init__(
            f"There is no collection {collection!r} in database {database!r}. "
            "`seml list` shows the collections."
        )
