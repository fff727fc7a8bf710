"""On the compute node, in every rank of every Slurm job: ``runner`` (the ``JobRunner`` submitit
runs) reads the job's environment once (``slurm_env``), claims the experiment (``claim``), plans
this rank (``rank``: ranks, seed, log level), runs the Hydra task from the batch payload
(``seml_hydra.store.payload``) under a Sacred run (``observed``; its observer, writing the experiment's document:
``observer``; Sacred's import: ``sacred_compat``; what each of its saves sends: ``heartbeat``), records
failing ranks (``failures``), requeues on timeout (``requeue``), logs metrics (``metrics``) and stores each run's resource
use (``stats``); Python's garbage collector is paused while the job starts (``collector``). ``worker`` runs experiments in this process instead (``seml start --debug``,
``--local``), claiming STAGED ones.
Imports ``core`` and ``store``; nothing here imports ``launch``, ``manage`` or ``cli``."""
