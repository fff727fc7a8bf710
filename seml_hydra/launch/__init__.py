"""Inside Hydra's process on the login node: the ``hydra/launcher=seml`` launcher.

``compose`` (sweep point -> resolved config; its entry says which points take the fast path)
-> ``document`` (point -> experiment document, pure) -> ``stage`` (insert into MongoDB)
-> ``submit`` (submitit array jobs; the sbatch mapping, pure, in ``sbatch``; the mark of a
submission under way in ``marks``; undoing a dead submission in ``recovery``) -> ``wait``
(poll until done, hand Hydra its ``JobReturn``s); ``launcher`` orchestrates them. Imports
``core``, ``slurm``, ``store`` and ``job`` (the runner it pickles for submitit)."""
