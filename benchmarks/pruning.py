"""Early stopping on Slurm arrays: how many steps a sweep runs and what it finds, full grid vs
``hydra.launcher.pruner`` ``asha`` and ``median``, beside Optuna's SuccessiveHalvingPruner and
MedianPruner run in this process on the very same curves.

    python benchmarks/pruning.py                      # needs MongoDB and the Slurm testbed

The app is ``examples/curves.py``: ``--configs`` (64) known learning curves of family
``--family`` (0), ``--steps`` (27) steps each, every step sleeping ``--step-s`` (0.02 s) and
reported through ``seml_hydra.report``. The sweep gives the configurations in a shuffled order
(``random.Random(--family)``) and runs on the testbed with ``array_parallelism=4``. Our rows
read the documents: steps executed (the values each experiment reported), the best final loss
among the experiments that ran to the end, and whether that is the grid's best (or within 1%
of its final loss). Optuna's rows run the same curves in the same order, one trial after the
other (``study.optimize``, ``n_jobs=1``: it sees every earlier trial, which our tasks running
four at a time do not): SuccessiveHalvingPruner with our ASHA's parameters (``min_resource=1``,
``reduction_factor=3``) and MedianPruner with its defaults. ``--replay N`` adds the same Optuna
rows and our rules replayed one experiment after the other for families 0..N-1 (no Slurm).

Writes every number to ``benchmarks/results_pruning.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
APP = HERE.parent / "examples" / "curves.py"
DB = "seml_hydra_bench_pruning"
#: the pruners of our rows (``hydra.launcher.pruner``); grid: none
PRUNERS = {
    "grid": None,
    "asha": "{rule: asha, metric: loss, mode: min, max_step: STEPS}",
    "median": "{rule: median, metric: loss, mode: min}",
}


def curves_module() -> Any:
    """``examples/curves.py`` as a module (its :func:`loss` is the curves' definition)."""
    spec = importlib.util.spec_from_file_location("bench_curves", APP)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def order(configs: int, family: int) -> list[int]:
    """The shuffled order the sweep gives the configurations in."""
    ids = list(range(configs))
    random.Random(family).shuffle(ids)
    return ids


def run_ours(mode: str, args: argparse.Namespace, mongo: str) -> dict[str, Any]:
    """One sweep on the testbed; its steps, best final loss and wall time, from the documents."""
    import pymongo

    collection = f"prune_{mode}_f{args.family}"
    client = pymongo.MongoClient(mongo)
    client[DB].drop_collection(collection)
    client[DB].drop_collection(f"seml_hydra_metrics.{collection}")
    argv = [
        sys.executable,
        str(APP),
        "-m",
        "hydra/launcher=seml",
        f"hydra.launcher.collection={collection}",
        f"hydra.launcher.array_parallelism={args.parallelism}",
        "hydra.launcher.poll_interval_s=0.5",
        f"hydra.sweep.dir={args.work}/{collection}",
        f"family={args.family}",
        f"steps={args.steps}",
        f"step_s={args.step_s}",
        "config=" + ",".join(map(str, order(args.configs, args.family))),
    ]
    if PRUNERS[mode]:
        argv.append("hydra.launcher.pruner=" + PRUNERS[mode].replace("STEPS", str(args.steps)))
    env = {**os.environ, "SEML_MONGODB_URI": f"{mongo}/{DB}"}
    began = time.monotonic()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, cwd=args.work)
    wall = time.monotonic() - began
    if proc.returncode != 0:
        raise SystemExit(f"{mode}: the sweep failed\n{proc.stdout}\n{proc.stderr}")
    fields = ("config", "status", "pruned", "result", "pruning.values", "start_time")
    docs = list(client[DB][collection].find({}, dict.fromkeys(fields, 1)).sort("start_time", 1))
    steps = sum(len((d.get("pruning") or {}).get("values") or {}) for d in docs)
    if mode == "grid":  # no pruner: report logs the metric only
        steps = args.configs * args.steps
    full = [d for d in docs if d["status"] == "COMPLETED" and "pruned" not in d]
    best = min(full, key=lambda d: d["result"])
    return {
        "steps": steps,
        "best_config": best["config"]["config"],
        "best_final": best["result"],
        "pruned": sum("pruned" in d for d in docs),
        "wall_s": round(wall, 1),
        "statuses": sorted({d["status"] for d in docs}),
        # the configurations in the order their tasks started (not quite the sweep's order:
        # four start at once)
        "start_order": [d["config"]["config"] for d in docs],
    }


