"""On the compute node, in every rank of every Slurm job: ``runner`` (the ``JobRunner`` submitit
runs) reads the job's environment once (``slurm_env``), claims the experiment (``claim``), plans
this rank (``rank``: ranks, seed, log level), runs the Hydra task from the batch payload
(``seml_hydra.store.payload``) under a Sacred run (``observed``, ``sacred_compat``), records
failing ranks (``failures``), requeues on timeout (``requeue``) and logs metrics (``metrics``).
Imports ``core`` and ``store``; nothing here imports ``launch``, ``manage`` or ``cli``."""
