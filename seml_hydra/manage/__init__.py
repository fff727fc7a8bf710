"""What the ``seml`` command does to stored experiments, on the login node: selection,
liveness (KILLED detection), lifecycle commands (cancel, delete, reset, hold, release), start,
inspection. Imports ``core``, ``store``, ``slurm`` and ``launch`` (start submits again)."""