def run_optuna(
    pruner_name: str,
    args: argparse.Namespace,
    family: int,
    jobs: int = 1,
    configs: list[int] | None = None,
) -> dict[str, Any]:
    """Optuna's pruner on the same curves, trials started in the same order: one after the
    other (``jobs=1``, no sleep), or ``jobs`` threads at a time (``study.optimize(n_jobs=...)``)
    each step sleeping ``--step-s`` as our tasks do, so that trials overlap as ours do.
    ``configs``: another order (the one our tasks started in)."""
    import threading
    import warnings

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", message=".*n_jobs.*", category=FutureWarning)
    curves = curves_module()
    pruner = (
        optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=3)
        if pruner_name == "sha"
        else optuna.pruners.MedianPruner()
    )
    pending = iter(configs or order(args.configs, family))
    steps = [0]
    lock = threading.Lock()

    def objective(trial: Any) -> float:
        with lock:
            config = next(pending)
        trial.set_user_attr("config", config)
        value = float("nan")
        for step in range(1, args.steps + 1):
            if jobs > 1:
                time.sleep(args.step_s)
            value = curves.loss(config, step, family)
            with lock:
                steps[0] += 1
            trial.report(value, step)
            if trial.should_prune():
                raise optuna.TrialPruned()
        return value

    study = optuna.create_study(direction="minimize", pruner=pruner)
    study.optimize(objective, n_trials=args.configs, n_jobs=jobs)
    return {
        "steps": steps[0],
        "best_config": study.best_trial.user_attrs["config"],
        "best_final": study.best_value,
        "pruned": sum(t.state.name == "PRUNED" for t in study.trials),
    }


def replay_ours(rule: str, args: argparse.Namespace, family: int) -> dict[str, Any]:
    """Our rules (``seml_hydra.core.pruning``) replayed one experiment after the other, in the
    same order: what the Slurm rows would give with ``array_parallelism=1``."""
    from seml_hydra.core import pruning

    curves = curves_module()
    spec = {"rule": rule, "metric": "loss", "mode": "min"}
    if rule == "asha":
        spec["max_step"] = args.steps
    pruner = pruning.parse_pruner(spec)
    rungs: dict[int, list[float]] = {}
    finished: dict[int, list[float]] = {}
    steps, pruned = 0, 0
    for config in order(args.configs, family):
        values: list[float] = []
        decided, stopped = 0, False
        for step in range(1, args.steps + 1):
            value = curves.loss(config, step, family)
            values.append(value)
            steps += 1
            if rule == "asha":
                for rung in pruning.rungs_reached(pruner, step, decided):
                    rungs.setdefault(rung, []).append(value)
                    decided = rung + 1
                    if not pruning.asha_promotes(value, rungs[rung], 3, "min"):
                        stopped = True
                        break
            else:
                at_step = [v[step - 1] for v in finished.values() if len(v) >= step]
                best = pruning.best_value(values, "min")
                stopped = pruning.median_prunes(best, at_step, len(finished), step, pruner)
            if stopped:
                break
        if stopped:
            pruned += 1
        else:
            finished[config] = values
    best_config = min(finished, key=lambda c: finished[c][-1])
    return {
        "steps": steps,
        "best_config": best_config,
        "best_final": finished[best_config][-1],
        "pruned": pruned,
    }


def grid_best(args: argparse.Namespace, family: int) -> tuple[int, float]:
    curves = curves_module()
    finals = {c: curves.loss(c, args.steps, family) for c in range(args.configs)}
    best = min(finals, key=finals.get)
    return best, finals[best]


