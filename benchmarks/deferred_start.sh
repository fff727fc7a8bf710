#!/usr/bin/env bash
# The deferred start's cost (launch.submit.deferred_start): from before `sbatch` to the job's
# first line, a plain submission against one with --begin=now+60 brought forward at once by
# `scontrol update JobId=<id> StartTime=now`, alternated ROUNDS times (default 6) on the
# cluster Slurm's commands reach (the testbed: tools/testbed/up.sh). Prints one line per job
# ("plain 2.48" / "deferred 2.49", seconds) and the medians.
set -euo pipefail
ROUNDS=${1:-6}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((i = 1; i <= ROUNDS; i++)); do
  for mode in plain deferred; do
    file=$out/${mode}_$i.out
    t0=$(date +%s.%N)
    if [[ $mode == plain ]]; then
      sbatch --parsable -o "$file" --wrap 'date +%s.%N' >/dev/null
    else
      job=$(sbatch --parsable --begin=now+60 -o "$file" --wrap 'date +%s.%N')
      scontrol update JobId="$job" StartTime=now
    fi
    until [[ -s $file ]]; do sleep 0.02; done
    echo "$mode $(python3 -c "print(round($(cat "$file") - $t0, 3))")"
    sleep 0.5
  done
done | tee "$out/all"
for mode in plain deferred; do
  python3 - "$mode" "$out/all" <<'PY'
import statistics, sys
mode, path = sys.argv[1:]
values = [float(l.split()[1]) for l in open(path) if l.startswith(mode + " ")]
print(f"median {mode}: {statistics.median(values):.3f} s over {len(values)}")
PY
done
