#!/usr/bin/env bash
# One command for the test suite on a fresh Debian 12 machine (as root):
#   install the package with its test extras into .venv, bring up the real testbed
#   (mongod, the shared 2-node Slurm cluster and the fault cluster, both with accounting:
#   tools/testbed/up.sh), run pytest.
# Extra arguments go to pytest, e.g. `bash tools/test.sh -k main_job -x`.
#
# Install: a new .venv gets the dependencies from a venv of them cached on this machine
# ($SEML_TEST_DEPS_CACHE, default ~/.cache/seml-hydra/test-deps/<key>; the key hashes
# pyproject.toml, the Python and pip's configuration, so a change of either builds a new one,
# with pip, once). .venv itself only holds the editable install of this work tree and a .pth
# that adds the cached venv's site-packages behind its own: a clean clone installs in seconds
# instead of unpacking 1.8 GB (torch, jax) again. SEML_TEST_DEPS_CACHE=0, or a .venv made by
# hand, installs everything into .venv with pip as before.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON=${PYTHON:-python3}
EXTRAS='.[test,distributed,docs]'
DEPS_PTH=_seml_hydra_test_deps.pth
pip_quiet() { grep -v '^WARNING: Location' || true; }

T0=$SECONDS
step() { printf '[test.sh +%3ss] %s\n' "$((SECONDS - T0))" "$*"; }

# deps_venv : print the cached venv holding every dependency of $EXTRAS (not the project),
# building it first under a lock when it is missing or was left half-built
deps_venv() {
  local cache=${SEML_TEST_DEPS_CACHE:-$HOME/.cache/seml-hydra/test-deps} key dir reqs config
  # the project's dependencies, its test and distributed extras and its build backend (with
  # what hatchling needs for an editable install)
  reqs=$("$PYTHON" - pyproject.toml <<'PY'
import sys, tomllib
meta = tomllib.load(open(sys.argv[1], "rb"))
project = meta["project"]
extra = project.get("optional-dependencies", {})
for req in [*project["dependencies"], *extra["test"], *extra["distributed"], *extra["docs"],
            *meta["build-system"]["requires"], "editables"]:
    print(req)
PY
)
  config=$("$PYTHON" -m pip config list 2>/dev/null || true)
  key=$({
    "$PYTHON" -VV
    echo "$reqs"
    echo "$config"
    # constraint files pip's configuration names (their pins choose versions too)
    sed -n "s/^[^=]*constraint='\(.*\)'$/\1/p" <<<"$config" | tr ' ' '\n' | xargs -r cat 2>/dev/null
  } | sha256sum | cut -c1-16)
  dir=$cache/$key
  mkdir -p "$cache"
  (
    flock 9
    if [[ ! -e $dir/.complete ]]; then
      rm -rf "$dir"
      "$PYTHON" -m venv "$dir" >&2
      echo "$reqs" >"$dir/requirements.txt"
      "$dir/bin/pip" install -q --disable-pip-version-check -r "$dir/requirements.txt" 2>&1 | pip_quiet >&2
      "$dir/bin/python" -c 'import hydra, submitit, pymongo, torch, pytest, xdist, hatchling, editables' >&2
      touch "$dir/.complete"
    fi
    touch "$dir" # in use: stale ones (other requirements) are pruned after 3 days unused
  ) 9>"$cache/.lock"
  find "$cache" -mindepth 1 -maxdepth 1 -type d -mtime +3 ! -name "$key" -exec rm -rf {} + 2>/dev/null || true
  echo "$dir"
}

if [[ ! -e .venv/bin/python && ${SEML_TEST_DEPS_CACHE:-} != 0 ]] && "$PYTHON" -c 'import tomllib' 2>/dev/null; then
  "$PYTHON" -m venv --without-pip .venv
fi
if [[ ! -e .venv/bin/python ]]; then
  "$PYTHON" -m venv .venv
  .venv/bin/pip install -q --disable-pip-version-check -e "$EXTRAS" 2>&1 | pip_quiet
