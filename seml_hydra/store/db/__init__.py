"""The database: where it is, the client, collections. Imports ``core``, ``store.errors``,
``store.masking`` and ``store.server``. Its modules, lowest first (each imports only those
before it):

- ``retry``       riding out MongoDB outages (``retrying``, ``is_connection_error``).
- ``collections`` collection names (reserved ones, metrics), ``next_ids`` (pure but for the
  counter's database calls), the job indexes.
- ``settings``    DbSettings and ``resolve_db_settings`` (launcher config, env, config file,
  embedded server); reading SEML's ``mongodb.config``.
- ``client``      ``connect``, ``get_collection``: one cached client per settings, through the
  tunnel if needed.
- ``job_db``      what the jobs resolve the database from (never a secret in a pickle).
"""
