"""``launch.submit.held_submission``: Slurm arrays go out held unless the user holds them."""

from seml_hydra.launch.submit import held_submission


def test_a_slurm_array_is_submitted_held_and_released_after():
    params = {"name": "c_1", "slurm_additional_parameters": {"signal": "B:USR2@90"}}
    submitted, release = held_submission(params, "slurm")
    assert release is True
    assert submitted["slurm_additional_parameters"] == {"signal": "B:USR2@90", "hold": True}
    assert params["slurm_additional_parameters"] == {"signal": "B:USR2@90"}  # not changed
    assert held_submission({"name": "c_1"}, "slurm")[0]["slurm_additional_parameters"] == {
        "hold": True
    }


def test_a_user_hold_stays_and_is_not_released():
    params = {"slurm_additional_parameters": {"hold": True}}
    assert held_submission(params, "slurm") == (params, False)


def test_the_local_executor_is_submitted_as_it_is():
    assert held_submission({"name": "c_1"}, "local") == ({"name": "c_1"}, False)
