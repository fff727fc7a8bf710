"""``launch.submit.deferred_start``: Slurm arrays go out with a ``--begin`` a minute ahead,
brought forward once submitit wrote their folders, unless the user chose a begin or a hold."""

from seml_hydra.launch.submit import DEFERRED_START_S, deferred_start


def test_a_slurm_array_is_deferred_and_its_start_brought_forward_after():
    params = {"name": "c_1", "slurm_additional_parameters": {"signal": "B:USR2@90"}}
    submitted, deferred = deferred_start(params, "slurm")
    assert deferred is True
    assert submitted["slurm_additional_parameters"] == {
        "signal": "B:USR2@90",
        "begin": f"now+{DEFERRED_START_S}",
    }
    assert params["slurm_additional_parameters"] == {"signal": "B:USR2@90"}  # not changed
    assert deferred_start({"name": "c_1"}, "slurm")[0]["slurm_additional_parameters"] == {
        "begin": f"now+{DEFERRED_START_S}"
    }


def test_a_users_begin_hold_or_deadline_stays_theirs_and_nothing_is_brought_forward():
    """A deadline too: sbatch refuses ``--deadline=now+40 -t 1`` with ``--begin=now+60``
    ("Incompatible begin and deadline time specification"), and accepts it alone."""
    for extra in ({"begin": "16:00"}, {"hold": True}, {"deadline": "now+40"}):
        params = {"slurm_additional_parameters": extra}
        assert deferred_start(params, "slurm") == (params, False)


def test_the_local_executor_is_submitted_as_it_is():
    assert deferred_start({"name": "c_1"}, "local") == ({"name": "c_1"}, False)
