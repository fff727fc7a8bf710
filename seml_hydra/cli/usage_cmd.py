"""``seml <collection> usage``: requested against used resources per resource group, with a
suggestion (``track.usage``)."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any

import typer

from seml_hydra.cli.collection_cmds import command
from seml_hydra.cli.options import Target, on_collection


class Format(str, Enum):
    """How ``usage`` prints its report."""

    table = "table"
    markdown = "markdown"
    json = "json"


def _num(value: Any, unit: str = "", digits: int = 0) -> str:
    return "-" if value is None else f"{value:.{digits}f}{unit}"


@command()
@on_collection()
def usage(
    target: Target,
    verbose: Annotated[
        bool, typer.Option("-v", "--verbose", help="Also one row per experiment.")
    ] = False,
    fmt: Annotated[
        Format, typer.Option("--format", "-f", help="table, markdown or json.")
    ] = Format.table,
) -> None:
    """Requested against used resources per resource group of each batch (the arrays one
    resource set made): CPUs, memory, time limit and GPUs asked for; peak memory (MaxRSS),
    longest run, CPU efficiency and GPU memory used (sacct, else the experiments' stats); and
    a smaller request with headroom where one fits (memory +25%, time +50%)."""
    from seml_hydra.manage.results_table import to_markdown, to_text
    from seml_hydra.track.usage import advice_lines, percent, usage_report

    groups = usage_report(target.collection, target.selection.query())
    if fmt is Format.json:
        import json

        typer.echo(json.dumps([g.as_json() for g in groups], indent=2))
        return
    columns = [
        "batch",
        "arrays",
        "experiment",
        "ran",
        "CPUs",
        "mem",
        "time limit",
        "GPUs",
        "max RSS",
        "longest",
        "CPU eff.",
        "GPU mem",
    ]
    rows = []
    for g in groups:
        req, used = g.requested, g.used
        rows.append(
            {
                "batch": g.batch_id,
                "arrays": ",".join(g.arrays),
                "experiment": "all",
                "ran": f"{sum(e.elapsed_min is not None for e in g.experiments)}/{len(g.experiments)}",
                "CPUs": _num(req.get("cpus")),
                "mem": _num(req.get("mem_mb"), " MiB"),
                "time limit": _num(req.get("time_min"), " min"),
                "GPUs": _num(req.get("gpus")),
                "max RSS": _num(used.get("max_rss_mb"), " MiB"),
                "longest": _num(used.get("elapsed_min"), " min", 1),
                "CPU eff.": percent(used.get("cpu_efficiency")),
                "GPU mem": _num(used.get("gpu_mem_mb"), " MiB"),
            }
        )
        if verbose:
            for e in g.experiments:
                rows.append(
                    {
                        "batch": g.batch_id,
                        "arrays": e.job_id or "-",
                        "experiment": f"{e.exp_id} ({e.status})",
                        "ran": "yes" if e.elapsed_min is not None else "no",
                        "CPUs": _num(e.requested.get("cpus")),
                        "mem": _num(e.requested.get("mem_mb"), " MiB"),
                        "time limit": _num(e.requested.get("time_min"), " min"),
                        "GPUs": _num(e.requested.get("gpus")),
                        "max RSS": _num(e.max_rss_mb, " MiB"),
                        "longest": _num(e.elapsed_min, " min", 1),
                        "CPU eff.": percent(e.cpu_efficiency),
                        "GPU mem": _num(e.gpu_mem_mb, " MiB"),
                    }
                )
    if not groups:
        typer.echo("No experiment of the selection was submitted to Slurm.")
        return
    if fmt is Format.markdown:
        typer.echo(to_markdown(columns, rows), nl=False)
    else:
        typer.echo(to_text(columns, rows, title=f"{target.name}: usage"), nl=False)
    for line in advice_lines(groups, markdown=fmt is Format.markdown):
        typer.echo(line)