elif [[ ! -e .venv/bin/pip ]]; then # a .venv of the cached dependencies
  DEPS=$(deps_venv)
  DEPS_SITE=$("$DEPS/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  SITE=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "import site; site.addsitedir('$DEPS_SITE')" >"$SITE/$DEPS_PTH"
  # pip comes from the cached venv; it installs into .venv (the interpreter running it)
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . 2>&1 | pip_quiet
  # the commands README names: .venv/bin/pytest (with this .venv's Python), .venv/bin/ruff
  printf '#!%s\nimport sys\nimport pytest\nsys.exit(pytest.main())\n' "$PWD/.venv/bin/python" >.venv/bin/pytest
  chmod +x .venv/bin/pytest
  ln -sf "$DEPS/bin/ruff" .venv/bin/ruff
  step "dependencies from $DEPS"
else
  .venv/bin/pip install -q --disable-pip-version-check -e "$EXTRAS" 2>&1 | pip_quiet
fi
.venv/bin/python -c 'import hydra, submitit, pymongo, torch, xdist; from seml_hydra.job.sacred_compat import import_sacred; import_sacred()' # the install worked
step "installed"
# lint, types and the documentation site first: seconds, and a red one needs no services to show
.venv/bin/ruff check --no-cache .
.venv/bin/ruff format --no-cache --check .
# the type checker ([tool.mypy] in pyproject.toml: strict on core, slurm, track, launch.sbatch)
.venv/bin/python -m mypy
NO_MKDOCS_2_WARNING=1 .venv/bin/python -m mkdocs build --strict --quiet -d "$(mktemp -d /tmp/seml-hydra-site.XXXXXX)"
step "ruff, mypy and mkdocs build --strict passed"
bash tools/testbed/up.sh >/tmp/seml-hydra-testbed.log 2>&1 || { tail -30 /tmp/seml-hydra-testbed.log; exit 1; }
step "testbed up (log: /tmp/seml-hydra-testbed.log)"
# a throwaway sshd on 127.0.0.1 for the SSH tunnel tests
bash tools/sshd_test.sh >/tmp/seml-hydra-sshd.log 2>&1 || { cat /tmp/seml-hydra-sshd.log; exit 1; }
# Two pytest runs at once, each on its own xdist workers (each worker has its own test
# database):
#   - the Slurm tests on $SEML_TEST_WORKERS (default 5): most of their time is waiting for Slurm
#     and MongoDB, not CPU, and more of them at once would only queue on the shared cluster's 4
#     CPUs. The tests that crash a slurmd, drain a node or stop slurmctld (`serial`) use the
#     testbed's fault cluster, a Slurm cluster of their own: one of the workers runs them one
#     after another (xdist_group, tests/conftest.py) beside the others, which they cannot disturb;
#   - the tests that use no Slurm (the unit tier, MongoDB-only tests: CPU) on 2 workers.
# tests/conftest.py starts the longest waits first. Exit code 5 of one run (nothing selected,
# e.g. `bash tools/test.sh tests/unit`) is not a failure unless both are 5.
WORKERS=${SEML_TEST_WORKERS:-5}
PYTEST=(.venv/bin/python -m pytest -p no:cacheprovider --dist loadgroup)
slurm_log=$(mktemp /tmp/seml-hydra-slurm-tests.XXXXXX.log)
"${PYTEST[@]}" -n "$WORKERS" -m slurm "$@" >"$slurm_log" 2>&1 &
slurm_pid=$!
codes=()
"${PYTEST[@]}" -n 2 -m "not slurm" "$@" && codes+=(0) || codes+=($?)
step "tests without Slurm done (exit ${codes[0]})"
wait "$slurm_pid" && codes+=(0) || codes+=($?)
echo "--- Slurm tests (log: $slurm_log)"
cat "$slurm_log"
step "Slurm tests done (exit ${codes[1]})"
rc=5
for code in "${codes[@]}"; do
  if [[ $code -ne 0 && $code -ne 5 ]]; then rc=$code; break; fi
  [[ $code -eq 0 ]] && rc=0
done
exit "$rc"
