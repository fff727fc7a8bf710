"""Job life: a no-op job's whole life, ours vs hydra-submitit-launcher, alternated.

    python benchmarks/run.py --only life --life-rounds 5

Each round runs the same no-op app (``apps/noop.py``, ``x=range(8)``: 8 experiments) once with
``hydra/launcher=seml hydra/sweeper=seml`` (default launcher settings: its poll interval too),
once with ``hydra/launcher=seml`` and Hydra's default sweeper (what a user types:
``seml-hydra (default sweeper)``) and once with ``hydra/launcher=submitit_slurm``, the order
rotated every round. Per launch:

- ``wall_s``: the command line until it exits with the results (what a user waits for);
- ``entry_s``: per task, the Slurm task's start (``BENCH_T0``, exported by the sbatch script's
  ``setup`` line, before ``srun``/Python) to the task function's first line;
- ``life_s``: per task, ``BENCH_T0`` to the last write of its submitit output files (submitit's
  "Job completed successfully" comes after the result pickle and, for ours, Sacred's final
  save): the task's start to its exit, at file-time resolution;
- ``sacct_s``: per task, sacct's ``ElapsedRaw`` (whole seconds; Slurm's own view of the task);
- ``cpu_s``: per task, the task process' user + system CPU time at the task function's first
  line (``getrusage`` in the app: ``BENCH_CPU_LOG``); on the 2-CPU testbed the 8 tasks start
  at once, so this, not the wall time of one task, is what the tasks' start costs;
- ``sacct_cpu_s``: per task, sacct's ``TotalCPU`` of the array task (every step and process of
  it, start to exit: srun, the batch shell, Python; not Slurm's daemons);
- ``detect_s``: the command's exit minus the last task's last output: how long the launcher
  takes to notice the end and return;
- ``until_start_s``: the command's start to the first task's start (composition, staging,
  sbatch, and the wait for a free node: other users' jobs on a shared testbed show up here);
- ``span_s``: the first task's start to the last task's last output;
- ``idle_s``: the time no task ran between the first wave of tasks and the next
  (:func:`idle_between_waves`): Slurm's wait for a scheduler pass.

Slurm starts pending batch jobs in passes of its scheduler, not when they are submitted or when
a task ends: a pass runs at most every ``batch_sched_delay`` seconds (``SchedulerParameters``,
default 3) when something asked for one, plus a full pass every ``sched_interval`` (60 s). So
on the testbed's 4 CPUs the 8 tasks start in two waves about 3 s apart, and when a launch
submits less than ``batch_sched_delay`` after the pass that started the previous launch's
last wave, its first wave waits for the rest of that interval: a launch then pays for how
quickly the launch *before* it ended (measured: the first task 0.8-3.3 s after the command's
start for the same launcher in back-to-back runs). Each run therefore starts once no job runs
and ``2 * batch_sched_delay + 2`` seconds have passed since the previous run ended
(:func:`quiet_scheduler`), the state a launch on a quiet cluster finds; the second wave's
wait stays in every run, as a user sees it. ``Slurm alone`` (:func:`slurm_alone_once`) is
the floor: the same tasks doing nothing, submitted by sbatch.
"""

from __future__ import annotations

import statistics
import subprocess
import time
from pathlib import Path

from run import APP, OURS_DB, SETUP, measure, mongo_client, read_entries, say

COLLECTION = "bench_life"
#: the variants of a round: ours with ``hydra/sweeper=seml``, ours with Hydra's default sweeper,
#: hydra-submitit-launcher
NAMES = ("seml-hydra", DEFAULT := "seml-hydra (default sweeper)", "hydra-submitit-launcher")


def _command(name: str, envs: dict, points: int) -> list[str]:
    x = f"x=range({points})"
    if name.startswith("seml-hydra"):
        python = str(envs["ours_bin"] / "python")
        launcher = ["hydra/launcher=seml"]
        if name == "seml-hydra":
            launcher.append("hydra/sweeper=seml")
        return [
            python,
            str(APP),
            "-m",
            *launcher,
            f"hydra.launcher.collection={COLLECTION}",
            SETUP,
            x,
        ]
    python = str(envs["hsl_bin"] / "python")
    launcher = ["hydra/launcher=submitit_slurm", f"hydra.sweeper.max_batch_size={points}"]
    return [python, str(APP), "-m", *launcher, SETUP, x]


