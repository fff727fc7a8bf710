"""The small CLI helpers the commands share (no services): ``cli.core.report_ids`` (the
"No experiments to X" / "X n experiment(s): ids" line) and ``cli.options.num_experiments_option``
(one ``-n/--num-experiments`` declaration with each command's help text)."""

from __future__ import annotations

from typing import Annotated

import typer
from typer.testing import CliRunner

from seml_hydra.cli.core import report_ids
from seml_hydra.cli.options import num_experiments_option


def test_report_ids_prints_the_none_message_when_nothing_was_done(capsys):
    report_ids([], "Reset {n} experiment(s) to STAGED: {ids}", none="No experiments to reset.")
    assert capsys.readouterr().out == "No experiments to reset.\n"


def test_report_ids_prints_the_count_and_the_id_ranges(capsys):
    report_ids([5, 1, 2, 3], "Reset {n} experiment(s) to STAGED: {ids}", none="unused")
    assert capsys.readouterr().out == "Reset 4 experiment(s) to STAGED: 1-3, 5\n"


def test_report_ids_without_a_none_message_reports_zero(capsys):
    report_ids([], "Set the description of {n} experiment(s): {ids}")
    assert capsys.readouterr().out == "Set the description of 0 experiment(s): \n"


# module-level, as the commands declare them: typer reads the (string) annotations in the
# module's namespace
AtMost = Annotated[int, num_experiments_option("Show at most this many; 0 = all.")]
NotNegative = Annotated[int, num_experiments_option("Show at most this many; 0 = all.", min=0)]


def _show(num_experiments: int) -> None:
    typer.echo(f"limit={num_experiments}")


limit_app = typer.Typer()
not_negative_app = typer.Typer()


@limit_app.command()
def show(num_experiments: AtMost = 0) -> None:
    _show(num_experiments)


@not_negative_app.command()
def show_not_negative(num_experiments: NotNegative = 0) -> None:
    _show(num_experiments)


def test_num_experiments_option_takes_short_and_long_names_with_a_default_of_all():
    runner = CliRunner()
    app = limit_app
    assert runner.invoke(app, []).output == "limit=0\n"
    assert runner.invoke(app, ["-n", "3"]).output == "limit=3\n"
    assert runner.invoke(app, ["--num-experiments", "4"]).output == "limit=4\n"
    assert "Show at most this many; 0 = all." in runner.invoke(app, ["--help"]).output


def test_num_experiments_option_passes_further_option_keywords():
    result = CliRunner().invoke(not_negative_app, ["-n", "-1"])
    assert result.exit_code == 2


def test_an_id_or_batch_beyond_mongodbs_integers_is_a_usage_error_not_a_traceback():
    """``-b 99999999999999999999999`` reached pymongo, whose OverflowError ("MongoDB can only
    handle up to 8-byte ints") came out as a traceback; the range is now checked when the
    command line is read, before any connection."""
    from seml_hydra.cli import app

    for option in ("-b", "-id"):
        result = CliRunner().invoke(app, ["train", "status", option, str(2**63)])
        assert result.exit_code == 2, result.output
        said = " ".join(result.output.replace("│", " ").split())  # rich's error panel
        assert "less than or equal to 9223372036854775807" in said, result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)
