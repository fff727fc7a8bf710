"""Side-by-side benchmarks of seml-hydra against SEML 0.5.7 and hydra-submitit-launcher 1.2.0.

    python benchmarks/run.py                 # everything: (a) staging, (b) overhead, (c) CLI
    python benchmarks/run.py --only a,c --points 1000 --reps 2
    python benchmarks/run.py --only s        # (s) the CLI on 100,000 experiments (scale_cli.py)
    python benchmarks/run.py --only life     # 8 no-op experiments end to end (job_life.py)

Where one launch's seconds go: ``benchmarks/launch_timeline.py`` (a timeline of one command).

Needs pymongo in this interpreter, the MongoDB at ``--mongo`` and the Slurm testbed. Each tool
runs from its own virtualenv under ``--cache`` (default ``~/.cache/seml-hydra-bench``), holding
only what installing it pulls: SEML 0.5.7 and hydra-submitit-launcher 1.2.0 (installed once),
and this checkout (installed as a wheel on every run). ``PYTHONDONTWRITEBYTECODE`` is dropped
from every tool's environment, as on a user's machine.
Prints a table of medians and ratios (ours / theirs) with peak memory, and writes the raw
numbers to ``benchmarks/results.json``. Not part of the test suite.

(a) staging N points: ``app.py -m hydra/launcher=seml hydra/sweeper=seml wait=false`` from the
    command line until every document is PENDING, vs ``seml <col> add`` of the same grid as a
    SEML YAML file (documents STAGED). To keep the testbed from running N jobs, our points are
    submitted as held jobs (``+hydra.launcher.additional_parameters.hold=true``) with
    ``experiments_per_job=N/8`` (one array of 8 tasks: the testbed's MaxArraySize is 8) and
    cancelled after the measurement: staging, the code snapshot and the sbatch call are in.
(b) per-experiment overhead: the sbatch script's ``setup`` line exports the time the Slurm task
    starts (``BENCH_T0``); the no-op task writes the time it is entered. Same app, same jobs,
    ours vs hydra-submitit-launcher (whose batches are cut at 8 by ``max_batch_size``, as its
    single array cannot exceed MaxArraySize).
(c) ``seml <col> status`` on the N documents of (a), ``seml list``, ``seml --help``.
(h) ``--only heartbeat``: bytes into MongoDB of one chatty experiment (benchmarks/heartbeat_bytes.py).

Peak memory is the peak resident set size of the measured process (``wait4``'s ``ru_maxrss``,
the largest of the process and its waited-for children).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import heartbeat_bytes

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import scale_cli  # noqa: E402  (benchmarks/scale_cli.py: (s), the CLI at scale)

ROOT = HERE.parent
APP = HERE / "apps" / "noop.py"
SEML_APP = HERE / "apps" / "seml_noop.py"
SEML_VERSION = "seml==0.5.7"
HSL_VERSION = "hydra-submitit-launcher==1.2.0"
OURS_DB = "seml_hydra_bench"
SEML_DB = "seml_hydra_bench_seml"
#: (a)'s target: our staging's wall time at most this fraction of SEML's ``add``
STAGE_TARGET = 0.3
SEML_SWEEPER_TARGET = "hydra_plugins.seml_launcher.seml_sweeper.SemlSweeper"


def say(text: str) -> None:
    print(text, flush=True)


# -- environments --------------------------------------------------------------------------------
def ensure_venv(cache: Path, name: str, requirement: str) -> Path:
    """A virtualenv ``cache/name`` with ``requirement`` installed (once); returns its bin dir."""
    venv = cache / name
    marker = venv / ".installed"
    if marker.exists() and marker.read_text() == requirement:
        return venv / "bin"
    say(f"installing {requirement} into {venv} ...")
    shutil.rmtree(venv, ignore_errors=True)
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", requirement, "setuptools<81"], check=True
    )
    marker.write_text(requirement)
    return venv / "bin"


def ours_venv(cache: Path) -> Path:
    """A virtualenv ``cache/venv-ours-<checkout>`` with this checkout installed as a user installs
    it (a wheel, byte-compiled, only the package's own dependencies); the checkout is re-installed
    on every run so the measured code is this tree. One per checkout, so benchmarks of two
    worktrees at once do not reinstall each other's. Returns its bin dir."""
    import hashlib

    checkout = hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]
    bin_dir = ensure_venv(cache, f"venv-ours-{checkout}", str(ROOT))
    say(f"installing this checkout into {bin_dir.parent} ...")
    subprocess.run(
        [str(bin_dir / "pip"), "install", "-q", "--no-deps", "--force-reinstall", str(ROOT)],
        check=True,
    )
    return bin_dir