def row(name: str, result: dict[str, Any], grid: int, best: float) -> str:
    share = result["steps"] / grid
    gap = result["best_final"] / best - 1
    found = "yes" if gap <= 0.01 else "NO"
    wall = f"{result['wall_s']}" if "wall_s" in result else "-"
    return (
        f"| {name} | {result['steps']} | {share:.1%} | {result['pruned']} | "
        f"{result['best_config']} | {result['best_final']:.4f} | {gap:+.2%} | {found} | {wall} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", type=int, default=64)
    parser.add_argument("--steps", type=int, default=27)
    parser.add_argument("--family", type=int, default=0)
    parser.add_argument("--parallelism", type=int, default=4)
    parser.add_argument("--step-s", type=float, default=0.02)
    parser.add_argument("--modes", default="grid,asha,median", help="our rows ('' : none)")
    parser.add_argument("--replay", type=int, default=10, help="families replayed in-process")
    parser.add_argument(
        "--mongo", default=os.environ.get("SEML_TEST_MONGO_URL", "mongodb://127.0.0.1:27017")
    )
    parser.add_argument("--work", default="/tmp/seml_hydra_bench_pruning")
    parser.add_argument("--out", default=str(HERE / "results_pruning.json"))
    args = parser.parse_args()
    Path(args.work).mkdir(parents=True, exist_ok=True)

    grid = args.configs * args.steps
    best_config, best = grid_best(args, args.family)
    results: dict[str, Any] = {"args": vars(args), "grid_best": [best_config, best]}
    head = (
        "| run | steps | of grid | pruned | best found | its final loss | vs grid best | "
        "within 1% | wall s |\n|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for mode in filter(None, args.modes.split(",")):
        results[mode] = run_ours(mode, args, args.mongo)
        lines.append(
            row(f"seml-hydra {mode} (Slurm, %{args.parallelism})", results[mode], grid, best)
        )
    for name in ("sha", "median"):
        label = "SuccessiveHalvingPruner" if name == "sha" else "MedianPruner"
        for jobs in (1, args.parallelism):
            key = f"optuna_{name}" + (f"_threads{jobs}" if jobs > 1 else "")
            results[key] = run_optuna(name, args, args.family, jobs)
            how = "one trial at a time" if jobs == 1 else f"{jobs} threads"
            lines.append(row(f"Optuna {label} (in-process, {how})", results[key], grid, best))
        ours = results.get("asha" if name == "sha" else "median")
        if ours:  # the same pruner, fed the curves in the order our tasks started
            key = f"optuna_{name}_our_start_order"
            results[key] = run_optuna(name, args, args.family, configs=ours["start_order"])
            how = "one trial at a time, in our tasks' start order"
            lines.append(row(f"Optuna {label} (in-process, {how})", results[key], grid, best))
    print(f"family {args.family}: grid best = config {best_config}, final loss {best:.4f}")
    print("\n".join(lines))

    if args.replay:
        replay_lines = [
            "| family | grid best | asha replayed: steps, gap | Optuna SH: steps, gap | "
            "median replayed: steps, gap | Optuna median: steps, gap |",
            "|---|---|---|---|---|---|",
        ]
        results["replay"] = []
        for family in range(args.replay):
            _, fbest = grid_best(args, family)
            cells = {
                "asha": replay_ours("asha", args, family),
                "optuna_sha": run_optuna("sha", args, family),
                "median": replay_ours("median", args, family),
                "optuna_median": run_optuna("median", args, family),
            }
            results["replay"].append({"family": family, "grid_best": fbest, **cells})
            shown = " | ".join(
                f"{c['steps']}, {c['best_final'] / fbest - 1:+.1%}" for c in cells.values()
            )
            replay_lines.append(f"| {family} | {fbest:.4f} | {shown} |")
        print("\nReplayed one experiment after the other (no Slurm):")
        print("\n".join(replay_lines))
    Path(args.out).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
