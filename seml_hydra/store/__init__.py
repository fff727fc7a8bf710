"""MongoDB and files, used on both sides (login node and compute node). Imports only ``core``;
the packages above it call it. Its modules, lowest first (each imports only those before it):

- ``errors``      DatabaseError, InvalidCollectionName (the store's user errors).
- ``masking``     a URI's password: finding, masking, scrubbing secrets from messages (pure).
- ``gitinfo``     the ``git`` block of a document (``git`` commands).
- ``retry``       riding out MongoDB outages (``retrying``, ``is_connection_error``).
- ``known_hosts`` checking an SSH host's key against ``known_hosts``.
- ``tunnel_worker`` the SSH tunnel process (``python -m seml_hydra.store.tunnel_worker``).
- ``tunnel``      starting and reusing that process; the private runtime directory.
- ``mongod``      running a ``mongod`` binary: free port, ``--fork``, the bootstrap user.
- ``embedded``    the embedded default server: its data directory, reuse, start, stop.
- ``collections`` collection names (reserved ones, metrics), ``next_ids`` (pure but for the
  counter's database calls).
- ``settings``    DbSettings and ``resolve_db_settings`` (launcher config, env, config file,
  embedded server); reading SEML's ``mongodb.config``.
- ``client``      ``connect``, ``get_collection``: one cached client per settings, through the
  tunnel if needed.
- ``job_db``      what the jobs resolve the database from (never a secret in a pickle).
- ``sources``     code snapshots, login side: selecting the project's files, uploading, the
  launch's manifest (its file list, once), leases, deleting unused.
- ``bytecode``    the node's cache of snapshot modules' compiled code, by content.
- ``snapshot``    code snapshots, node side: a document's snapshot (manifest or own list),
  writing one out, running a job inside it.
- ``sacred_sources`` Sacred's ``experiment.sources`` of a run: GridFS copies of the snapshot's
  files, found or stored in a few queries.
- ``payload``     the batch payload in GridFS: pickled, stored, loaded once per process, its
  base Hydra node, deleted, orphans removed.
- ``results``     reading results and metrics back (``get_results``, ``get_metrics``).
"""
