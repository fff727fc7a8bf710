"""Where one end-to-end launch's seconds go, as slurmctld saw them: ours (Hydra's default
sweeper) and hydra-submitit-launcher, alternated, each from a quiet scheduler.

    python benchmarks/slurm_phases.py --rounds 3

Runs ``job_life.run_once`` (8 no-op experiments, the ``life`` row of ``run.py``) and reads
slurmctld's log (``SlurmctldLogFile`` of ``scontrol show config``; readable by this user, as on
the testbed) for the lines the launch caused, at their millisecond timestamps. Prints per run,
in seconds from the command's start: ``submit`` (slurmctld took the sbatch), ``update``
(``scontrol update``: our deferred start moved to now), ``alloc1`` / ``alloc_last`` (Slurm
allocated the first / last task: its scheduler passes), the first task's start, the longest
task's life (start to exit) and ``detect`` (the last exit to the command's exit). Needs the
testbed, the MongoDB of ``--mongo`` and the virtualenvs of ``run.py`` (made on first use).
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import shutil
import tempfile
from pathlib import Path

import job_life
import run

#: slurmctld's log lines of a launch: the submission, the update, a task started by the main
#: scheduler or by backfill
EVENTS = {
    "submit": ("_slurm_rpc_submit_batch_job",),
    "update": ("_slurm_rpc_update_job",),
    "alloc": ("sched: Allocate", "sched/backfill: _start_job: Started"),
}


def log_file() -> Path:
    """slurmctld's log file (``SlurmctldLogFile``). Raises ``RuntimeError`` without one."""
    from seml_hydra.slurm.client import show_config

    value = show_config().get("SlurmctldLogFile", "")
    if value in ("", "(null)"):
        raise RuntimeError("slurmctld logs to syslog here (no SlurmctldLogFile): nothing to read")
    return Path(value)


def event_times(lines: list[str], start: float) -> dict[str, list[float]]:
    """``{event: [seconds after start, ...]}`` of :data:`EVENTS` in slurmctld's ``lines``
    (``[YYYY-MM-DDTHH:MM:SS.mmm] ...``, local time). Pure."""
    times: dict[str, list[float]] = {e: [] for e in EVENTS}
    for line in lines:
        stamp = re.match(r"\[([0-9T:.-]+)\]", line)
        if stamp is None:
            continue
        for event, texts in EVENTS.items():
            if any(text in line for text in texts):
                at = datetime.datetime.fromisoformat(stamp.group(1)).timestamp()
                times[event].append(at - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--points", type=int, default=8)
    parser.add_argument("--mongo", default="mongodb://127.0.0.1:27017")
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/seml-hydra-bench"))
    args = parser.parse_args()
    cache = Path(args.cache)
    envs = run.tool_envs(
        args.mongo,
        cache,
        seml_bin=None,
        hsl_bin=run.ensure_venv(cache, "venv-hsl", run.HSL_VERSION),
        ours_bin=run.ours_venv(cache),
    )
    log = log_file()
    client = run.mongo_client(args.mongo)
    work = Path(tempfile.mkdtemp(prefix="seml-hydra-phases-"))
    try:
        _rounds(args, envs, log, client, work)
    finally:
        client[run.OURS_DB].drop_collection(job_life.COLLECTION)
        shutil.rmtree(work, ignore_errors=True)


def _rounds(args: argparse.Namespace, envs: dict, log: Path, client, work: Path) -> None:
    """The rounds of :func:`main`, printing one line per launch."""
    delay, ended = job_life.batch_sched_delay(), None
    for rnd in range(args.rounds):
        for name in (job_life.DEFAULT, "hydra-submitit-launcher"):
            client[run.OURS_DB].drop_collection(job_life.COLLECTION)
            job_life.quiet_scheduler(ended, delay)
            offset = log.stat().st_size
            start = datetime.datetime.now().timestamp()
            label = f"{job_life._slug(name)}_{rnd}"
            result = job_life.run_once(name, envs, work, label, args.points)
            ended = datetime.datetime.now().timestamp()
            with log.open() as f:
                f.seek(offset)
                times = event_times(f.read().split("\n"), start)
            first = {e: (t[0] if t else float("nan")) for e, t in times.items()}
            last_alloc = times["alloc"][-1] if times["alloc"] else float("nan")
            print(
                f"{name:30s} wall {result['wall_s']:.2f}  submit {first['submit']:.2f}  "
                f"update {first['update']:.2f}  alloc1 {first['alloc']:.2f}  "
                f"alloc_last {last_alloc:.2f}  first task {result['until_start_s']:.2f}  "
                f"longest task's life {max(result['life_s']):.2f}  detect {result['detect_s']:.2f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