def _slug(name: str) -> str:
    """``name`` as a file name: ``seml-hydra (default sweeper)`` -> ``seml-hydra_default_sweeper``."""
    return "_".join("".join(c if c.isalnum() or c == "-" else " " for c in name).split())


def _t0s(path: Path) -> dict[str, float]:
    """``{<array>_<task>: BENCH_T0}`` from the entry log."""
    out = {}
    for line in path.read_text().split("\n"):
        if line.strip():
            job, t0, _ = line.split()
            out[job] = float(t0)
    return out


def _last_output(run_dir: Path, job: str) -> float:
    """The last modification time of job ``job``'s submitit output files under ``run_dir``."""
    files = [p for p in run_dir.rglob(f"{job}_*_log.*") if p.suffix in (".out", ".err")]
    return max(p.stat().st_mtime for p in files)


def _cpu_seconds(text: str) -> float:
    """sacct's ``TotalCPU`` (``[[D-]HH:]MM:SS[.mmm]``) in seconds."""
    days, _, clock = text.rpartition("-")
    seconds = 0.0
    for part in clock.split(":"):
        seconds = seconds * 60 + float(part)
    return seconds + 86400 * int(days or 0)


def _cpus(path: Path) -> list[float]:
    """The CPU seconds at entry of each task from the CPU log (none when it is missing)."""
    if not path.exists():
        return []
    return [float(line.split()[1]) for line in path.read_text().split("\n") if line.strip()]


