"""Inside Hydra's process on the login node: the ``hydra/launcher=seml`` launcher.

compose (sweep point -> resolved config) -> documents -> stage (insert into MongoDB) ->
submit (submitit array jobs) -> wait (poll until done, hand Hydra its ``JobReturn``s).
Imports ``core``, ``store``, ``slurm`` and ``job`` (the runner it pickles for submitit)."""
