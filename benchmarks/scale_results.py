"""(results100k) ``seml <col> results`` of 100,000 experiments: wall time, CPU and peak memory
of the table, CSV and JSON outputs, and of CSV sorted by a result column (read back in
batches of ``_id`` s), with the target: peak RSS <= 100 MiB, rows streamed.

    python benchmarks/run.py --only results100k --cli-reps 3 [--scale-points 100000]
                             [--scale-base COMMIT]

The experiments are inserted directly (one ``insert_many`` per 1,000, not measured): the
shape of a finished point of ``benchmarks/apps/noop.py``'s 2-D sweep (``config.x``,
``config.y``, ``config.seed`` and constant keys, ``result.loss``, COMPLETED) with a
``seml.source_files`` list as long as a launch's (documents of ~4 KiB), so MongoDB reads what
it reads in a real collection. Output goes to a file (``run.measure``). With
``--scale-base COMMIT`` the same commands also run once from a virtualenv of that commit
(``scale_cli.base_venv``), for the figures before a change.
"""

from __future__ import annotations

import statistics
from pathlib import Path

#: database of its own (dropped at the end) and the collection
DB, COLLECTION = "seml_hydra_bench_results", "scale_results"
#: what is measured: label -> the words after ``seml <col>``
COMMANDS = {
    "table": ["results"],
    "csv": ["results", "-f", "csv"],
    "json": ["results", "-f", "json"],
    "csv sorted": ["results", "-f", "csv", "--sort", "result.loss", "--desc"],
}
#: peak RSS target, MiB
TARGET_MIB = 100


def document(i: int, side: int) -> dict:
    """Experiment ``i`` of a ``side x side`` grid, finished."""
    x, y = divmod(i, side)
    return {
        "_id": i + 1,
        "batch_id": 1,
        "status": "COMPLETED",
        "config": {"x": x, "y": y, "seed": 1000 + i, "model": "mlp", "lr": 0.001},
        "result": {"loss": (x * 0.37 + y * 0.11) % 1.0},
        "seml": {
            "source_files": [[f"src/module_{k}.py", f"{k:024x}"] for k in range(60)],
            "working_dir": "/home/user/project",
        },
    }


def bench(args, envs, work: Path) -> dict:
    import run
    import scale_cli

    n, reps = args.scale_points, args.cli_reps
    side = max(1, int(n**0.5))
    client = run.mongo_client(args.mongo)
    db = client[DB]
    env = {**envs["ours"], "SEML_MONGODB_URI": f"{args.mongo}/{DB}"}
    out_dir = work / "results100k"
    out_dir.mkdir()
    try:
        db.drop_collection(COLLECTION)
        # in small pieces: a child's peak RSS (``wait4``) starts from this process's RSS at
        # the fork, so this process stays small (10,000 documents at once: 264 MiB here)
        for start in range(0, n, 1000):
            db[COLLECTION].insert_many(
                [document(i, side) for i in range(start, min(n, start + 1000))]
            )
        run.say(f"  (results100k) inserted {n} COMPLETED experiments")
        variants = {"seml-hydra": envs["ours_bin"]}
        base = getattr(args, "scale_base", None)
        if base:
            variants[f"base {base}"] = scale_cli.base_venv(Path(args.cache), base, run)
        results: dict = {"points": n}
        for variant, bin_dir in variants.items():
            for label, words in COMMANDS.items():
                runs = []
                for rep in range(reps if variant == "seml-hydra" else 1):
                    runs.append(
                        run.measure(
                            [str(bin_dir / "seml"), COLLECTION, *words],
                            env=env,
                            cwd=out_dir,
                            label=f"results-{label.replace(' ', '-')}-{rep}",
                        )
                    )
                    text = (out_dir / f"results-{label.replace(' ', '-')}-{rep}.out").read_bytes()
                    lines = text.count(b"\n")
                    run.say(
                        f"  (results100k) [{variant}] {label:10s}: {runs[-1]['wall_s']:.2f} s, "
                        f"CPU {runs[-1]['cpu_s']:.2f} s, {runs[-1]['peak_rss_mib']:.0f} MiB, "
                        f"{lines} lines"
                    )
                results.setdefault(variant, {})[label] = runs
        return results
    finally:
        if not args.keep:
            client.drop_database(DB)


def rows(results: dict, args) -> list[tuple]:
    """``(measure, seml-hydra, base or NaN, ratio, target, met)`` rows: wall, CPU and peak RSS
    of each output; the peak RSS target is :data:`TARGET_MIB`."""
    r = results
    n = r["points"]
    base = next((v for v in r if v.startswith("base ")), None)
    nan = float("nan")
    out = []
    for label in COMMANDS:
        for metric, unit, target in (
            ("wall_s", "wall s", None),
            ("cpu_s", "CPU s", None),
            ("peak_rss_mib", "peak MiB", TARGET_MIB),
        ):
            ours = statistics.median(x[metric] for x in r["seml-hydra"][label])
            theirs = statistics.median(x[metric] for x in r[base][label]) if base else nan
            out.append(
                (
                    f"results {label}, {n} rows{f' [vs {base}]' if base else ''}, {unit}",
                    ours,
                    theirs,
                    ours / theirs if base else nan,
                    "-" if target is None else f"<= {target}",
                    None if target is None else ours <= target,
                )
            )
    return out