def seml_home(home: Path, mongo: str, database: str = SEML_DB) -> Path:
    """``home``, made a HOME for SEML whose ``~/.config/seml/mongodb.config`` points at
    ``database`` on ``mongo`` (the user's own SEML configuration is left alone)."""
    host, _, port = mongo.removeprefix("mongodb://").split("/")[0].partition(":")
    config = home / ".config" / "seml" / "mongodb.config"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        f"username: null\npassword: null\nhost: {host}\nport: {port or 27017}\n"
        f"database: {database}\n"
    )
    return home


# -- measuring -----------------------------------------------------------------------------------
def measure(cmd: list[str], *, env: dict, cwd: Path, label: str) -> dict:
    """Run ``cmd``; wall time (s), peak RSS (MiB), return code. Output goes to files in cwd."""
    out = open(cwd / f"{label}.out", "w")
    err = open(cwd / f"{label}.err", "w")
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=err)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    out.close()
    err.close()
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        tail = (cwd / f"{label}.err").read_text()[-2000:]
        raise RuntimeError(f"{label}: {' '.join(cmd)} exited {code}\n{tail}")
    cpu = usage.ru_utime + usage.ru_stime  # the process and its waited-for children, s
    return {"wall_s": wall, "peak_rss_mib": usage.ru_maxrss / 1024, "cpu_s": cpu}


def mongo_client(url: str):
    import pymongo

    return pymongo.MongoClient(url, serverSelectionTimeoutMS=3000)


# -- (a) staging ---------------------------------------------------------------------------------
def seml_grid_yaml(points: int) -> str:
    side = int(round(points**0.5))
    assert side * side == points, "--points must be a square (x and y sweep the same range)"
    return seml_experiment_yaml(SEML_APP.name, side, side)


def seml_experiment_yaml(app_name: str, x: int, y: int) -> str:
    """SEML 0.5.7's experiment file of the grid ``x=range(x)``, ``y=range(y)`` over ``app_name``
    (one experiment per job, 10 minutes)."""
    return (
        "seml:\n"
        f"  executable: {app_name}\n"
        "  name: bench\n"
        "  output_dir: logs\n"
        "  project_root_dir: .\n"
        "slurm:\n"
        "  experiments_per_job: 1\n"
        "  sbatch_options:\n"
        "    time: 0-00:10\n"
        "grid:\n"
        f"  x:\n    type: range\n    min: 0\n    max: {x}\n    step: 1\n"
        f"  y:\n    type: range\n    min: 0\n    max: {y}\n    step: 1\n"
    )


