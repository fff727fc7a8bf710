"""Login-node tracking of experiments, shared by the launcher's wait (``seml_hydra.launch.wait``)
and the ``seml`` command (``seml_hydra.manage``).

- :mod:`seml_hydra.track.jobs`: pure decisions about the Slurm task of a document (``task_of``),
  liveness from squeue/sacct (``decide_killed``), other clusters' experiments.
- :mod:`seml_hydra.track.outputs`: reading a job's output file safely, terminal-safe text, and
  the one builder of a KILLED experiment's ``fail_trace`` (``killed_trace``).
- :mod:`seml_hydra.track.killed`: the I/O of KILLED detection: ``detect_killed`` (Slurm jobs)
  and ``mark_dead_jobs`` (the launcher's local submitit jobs).
- :mod:`seml_hydra.track.groups`: the experiments grouped by what decides their liveness (one
  aggregate, one representative document per Slurm task): what ``detect_killed``, ``cancel``,
  ``queue`` judge, so the work grows with the Slurm tasks, not the experiments.
- :mod:`seml_hydra.track.census`: the experiments counted from a covered compound index
  alone (``store.db.collections.CENSUS_INDEX``): the keys ``detect_killed`` vouches for without
  reading a document, ``status`` 's table and ``queue`` 's experiments per job.
- :mod:`seml_hydra.track.query`: the small MongoDB query helpers (``select``, ``grouped``,
  ``and_``).
- :mod:`seml_hydra.track.cache`: the collection names shell completion offers.

Imports only ``core``, ``slurm`` and ``store``; ``launch`` and ``manage`` import it.
"""
