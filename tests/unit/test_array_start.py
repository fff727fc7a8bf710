"""When a Slurm array may start (``launch.submit``): ``deferred_start`` (a ``--begin`` a minute
ahead, brought forward once submitit wrote the output folders, unless the user chose a begin, a
hold or a deadline) and ``after_previous_array`` (an array cut from a throttled sweep waits for
the one before)."""

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
    ("Incompatible begin and deadline time specification"), and accepts it alone. An
    abbreviation sbatch takes for the option counts (``begi``: attacker finding, session 7,
    the deferred begin and its StartTime=now overrode it); ``hold: false`` holds nothing."""
    for extra in ({"begin": "16:00"}, {"hold": True}, {"deadline": "now+40"}, {"begi": "16:00"}):
        params = {"slurm_additional_parameters": extra}
        assert deferred_start(params, "slurm") == (params, False)


def test_the_local_executor_is_submitted_as_it_is():
    assert deferred_start({"name": "c_1"}, "local") == ({"name": "c_1"}, False)


def test_an_array_cut_from_a_throttled_sweep_waits_for_the_one_before():
    """``after_previous_array``: afterany on the previous array, joined with ``,`` to the
    dependency ``after`` gave, or to the user's own in additional_parameters (which sbatch
    takes over submitit's); a dependency of alternatives (``?``) is left alone."""
    from seml_hydra.launch.submit import after_previous_array

    assert after_previous_array({"name": "c_1"}, "41")["slurm_dependency"] == "afterany:41"
    joined = after_previous_array({"slurm_dependency": "afterok:7_*"}, "41")
    assert joined["slurm_dependency"] == "afterok:7_*,afterany:41"
    own = {"slurm_additional_parameters": {"dependency": "singleton", "hold": True}}
    assert after_previous_array(own, "41") == {
        "slurm_additional_parameters": {"dependency": "singleton,afterany:41", "hold": True}
    }
    assert own["slurm_additional_parameters"]["dependency"] == "singleton"  # not changed
    either = {"slurm_additional_parameters": {"dependency": "afterok:1?afterok:2"}}
    assert after_previous_array(either, "41") == either


def test_a_hold_set_false_is_not_sent_and_the_array_is_deferred_as_without_it():
    """``hold: false`` went to sbatch as ``--hold=False``, which it refuses (second attacker,
    session 7): an option set to false is not sent (``sbatch.sent_options``)."""
    from seml_hydra.launch.sbatch import executor_parameters, sbatch_options

    node = {"nodes": 1, "tasks_per_node": 1, "additional_parameters": {"hold": False, "x": 1}}
    params = executor_parameters(node, comment="c", name="c_1")
    assert params["slurm_additional_parameters"]["x"] == 1
    assert "hold" not in params["slurm_additional_parameters"]
    assert "hold" not in sbatch_options(node, comment="c", name="c_1")
    submitted, deferred = deferred_start(params, "slurm")
    assert deferred is True and submitted["slurm_additional_parameters"]["begin"]


def test_a_users_dependency_under_an_abbreviation_is_joined_too():
    """sbatch takes ``--depend`` for ``--dependency``; submitit writes both lines sorted and
    sbatch keeps the last, the launcher's: the user's own was dropped (second attacker,
    session 7)."""
    from seml_hydra.launch.submit import after_previous_array

    own = {"slurm_additional_parameters": {"depend": "singleton"}}
    assert after_previous_array(own, "41") == {
        "slurm_additional_parameters": {"depend": "singleton,afterany:41"}
    }
