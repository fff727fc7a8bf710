"""What another local user plants in a place a job loads code from, in the shared-cluster
tests: each leaves the file ``$PWNED`` when it runs inside a Slurm job (as the job's user)."""

from __future__ import annotations

#: a module (``sitecustomize.py``, a standard module's shadow, a package ``__init__``)
JOB_PLANT = (
    "import os, pathlib\n"
    "if os.environ.get('SLURM_JOB_ID'):\n"
    "    pathlib.Path(os.environ['PWNED']).write_text('ran as the job user')\n"
)

#: :data:`JOB_PLANT` for a module imported while the interpreter starts (no codecs yet:
#: ``encodings``), with ``posix`` only
LOW_LEVEL_PLANT = (
    "import posix as _p\n"
    "if b'SLURM_JOB_ID' in _p.environ:\n"
    "    _p.close(_p.open(_p.environ[b'PWNED'], _p.O_WRONLY | _p.O_CREAT, 0o644))\n"
)
