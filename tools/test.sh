#!/usr/bin/env bash
# One command for the test suite on a fresh Debian 12 machine (as root):
#   install the package with its test extras into .venv, bring up the real testbed
#   (mongod + a 2-node Slurm with accounting, tools/testbed/up.sh), run pytest.
# Extra arguments go to both pytest runs, e.g. `bash tools/test.sh -k main_job -x`;
# SEML_TEST_WORKERS sets the number of parallel workers (default 4).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -e '.[test,distributed]' 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -c 'import hydra, submitit, pymongo; from seml_hydra.sacred_compat import import_sacred; import_sacred()' # the install worked
bash tools/testbed/up.sh >/tmp/seml-hydra-testbed.log 2>&1 || { tail -30 /tmp/seml-hydra-testbed.log; exit 1; }
echo "testbed up (log: /tmp/seml-hydra-testbed.log)"
# a throwaway sshd on 127.0.0.1 for the SSH tunnel tests
bash tools/sshd_test.sh >/tmp/seml-hydra-sshd.log 2>&1 || { cat /tmp/seml-hydra-sshd.log; exit 1; }
# Two phases: everything but `serial` on N xdist workers (one file per worker at a time, so the
# tests of one file keep their order and their shared collection names), then the `serial`
# tests (they stop slurmd/slurmctld/mongod or drain a node) alone. Exit code 5 (nothing selected,
# e.g. `bash tools/test.sh tests/unit`) of one phase is not a failure.
WORKERS=${SEML_TEST_WORKERS:-4}
rc=0
.venv/bin/pytest -n "$WORKERS" --dist loadfile -m "not serial" "$@" || rc=$?
[[ $rc -eq 5 ]] && rc=0
serial_rc=0
.venv/bin/pytest -p no:xdist -m serial "$@" || serial_rc=$?
[[ $serial_rc -eq 5 ]] && serial_rc=0
exit $(( rc != 0 ? rc : serial_rc ))
