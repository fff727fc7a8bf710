"""The ``seml`` companion command: manage the experiments the launcher stored.

``seml list|queue|drop ...`` work without a collection; everything else is
``seml <collection> <command> ...``. Importing this package (``seml --help``, shell
completion) loads typer and rich only; each command imports pymongo, submitit... when it runs.
So the in-package modules that load ``store.db.client``, ``slurm.client`` or ``manage.*`` (about
60 ms together, measured with ``python -X importtime``) are imported inside the commands; the
cheap ones (``core.*``, ``track.outputs``, ``track.query``) at the top of each module.

``seml COLLECTION reset start`` chains commands as SEML does (``cli.chain``).

The commands on a collection take their selector options (``-id``, ``-b``, ``-s``, ``-fd``), the
selection and the opened collection from one decorator, ``cli.options.on_collection``.
"""

from __future__ import annotations

from seml_hydra.cli.app import app, main

__all__ = ["app", "main"]
