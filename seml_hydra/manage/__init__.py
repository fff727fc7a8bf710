"""What the ``seml`` command does to stored experiments, on the login node; nothing here
prints or exits (``seml_hydra.cli`` does), every problem a user can cause raises
``selection.ManageError`` (or another ``core.errors.UserError``) with a complete message.

- :mod:`seml_hydra.manage.selection`: the selector options as a MongoDB filter (``Selection``),
  connecting and opening a collection.
- :mod:`seml_hydra.manage.cancel`: ``cancel``, ``hold``, ``release`` (the collection's own
  Slurm jobs only).
- :mod:`seml_hydra.manage.lifecycle`: ``reset``, ``delete``, ``drop``.
- :mod:`seml_hydra.manage.start`: ``start`` (submit STAGED experiments from the database).
- :mod:`seml_hydra.manage.local`: the checks of ``start --debug`` / ``--local`` (run here).
- :mod:`seml_hydra.manage.inspection`: ``list``, ``status``, ``queue``, outputs, fail traces,
  code snapshots.
- :mod:`seml_hydra.manage.status_view`: ``status`` 's table (from the census index when it
  can), its pending arrays and why their jobs do not start.
- :mod:`seml_hydra.manage.describe`: descriptions (``description set|delete|list``), the
  ``-p`` projections and rows of ``status``, ``print-experiment``'s text.
- :mod:`seml_hydra.manage.commands`: ``print-command`` (the command that runs an experiment
  by hand).

Liveness and KILLED detection, output tails and the completion cache are in
``seml_hydra.track`` (shared with the launcher). Imports ``core``, ``slurm``, ``store``,
``job``, ``track`` and ``launch`` (``start`` submits again).
"""
