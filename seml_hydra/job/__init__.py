"""On the compute node, in every rank of every Slurm job: claim the experiment, plan this rank
(ranks, seed, log level), run the Hydra task under a Sacred run, requeue on timeout, log
metrics. Imports ``core`` and ``store``; nothing here imports ``launch``, ``manage`` or ``cli``."""