def ours_stage_cmd(python: str, points: int, collection: str) -> list[str]:
    side = int(round(points**0.5))
    per_task = -(-points // 8)
    return [
        python,
        str(APP),
        "-m",
        "hydra/launcher=seml",
        "hydra/sweeper=seml",
        "hydra.launcher.wait=false",
        f"hydra.launcher.collection={collection}",
        f"hydra.launcher.experiments_per_job={per_task}",
        "+hydra.launcher.additional_parameters.hold=true",
        f"x=range({side})",
        f"y=range({side})",
    ]


def cancel_arrays(collection) -> None:
    arrays = {
        str(a)
        for d in collection.find({}, {"slurm.array_id": 1})
        for a in [d.get("slurm", [{}])[0].get("array_id")]
        if a is not None
    }
    if arrays:
        subprocess.run(["scancel", *sorted(arrays)], check=False)


def bench_staging(args, envs, work: Path) -> dict:
    client = mongo_client(args.mongo)
    ours_db, seml_db = client[OURS_DB], client[SEML_DB]
    seml_dir = work / "seml-add"
    seml_dir.mkdir(exist_ok=True)
    shutil.copy(SEML_APP, seml_dir / SEML_APP.name)
    (seml_dir / "grid.yaml").write_text(seml_grid_yaml(args.points))
    variants = {"seml-hydra": envs["ours"]}
    runs: dict[str, list] = {name: [] for name in [*variants, "seml"]}
    for rep in range(args.reps):
        for name, env in variants.items():
            ours_db.drop_collection("bench_stage")
            ours_db.drop_collection("fs.files")
            ours_db.drop_collection("fs.chunks")
            run_dir = work / f"stage-{name}-{rep}"
            run_dir.mkdir()
            result = measure(
                ours_stage_cmd(str(envs["ours_bin"] / "python"), args.points, "bench_stage"),
                env=env,
                cwd=run_dir,
                label="stage",
            )
            pending = ours_db["bench_stage"].count_documents({"status": "PENDING"})
            cancel_arrays(ours_db["bench_stage"])
            assert pending == args.points, f"{name}: {pending} PENDING of {args.points}"
            runs[name].append(result)
            say(
                f"  (a) {name:22s} rep {rep}: {result['wall_s']:.2f} s, {result['peak_rss_mib']:.0f} MiB"
            )
        seml_db.drop_collection("bench_seml")
        result = measure(
            [str(envs["seml_bin"] / "seml"), "bench_seml", "add", "grid.yaml"],
            env=envs["seml"],
            cwd=seml_dir,
            label=f"add-{rep}",
        )
        staged = seml_db["bench_seml"].count_documents({"status": "STAGED"})
        assert staged == args.points, f"seml add: {staged} STAGED of {args.points}"
        runs["seml"].append(result)
        say(
            f"  (a) {'seml add':22s} rep {rep}: {result['wall_s']:.2f} s, {result['peak_rss_mib']:.0f} MiB"
        )
    return runs


# -- (b) per-experiment overhead -----------------------------------------------------------------
SETUP = 'hydra.launcher.setup=["export BENCH_T0=$(date +%s.%N)"]'


def read_entries(path: Path) -> list[float]:
    deltas = []
    for line in path.read_text().split("\n"):
        if line.strip():
            _, t0, entered = line.split()
            deltas.append(float(entered) - float(t0))
    return deltas


def bench_overhead(args, envs, work: Path) -> dict:
    client = mongo_client(args.mongo)
    runs: dict[str, list] = {"seml-hydra": [], "hydra-submitit-launcher": []}
    x = f"x=range({args.jobs})"
    for rnd in range(args.rounds):
        client[OURS_DB].drop_collection("bench_overhead")
        run_dir = work / f"overhead-ours-{rnd}"
        run_dir.mkdir()
        log = run_dir / "entries.txt"
        cmd = [
            str(envs["ours_bin"] / "python"),
            str(APP),
            "-m",
            "hydra/launcher=seml",
            "hydra/sweeper=seml",
            "hydra.launcher.collection=bench_overhead",
            "hydra.launcher.poll_interval_s=0.5",
            SETUP,
            x,
        ]
        result = measure(
            cmd, env={**envs["ours"], "BENCH_ENTRY_LOG": str(log)}, cwd=run_dir, label="ours"
        )
        result["entry_s"] = read_entries(log)
        runs["seml-hydra"].append(result)
        say(
            f"  (b) seml-hydra              round {rnd}: median entry "
            f"{statistics.median(result['entry_s']):.3f} s, total {result['wall_s']:.1f} s"
        )
        run_dir = work / f"overhead-hsl-{rnd}"
        run_dir.mkdir()
        log = run_dir / "entries.txt"
        cmd = [
            str(envs["hsl_bin"] / "python"),
            str(APP),
            "-m",
            "hydra/launcher=submitit_slurm",
            "hydra.sweeper.max_batch_size=8",
            SETUP,
            x,
        ]
        result = measure(
            cmd, env={**envs["hsl"], "BENCH_ENTRY_LOG": str(log)}, cwd=run_dir, label="hsl"
        )
        result["entry_s"] = read_entries(log)
        runs["hydra-submitit-launcher"].append(result)
        say(
            f"  (b) hydra-submitit-launcher round {rnd}: median entry "
            f"{statistics.median(result['entry_s']):.3f} s, total {result['wall_s']:.1f} s"
        )
    return runs


# -- (c) CLI -------------------------------------------------------------------------------------
def bench_cli(args, envs, work: Path) -> dict:
    commands = {
        "status": (["seml", "bench_stage", "status"], ["seml", "bench_seml", "status"]),
        "list": (["seml", "list"], ["seml", "list"]),
        "--help": (["seml", "--help"], ["seml", "--help"]),
    }
    ours_bin = envs["ours_bin"]
    runs: dict[str, dict[str, list]] = {}
    run_dir = work / "cli"
    run_dir.mkdir()
    variants = {"seml-hydra": envs["ours"]}
    for name, (ours, theirs) in commands.items():
        runs[name] = {**{v: [] for v in variants}, "seml": []}
        for rep in range(args.cli_reps):
            for variant, env in variants.items():
                runs[name][variant].append(
                    measure(
                        [str(ours_bin / ours[0]), *ours[1:]],
                        env=env,
                        cwd=run_dir,
                        label=f"ours-{rep}",
                    )
                )
            runs[name]["seml"].append(
                measure(
                    [str(envs["seml_bin"] / theirs[0]), *theirs[1:]],
                    env=envs["seml"],
                    cwd=run_dir,
                    label=f"seml-{rep}",
                )
            )
        say(
            f"  (c) seml {name:7s}: ours "
            + ", ".join(f"{median(runs[name][v], 'wall_s'):.3f} s" for v in variants)
            + ", "
            f"SEML {median(runs[name]['seml'], 'wall_s'):.3f} s"
        )
    return runs


# -- report --------------------------------------------------------------------------------------
def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


#: --only name -> module of benchmarks/ with bench(args, envs, work) and rows(results, args)
MODULES = {"stage100k": "scale_stage", "results100k": "scale_results", "help": "cli_help"}
#: what ``--only scale`` runs: the rows at scale (100,000 points, job life, output bytes)
SCALE_ROWS = ("stage100k", "s", "life", "heartbeat")


def table(results: dict, args) -> list[tuple]:
    rows = []  # (measure, ours, theirs, ratio, target, met)
    for name, module in MODULES.items():
        if name in results:
            rows.extend(__import__(module).rows(results[name], args))
    if "staging" in results:
        r = results["staging"]
        for ours_name in [n for n in r if n.startswith("seml-hydra")]:
            ow, sw = median(r[ours_name], "wall_s"), median(r["seml"], "wall_s")
            om, sm = median(r[ours_name], "peak_rss_mib"), median(r["seml"], "peak_rss_mib")
            rows.append(
                (
                    f"(a) stage {args.points} pts, wall s [{ours_name}]",
                    ow,
                    sw,
                    ow / sw,
                    f"<= {STAGE_TARGET}",
                    ow <= STAGE_TARGET * sw,
                )
            )
            rows.append(
                (
                    f"(a) stage {args.points} pts, peak MiB [{ours_name}]",
                    om,
                    sm,
                    om / sm,
                    "<= 1.0",
                    om <= sm,
                )
            )
    if "overhead" in results:
        r = results["overhead"]
        oe = statistics.median(d for run in r["seml-hydra"] for d in run["entry_s"])
        he = statistics.median(d for run in r["hydra-submitit-launcher"] for d in run["entry_s"])
        rows.append(("(b) task start -> entry, s", oe, he, oe / he, "<= 1.1", oe <= 1.1 * he))
        ow = median(r["seml-hydra"], "wall_s")
        hw = median(r["hydra-submitit-launcher"], "wall_s")
        rows.append((f"(b) {args.jobs} no-op jobs, total wall s", ow, hw, ow / hw, "-", None))
    if "cli" in results:
        r = results["cli"]
        for (name, target), variant in itertools.product(
            (("status", 0.5), ("list", 0.5), ("--help", 1.0)),
            [v for v in r["status"] if v.startswith("seml-hydra")],
        ):
            ow, sw = median(r[name][variant], "wall_s"), median(r[name]["seml"], "wall_s")
            om, sm = (
                median(r[name][variant], "peak_rss_mib"),
                median(r[name]["seml"], "peak_rss_mib"),
            )
            label = f"(c) seml {name} [{variant}]"
            rows.append((f"{label}, wall s", ow, sw, ow / sw, f"<= {target}", ow <= target * sw))
            rows.append((f"{label}, peak MiB", om, sm, om / sm, "-", None))
    if "heartbeat" in results:
        rows += heartbeat_bytes.rows(results["heartbeat"], args)
    return rows


def print_table(rows: list[tuple]) -> str:
    lines = [
        f"| {'measure':52s} | {'seml-hydra':>10s} | {'theirs':>10s} | {'ratio':>6s} | {'target':>7s} | met |",
        f"|{'-' * 54}|{'-' * 12}|{'-' * 12}|{'-' * 8}|{'-' * 9}|-----|",
    ]
    for name, ours, theirs, ratio, target, met in rows:
        flag = "-" if met is None else ("yes" if met else "NO")
        lines.append(
            f"| {name:52s} | {ours:10.3f} | {theirs:10.3f} | {ratio:6.2f} | {target:>7s} | {flag:3s} |"
        )
    text = "\n".join(lines)
    print(text)
    return text


def tool_envs(
    mongo: str, cache: Path, *, seml_bin: Path | None, hsl_bin: Path | None, ours_bin: Path
) -> dict:
    """Each tool's environment and interpreter folder: ``{"ours", "seml", "hsl": environ,
    "ours_bin", "seml_bin", "hsl_bin": folder}`` (``seml``'s environment is empty without
    ``seml_bin``). As on a user's machine: no Slurm job's variables, and Python writes and
    reuses its bytecode caches for every tool (``PYTHONDONTWRITEBYTECODE`` dropped)."""
    base_env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "SBATCH_")) and k != "PYTHONDONTWRITEBYTECODE"
    }
    return {
        "ours": {**base_env, "SEML_MONGODB_URI": f"{mongo}/{OURS_DB}"},
        "seml": {**base_env, "HOME": str(seml_home(cache / "seml-home", mongo))}
        if seml_bin
        else {},
        "hsl": dict(base_env),
        "seml_bin": seml_bin,
        "hsl_bin": hsl_bin,
        "ours_bin": ours_bin,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        default="a,b,c",
        help=f"which benchmarks: a,b,c,s,heartbeat,life,{','.join(MODULES)}; "
        f"scale = {','.join(SCALE_ROWS)} (the rows at scale)",
    )
    parser.add_argument("--points", type=int, default=10_000, help="(a)/(c) points (a square)")
    parser.add_argument("--reps", type=int, default=3, help="(a) repetitions")
    parser.add_argument("--jobs", type=int, default=20, help="(b) no-op jobs")
    parser.add_argument("--rounds", type=int, default=2, help="(b) rounds")
    parser.add_argument("--cli-reps", type=int, default=5, help="(c)/(s) repetitions")
    parser.add_argument("--scale-points", type=int, default=100_000, help="(s) experiments")
    parser.add_argument("--scale-base", default=None, help="(s) also a commit's status/queue")
    parser.add_argument(
        "--scale-rows", default=None, help=f"(s) only these steps: {','.join(scale_cli.ROWS)}"
    )
    parser.add_argument("--heartbeat-seconds", default="60,120", help="(h) run lengths, s")
    parser.add_argument("--heartbeat-kb-per-s", default="10", help="(h) KB printed per second")
    parser.add_argument("--life-rounds", type=int, default=5, help="(life) alternated rounds")
    parser.add_argument("--life-points", type=int, default=8, help="(life) experiments")
    parser.add_argument(
        "--mongo", default=os.environ.get("SEML_TEST_MONGO_URL", "mongodb://127.0.0.1:27017")
    )
    parser.add_argument("--cache", default=os.path.expanduser("~/.cache/seml-hydra-bench"))
    parser.add_argument(
        "--keep", action="store_true", help="keep the benchmark databases and the work dir"
    )
    parser.add_argument("--output", default=str(HERE / "results.json"))
    args = parser.parse_args()
    only = set(args.only.split(","))
    if "scale" in only:
        only = (only - {"scale"}) | set(SCALE_ROWS)
    cache = Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)

    seml_bin = (
        ensure_venv(cache, "venv-seml", SEML_VERSION)
        if only & {"a", "c", "s", "heartbeat", *MODULES}
        else None
    )
    hsl_bin = ensure_venv(cache, "venv-hsl", HSL_VERSION) if only & {"b", "life"} else None
    ours_bin = ours_venv(cache)
    envs = tool_envs(args.mongo, cache, seml_bin=seml_bin, hsl_bin=hsl_bin, ours_bin=ours_bin)
    work = Path(tempfile.mkdtemp(prefix="seml-hydra-bench-"))
    say(f"work dir {work}")
    results: dict = {}
    try:
        if "a" in only or "c" in only:
            say(f"(a) staging {args.points} points ...")
            results["staging"] = bench_staging(args, envs, work)
        if "b" in only:
            say(f"(b) {args.jobs} no-op jobs on Slurm ...")
            results["overhead"] = bench_overhead(args, envs, work)
        if "c" in only:
            say("(c) seml status / list / --help ...")
            results["cli"] = bench_cli(args, envs, work)
        if "heartbeat" in only:
            say("(h) bytes into MongoDB of one chatty experiment ...")
            results["heartbeat"] = heartbeat_bytes.bench(args, envs, work)
        if "life" in only:
            import job_life

            say(f"(life) {args.life_points} no-op experiments, whole job life ...")
            results["job_life"] = job_life.bench(args, envs, work)
        if "s" in only:  # the CLI at scale (benchmarks/scale_cli.py)
            say(f"(s) the seml CLI on {args.scale_points} experiments ...")
            results["scale_cli"] = scale_cli.bench(args, envs, work)
        for name in sorted(only & set(MODULES)):
            say(f"({name}) ...")
            results[name] = __import__(MODULES[name]).bench(args, envs, work)
    finally:
        if not args.keep:
            client = mongo_client(args.mongo)
            client.drop_database(OURS_DB)
            client.drop_database(SEML_DB)
            shutil.rmtree(work, ignore_errors=True)  # its output folders, ~100 MB a full run
    rows = table(results, args)
    if "job_life" in results:
        import job_life

        rows += job_life.rows(results, args)
    if "scale_cli" in results:
        rows += scale_cli.rows(results, args)
    text = print_table(rows)
    Path(args.output).write_text(
        json.dumps(
            {
                "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "machine": {
                    "cpus": os.cpu_count(),
                    "python": platform.python_version(),
                    "node": platform.node(),
                },
                "args": vars(args),
                "table": [
                    dict(zip(("measure", "seml_hydra", "theirs", "ratio", "target", "met"), r))
                    for r in rows
                ],
                "table_text": text,
                "raw": results,
            },
            indent=1,
            default=str,
        )
    )
    say(f"raw numbers: {args.output}")


if __name__ == "__main__":
    main()
