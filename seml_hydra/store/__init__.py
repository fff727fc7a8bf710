"""MongoDB and files, used on both sides (login node and compute node). Imports only ``core``;
the packages above it call it. Its parts, lowest first; each imports only the parts before it
(``tests/unit/test_import_graph.py`` checks it):

- ``errors``      DatabaseError, InvalidCollectionName (the store's user errors).
- ``masking``     a URI's password: finding, masking, scrubbing secrets from messages (pure).
- ``server/``     processes the store runs: the embedded ``mongod`` and the SSH tunnel to a
  remote one (with its worker process and the ``known_hosts`` check).
- ``db/``         the database: where it is (settings), the client, collection names and
  counters, riding out outages, what a job resolves the database from.
- ``snapshot/``   code snapshots: selecting and uploading the project's files (login side),
  writing them out and running a job inside them (node side), their bytecode cache, Sacred's
  copies of them.
- ``payload``     the batch payload in GridFS: pickled, stored, loaded once per process, its
  base Hydra node, deleted, orphans removed.
- ``metrics``     deleting the metric documents of runs, keeping them as an attempt's.
- ``results``     reading results and metrics back (``get_results``, ``get_metrics``).
"""
