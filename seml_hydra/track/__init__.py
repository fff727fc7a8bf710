"""Login-node tracking of experiments, shared by the launcher's wait (``seml_hydra.launch.wait``)
and the ``seml`` command (``seml_hydra.manage``).

- :mod:`seml_hydra.track.jobs`: pure decisions about the Slurm task of a document (``task_of``),
  liveness from squeue/sacct (``decide_killed``), other clusters' experiments.
- :mod:`seml_hydra.track.outputs`: reading a job's output file safely, terminal-safe text, and
  the one builder of a KILLED experiment's ``fail_trace`` (``killed_trace``).
- :mod:`seml_hydra.track.killed`: the I/O of KILLED detection: ``detect_killed`` (Slurm jobs)
  and ``mark_dead_jobs`` (the launcher's local submitit jobs).
- :mod:`seml_hydra.track.query`: the small MongoDB query helpers (``select``, ``and_``).
- :mod:`seml_hydra.track.cache`: the collection names shell completion offers.

Imports only ``core``, ``slurm`` and ``store``; ``launch`` and ``manage`` import it.
"""
