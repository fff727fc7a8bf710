"""Slurm's command-line tools (imports ``core`` only): ``parse`` (pure: job states, ids, array
task specs, durations, ``scontrol show``), ``records`` (pure: squeue's and sacct's formats and
rows) and ``client`` (runs the commands: argument lists, never a shell)."""
