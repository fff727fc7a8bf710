"""Processes the store runs. Imports only ``core`` and ``store.errors``/``store.masking``.
Its modules, lowest first (each imports only those before it):

- ``known_hosts``   checking an SSH host's key against ``known_hosts``.
- ``tunnel_worker`` the SSH tunnel process (``python -m seml_hydra.store.server.tunnel_worker``).
- ``tunnel``        starting and reusing that process; the private runtime directory.
- ``mongod``        running a ``mongod`` binary: free port, ``--fork``, the bootstrap user.
- ``embedded``      the embedded default server: its data directory, reuse, start, stop.
"""
