"""One user-error base class: every error a user can cause derives from ``UserError``, and the
launcher and the ``seml`` command decide "message or traceback" by that one class."""

import pytest

from seml_hydra.core.errors import UserError, user_error_message
from seml_hydra.job.slurm_env import RankEnvironmentError
from seml_hydra.launch.pipeline import LaunchError
from seml_hydra.launch.submit import JobFilesError, SubmissionError
from seml_hydra.manage.selection import ManageError
from seml_hydra.slurm.client import SlurmError
from seml_hydra.store.errors import DatabaseError, InvalidCollectionName
from seml_hydra.store.server.tunnel import RuntimeDirError, TunnelError
from seml_hydra.store.snapshot.node import SourceSnapshotError

USER_ERRORS = [
    LaunchError,
    DatabaseError,
    InvalidCollectionName,
    ManageError,
    SlurmError,
    SubmissionError,
    JobFilesError,
    SourceSnapshotError,
    TunnelError,
    RuntimeDirError,
    RankEnvironmentError,
]


@pytest.mark.parametrize("cls", USER_ERRORS, ids=lambda c: c.__name__)
def test_every_user_error_derives_from_the_one_base_class(cls):
    assert issubclass(cls, UserError)


def test_a_user_errors_message_is_its_text():
    assert user_error_message(ManageError("unknown id 7")) == "unknown id 7"
    error = SlurmError(["squeue", "-u", "me"], "failed", returncode=1, stderr="down")
    assert user_error_message(error) == "`squeue -u me` failed: down"
    error = RankEnvironmentError("SLURM_PROCID", None, "the global rank")
    assert user_error_message(error) == "SLURM_PROCID is not set; expected the global rank"


def test_a_bug_gets_no_message_and_a_mongodb_error_is_named():
    import pymongo.errors

    assert user_error_message(KeyError("x")) is None
    assert user_error_message(pymongo.errors.OperationFailure("not authorized")) == (
        "MongoDB: not authorized"
    )


def test_a_user_error_is_printed_with_its_markup_as_text(capsys):
    """One printer of "Error: ..." for the launcher and the ``seml`` command."""
    from seml_hydra.cli import core as cli
    from seml_hydra.core.errors import print_error
    from seml_hydra.launch import launcher

    print_error(str(ManageError("bad [bold]id[/bold]")))
    assert capsys.readouterr().err == "Error: bad [bold]id[/bold]\n"
    assert launcher.print_error is print_error and cli.errors.print_error is print_error
