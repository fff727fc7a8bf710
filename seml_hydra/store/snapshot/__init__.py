"""Code snapshots: jobs run the code as it was at launch. Imports ``core``, ``store.errors``,
``store.masking``, ``store.server`` (the private runtime directory) and ``store.db`` (retrying).
Its modules, lowest first (each imports only those before it):

- ``gitinfo``        the ``git`` block of a document (``git`` commands).
- ``sources``        login side: selecting the project's files, uploading, the launch's
  manifest (its file list, once), leases, deleting unused.
- ``bytecode``       the node's cache of snapshot modules' compiled code, by content.
- ``node``           node side: a document's snapshot (manifest or own list), writing one out,
  running a job inside it.
- ``sacred_sources`` Sacred's ``experiment.sources`` of a run: GridFS copies of the snapshot's
  files, found or stored in a few queries.
"""
