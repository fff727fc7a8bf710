"""(help) the ``seml`` commands that need no database, ours against SEML 0.5.7's, alternated
in one run: ``seml --help``, ``seml <col> --help``, ``seml configure --help``; and the floor,
what every typer command with rich help pays before its own code runs: ``python -c "import
typer, rich"`` and ``python -c "import typer.rich_utils"`` (typer's help printer, which loads
rich's Markdown and traceback modules) in each tool's virtualenv.

    python benchmarks/run.py --only help --cli-reps 21

Target: ``seml --help`` wall <= 0.8x SEML's. Medians of ``--cli-reps`` runs; CPU is user +
system of the process (``wait4``), less shaken by the machine's load than the wall time.
"""

from __future__ import annotations

import statistics
from pathlib import Path

#: label -> (our words, SEML's words) after ``seml``; SEML takes a collection first, always
COMMANDS = {
    "seml --help": (["--help"], ["--help"]),
    "seml <col> --help": (["bench_col", "--help"], ["bench_col", "--help"]),
    "seml configure --help": (["configure", "--help"], ["configure", "--help"]),
}
FLOORS = {
    "import typer, rich": "import typer, rich",
    "import typer.rich_utils": "import typer.rich_utils",
}
#: ``seml --help`` wall time target, as a fraction of SEML's
TARGET = 0.8


def bench(args, envs, work: Path) -> dict:
    import run

    out_dir = work / "help"
    out_dir.mkdir()
    tools = {
        "seml-hydra": (envs["ours_bin"], envs["ours"], 0),
        "seml": (envs["seml_bin"], envs["seml"], 1),
    }
    cases = {
        **{
            (label, tool): [str(b / "seml"), *words[i]]
            for label, words in COMMANDS.items()
            for tool, (b, _, i) in tools.items()
        },
        **{
            (label, tool): [str(b / "python"), "-c", code]
            for label, code in FLOORS.items()
            for tool, (b, _, _) in tools.items()
        },
    }
    results: dict = {f"{label}|{tool}": [] for label, tool in cases}
    for rep in range(args.cli_reps):  # alternated: every case once per round
        for (label, tool), cmd in cases.items():
            results[f"{label}|{tool}"].append(
                run.measure(cmd, env=tools[tool][1], cwd=out_dir, label=f"help-{rep}")
            )
    for label in [*COMMANDS, *FLOORS]:
        ours, theirs = results[f"{label}|seml-hydra"], results[f"{label}|seml"]
        run.say(
            f"  (help) {label:24s}: ours {_median(ours, 'wall_s'):.3f} s "
            f"(CPU {_median(ours, 'cpu_s'):.3f}), SEML {_median(theirs, 'wall_s'):.3f} s "
            f"(CPU {_median(theirs, 'cpu_s'):.3f})"
        )
    return results


def _median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def rows(results: dict, args) -> list[tuple]:
    """``(measure, seml-hydra, SEML 0.5.7, ratio, target, met)``: wall and CPU of each command
    and floor in each tool's virtualenv; the target is on ``seml --help``'s wall time."""
    out = []
    for label in [*COMMANDS, *FLOORS]:
        for metric, unit in (("wall_s", "wall s"), ("cpu_s", "CPU s")):
            ours = _median(results[f"{label}|seml-hydra"], metric)
            theirs = _median(results[f"{label}|seml"], metric)
            targeted = label == "seml --help" and metric == "wall_s"
            out.append(
                (
                    f"(help) {label}, {unit}",
                    ours,
                    theirs,
                    ours / theirs,
                    f"<= {TARGET}x" if targeted else "-",
                    ours <= TARGET * theirs if targeted else None,
                )
            )
    return out
