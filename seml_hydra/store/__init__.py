"""MongoDB and files, used on both sides: database settings and client (retrying, masking),
the embedded ``mongod``, SSH tunnels, code snapshots in GridFS, reading results back.
Imports ``core`` (and ``slurm`` for nothing): the packages above it call it."""
