#!/usr/bin/env bash
# One command for the test suite on a fresh Debian 12 machine (as root):
#   install the package with its test extras into .venv, bring up the real testbed
#   (mongod + a 2-node Slurm with accounting, tools/testbed/up.sh), run pytest.
# Extra arguments go to every pytest run below, e.g. `bash tools/test.sh -k main_job -x`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
if [[ ! -x .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/pip install -q --disable-pip-version-check -e '.[test,distributed]' 2>&1 | grep -v '^WARNING: Location' || true
.venv/bin/python -c 'import hydra, submitit, pymongo; from seml_hydra.job.sacred_compat import import_sacred; import_sacred()' # the install worked
bash tools/testbed/up.sh >/tmp/seml-hydra-testbed.log 2>&1 || { tail -30 /tmp/seml-hydra-testbed.log; exit 1; }
echo "testbed up (log: /tmp/seml-hydra-testbed.log)"
# a throwaway sshd on 127.0.0.1 for the SSH tunnel tests
bash tools/sshd_test.sh >/tmp/seml-hydra-sshd.log 2>&1 || { cat /tmp/seml-hydra-sshd.log; exit 1; }
# The suite runs in two steps, so that tests which need the cluster to themselves (`serial`:
# they kill a node's slurmd, drain a node, stop slurmctld; ~7 minutes, mostly Slurm's node
# timeout and requeue delay) never overlap another Slurm test:
#   1. the `serial` tests one at a time, and meanwhile the tests that use no Slurm at all
#      (`not slurm`: the unit tier, MongoDB-only tests) on 2 xdist workers;
#   2. the other Slurm tests on $SEML_TEST_WORKERS (default 4) xdist workers: most of their time
#      is waiting for Slurm and MongoDB, not CPU.
# Each pytest process (each xdist worker) has its own test database. Exit code 5 of a step
# (nothing selected, e.g. `bash tools/test.sh tests/unit`) is not a failure unless all are 5.
WORKERS=${SEML_TEST_WORKERS:-4}
PYTEST=(.venv/bin/pytest -p no:cacheprovider)
serial_log=$(mktemp /tmp/seml-hydra-serial.XXXXXX.log)
"${PYTEST[@]}" -p no:xdist -m serial "$@" >"$serial_log" 2>&1 &
serial_pid=$!
codes=()
"${PYTEST[@]}" -n 2 --dist loadgroup -m "not slurm and not serial" "$@" && codes+=(0) || codes+=($?)
wait "$serial_pid" && codes+=(0) || codes+=($?)
echo "--- serial tests (log: $serial_log)"
cat "$serial_log"
"${PYTEST[@]}" -n "$WORKERS" --dist loadgroup -m "slurm and not serial" "$@" && codes+=(0) || codes+=($?)
rc=5
for code in "${codes[@]}"; do
  if [[ $code -ne 0 && $code -ne 5 ]]; then rc=$code; break; fi
  [[ $code -eq 0 ]] && rc=0
done
exit "$rc"