def _sacct_elapsed(jobs: list[str]) -> tuple[list[float], list[float]]:
    """sacct's ``ElapsedRaw`` and ``TotalCPU`` (s) of the array tasks ``jobs``, polled until
    each has ended."""
    arrays = sorted({j.split("_")[0] for j in jobs})
    deadline = time.monotonic() + 30
    while True:
        out = subprocess.run(
            [
                # no -X: the allocation's line then sums its steps' TotalCPU (with -X it is 0)
                *("sacct", "-n", "-P", "-j", ",".join(arrays)),
                *("-o", "JobID,State,ElapsedRaw,TotalCPU"),
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        rows = [line.split("|") for line in out.split("\n") if line.strip()]
        done = {r[0]: r for r in rows if r[0] in jobs and r[1] == "COMPLETED"}
        if len(done) == len(jobs) or time.monotonic() > deadline:
            ended = [done[j] for j in jobs if j in done]
            return [float(r[2]) for r in ended], [_cpu_seconds(r[3]) for r in ended]
        time.sleep(0.5)


def batch_sched_delay() -> float:
    """Slurm's ``batch_sched_delay`` (s): the ``SchedulerParameters`` value in ``scontrol show
    config``, else Slurm's default 3."""
    from seml_hydra.slurm.client import show_config

    for item in show_config().get("SchedulerParameters", "").split(","):
        name, _, value = item.strip().partition("=")
        if name == "batch_sched_delay" and value:
            return float(value)
    return 3.0


def quiet_scheduler(previous_end: float | None, delay: float) -> None:
    """Return once no job runs, starts or ends (held ones may wait) and ``2 * delay + 2``
    seconds have passed since ``previous_end`` (a ``time.time()``; None: the first run): the
    pass the previous run's last task ends ask for comes up to ``delay`` (+ the scheduler's
    1 s loop) after them, and the next pass ``delay`` after that one, so the next launch then
    finds the scheduler as after a quiet minute (the module's docstring). With ``delay + 1``
    a launch right after the floor run (whose tasks end at once) waited ~1 s more for its first
    task than after the others."""
    running = ["squeue", "-h", "-t", "RUNNING,COMPLETING,CONFIGURING"]
    while subprocess.run(running, capture_output=True, text=True).stdout.strip():
        time.sleep(0.5)
    if previous_end is not None:
        time.sleep(max(0.0, previous_end + 2 * delay + 2 - time.time()))


def idle_between_waves(t0: dict[str, float], last: dict[str, float]) -> float:
    """How long no task of the launch ran between its waves (s; pure): the tasks that started
    within 0.5 s of the first are the first wave; the time from the last of them ending to
    the next task's start, 0 when all started in one wave. On the testbed that is Slurm's wait
    for its next scheduler pass (``batch_sched_delay``), the same for either launcher unless a
    backfill or full pass (every 30 and 60 s) happens to come sooner."""
    first = min(t0.values())
    wave = [job for job, start in t0.items() if start - first <= 0.5]
    later = [start for job, start in t0.items() if job not in wave]
    if not later:
        return 0.0
    return max(0.0, min(later) - max(last[job] for job in wave))


def run_once(name: str, envs: dict, work: Path, label: str, points: int) -> dict:
    run_dir = work / label
    run_dir.mkdir()
    log = run_dir / "entries.txt"
    env_name = "ours" if name.startswith("seml-hydra") else "hsl"
    cpu_log = run_dir / "cpu.txt"
    env = {**envs[env_name], "BENCH_ENTRY_LOG": str(log), "BENCH_CPU_LOG": str(cpu_log)}
    started = time.time()
    result = measure(_command(name, envs, points), env=env, cwd=run_dir, label=_slug(name))
    ended = time.time()
    t0 = _t0s(log)
    last = {job: _last_output(run_dir, job) for job in t0}
    result["entry_s"] = read_entries(log)
    result["cpu_s"] = _cpus(cpu_log)
    result["life_s"] = [last[j] - t0[j] for j in t0]
    result["detect_s"] = ended - max(last.values())
    result["until_start_s"] = min(t0.values()) - started
    result["span_s"] = max(last.values()) - min(t0.values())
    result["idle_s"] = idle_between_waves(t0, last)
    result["sacct_s"], result["sacct_cpu_s"] = _sacct_elapsed(sorted(t0))
    return result


#: the floor of a round: the same number of tasks of ``true``, submitted by sbatch alone
SLURM_ALONE = "Slurm alone"


def slurm_alone_once(work: Path, label: str, points: int) -> dict:
    """Slurm's own share of a round, measured: an array of ``points`` tasks that each only
    append the time they end to a file, submitted by ``sbatch`` from this process. Returns
    ``{"wall_s": <sbatch's start to the last task's end>}``: the scheduler's passes (the
    first after the submission, the next ``batch_sched_delay`` later for the tasks the CPUs
    could not take at once) and the tasks' start and end in Slurm, with no Python, Hydra or
    launcher in it; what a launcher adds is its wall minus this."""
    run_dir = work / label
    run_dir.mkdir()
    ends = run_dir / "ends.txt"
    script = run_dir / "task.sh"
    script.write_text(f"#!/bin/bash\ndate +%s.%N >> {ends}\n")
    started = time.time()
    subprocess.run(
        ["sbatch", "-Q", "-a", f"0-{points - 1}", "-o", "/dev/null", "-J", "life_floor",
         str(script)],
        check=True,
    )  # fmt: skip
    deadline = started + 120
    while time.time() < deadline:
        lines = ends.read_text().split() if ends.exists() else []
        if len(lines) >= points:
            return {"wall_s": max(map(float, lines)) - started}
        time.sleep(0.02)
    raise RuntimeError(f"{label}: the {points} tasks of `true` did not end within 120 s")


def bench(args, envs, work: Path) -> dict:
    """``{name: [run, ...]}`` for each of :data:`NAMES` and :data:`SLURM_ALONE`, one run per
    round (``args.life_rounds``), the order rotated every round, each run after
    :func:`quiet_scheduler`; each run a dict of :func:`run_once` (of
    :func:`slurm_alone_once`)."""
    client = mongo_client(args.mongo)
    names = (*NAMES, SLURM_ALONE)
    runs: dict[str, list] = {n: [] for n in names}
    delay, ended = batch_sched_delay(), None
    for rnd in range(args.life_rounds):
        shift = rnd % len(names)
        for name in names[shift:] + names[:shift]:
            client[OURS_DB].drop_collection(COLLECTION)
            quiet_scheduler(ended, delay)
            label = f"life-{_slug(name)}-{rnd}"
            if name == SLURM_ALONE:
                runs[name].append(slurm_alone_once(work, label, args.life_points))
                ended = time.time()
                say(f"  (life) {name:28s} round {rnd}: total {runs[name][-1]['wall_s']:.2f} s")
                continue
            r = run_once(name, envs, work, label, args.life_points)
            ended = time.time()
            runs[name].append(r)
            say(
                f"  (life) {name:28s} round {rnd}: total {r['wall_s']:.2f} s, entry "
                f"{statistics.median(r['entry_s']):.3f} s, CPU at entry "
                f"{statistics.median(r['cpu_s']) if r['cpu_s'] else float('nan'):.3f} s, life "
                f"{statistics.median(r['life_s']):.3f} s, sacct "
                f"{statistics.median(r['sacct_s']) if r['sacct_s'] else float('nan'):.0f} s, "
                f"end seen after {r['detect_s']:.2f} s, first task after "
                f"{r['until_start_s']:.2f} s, tasks span {r['span_s']:.2f} s"
            )
    return runs


def _median_of(runs: list[dict], key: str) -> float:
    values = [
        v
        for run in runs
        if key in run
        for v in (run[key] if isinstance(run[key], list) else [run[key]])
    ]
    return statistics.median(values) if values else float("nan")


def rows(results: dict, args) -> list[tuple]:
    """Table rows ``(measure, ours, theirs, ratio, target, met)`` of :func:`bench`'s results."""
    if "job_life" not in results:
        return []
    r = results["job_life"]
    ours, theirs = r["seml-hydra"], r["hydra-submitit-launcher"]
    out = []
    n = args.life_points
    for key, label, target in (
        ("entry_s", "(life) task start -> task entry, s", 1.0),
        ("wall_s", f"(life) {n} no-op exps, command -> results, s", 1.0),
        ("cpu_s", "(life) task process CPU until task entry, s", None),
        ("sacct_cpu_s", "(life) task CPU start -> exit (sacct TotalCPU), s", None),
        ("life_s", "(life) task start -> task exit (last output), s", None),
        ("sacct_s", "(life) task elapsed in sacct, s", None),
        ("detect_s", "(life) last task exit -> command exit, s", None),
        ("until_start_s", "(life) command -> first task start, s", None),
        ("span_s", "(life) first task start -> last task exit, s", None),
    ):
        o, t = _median_of(ours, key), _median_of(theirs, key)
        ratio = o / t if t else float("nan")
        if target is None:
            out.append((label, o, t, ratio, "-", None))
        else:
            out.append((label, o, t, ratio, f"<= {target}", o <= target * t))
    default = r.get(DEFAULT)
    floor = _median_of(r.get(SLURM_ALONE, []), "wall_s")
    if r.get(SLURM_ALONE):  # older results have no floor runs
        out.append((f"(life) Slurm alone: {n} tasks of `true`, sbatch -> last end, s", floor,
                    floor, 1.0, "-", None))  # fmt: skip
        for name, runs_of in (("", ours), (", default sweeper", default or [])):
            o = _median_of(runs_of, "wall_s") - floor
            t = _median_of(theirs, "wall_s") - floor
            out.append((f"(life) command -> results beyond Slurm alone{name}, s", o, t,
                        o / t if t else float("nan"), "-", None))  # fmt: skip
    if default and "idle_s" in default[0]:  # the wall less Slurm's wait between the waves
        o = statistics.median(run["wall_s"] - run["idle_s"] for run in default)
        t = statistics.median(run["wall_s"] - run["idle_s"] for run in theirs)
        out.append((f"(life) {n} no-op exps, wall less the wait between waves, default sweeper, s",
                    o, t, o / t, "-", None))  # fmt: skip
    if default:  # older results have no default-sweeper runs
        for key, label, target in (
            ("wall_s", f"(life) {n} no-op exps, command -> results, default sweeper, s", 0.9),
            ("until_start_s", "(life) command -> first task start, default sweeper, s", None),
            ("idle_s", "(life) no task running between the waves, default sweeper, s", None),
            ("detect_s", "(life) last task exit -> command exit, default sweeper, s", None),
        ):
            o, t = _median_of(default, key), _median_of(theirs, key)
            ratio = o / t if t else float("nan")
            met = None if target is None else o <= target * t
            out.append((label, o, t, ratio, "-" if target is None else f"<= {target}", met))
    return out
