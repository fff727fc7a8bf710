"""Read experiments back: configs and results of a collection, as dicts or a pandas DataFrame.

    from seml_hydra.results import get_results
    df = get_results("train", filter={"status": "COMPLETED"}, to_data_frame=True)

Stored results are restored with Sacred's serializer (numpy arrays and the like come back as
they were returned by the task).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: fields returned when ``fields`` is not given
DEFAULT_FIELDS = ("_id", "batch_id", "status", "config", "result")


def get_results(
    collection: str,
    filter: Mapping[str, Any] | None = None,
    fields: Sequence[str] | None = None,
    to_data_frame: bool = False,
    db: Any = None,
) -> Any:
    """Configs and results of the experiments of ``collection``, sorted by ``_id``.

    Args:
        collection: the collection name.
        filter: a MongoDB filter, e.g. ``{"status": "COMPLETED", "config.model.name": "small"}``
            (default: COMPLETED experiments only).
        fields: the fields to return, dotted paths allowed (``"config.optimizer.lr"``); default
            ``_id``, ``batch_id``, ``status``, ``config``, ``result``.
        to_data_frame: return a ``pandas.DataFrame`` whose columns are the flattened fields
            (``config.optimizer.lr``); requires pandas (``pip install 'seml-hydra[pandas]'``).
        db: a pymongo database (default: resolved like the launcher and the ``seml`` command).

    Returns:
        A list of dicts (nested as stored), or a DataFrame.

    Raises:
        ImportError: ``to_data_frame=True`` without pandas.
        seml_hydra.database.DatabaseError: the database cannot be reached.
    """
    if to_data_frame:
        try:
            import pandas
        except ImportError:
            raise ImportError(
                "get_results(to_data_frame=True) needs pandas: pip install 'seml-hydra[pandas]'"
            ) from None
    if db is None:
        from .database import connect, resolve_db_settings

        db = connect(resolve_db_settings(None))
    from .database import validate_collection_name

    validate_collection_name(collection)
    query = {"status": "COMPLETED"} if filter is None else dict(filter)
    wanted = list(fields) if fields else list(DEFAULT_FIELDS)
    projection = {name: 1 for name in wanted}
    if "_id" not in wanted:
        projection["_id"] = 0
    docs = list(db[collection].find(query, projection).sort("_id", 1))
    if any(name == "result" or name.startswith("result.") for name in wanted):
        import warnings

        with warnings.catch_warnings():  # sacred imports the deprecated pkg_resources
            warnings.simplefilter("ignore")
            from .sacred_compat import import_sacred

            import_sacred()
            from sacred.serializer import restore

        for doc in docs:
            if "result" in doc:
                doc["result"] = restore(doc["result"])
    if not to_data_frame:
        return docs
    rows = [_flatten(doc) for doc in docs]
    return pandas.DataFrame(rows)


def _flatten(doc: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out
