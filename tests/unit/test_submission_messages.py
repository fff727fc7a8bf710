"""The launcher's messages when a submission fails (``launch.pipeline``): Slurm unreachable or
the request refused (``submission_failed_message``), and the arrays submitted before it
(``submitted_note``). Attacker findings, session 7: a stopped slurmctld was reported as "sbatch
refused the job ... change the resources", and arrays submitted before a refusal went unnamed."""

from types import SimpleNamespace

from seml_hydra.launch.pipeline import submission_failed_message, submitted_note


def test_an_unreachable_slurm_is_not_a_request_to_change():
    text = submission_failed_message(
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller "
        "(connect failure)",
        "col",
    )
    assert text.startswith("Slurm could not be used from here: ")
    assert "launch the sweep again once Slurm answers" in text and "`seml col start`" in text
    assert "Change the resources" not in text


def test_munge_down_is_not_a_request_to_change_either():
    """munged stopped: `scontrol show config` (MaxArraySize, before any sbatch) fails on
    authentication (second attacker, session 7: told as a refused request)."""
    text = submission_failed_message(
        "`scontrol show config` failed with exit status 1: scontrol: error: Munge encode "
        'failed: Failed to access "/run/munge/munge.socket.2" ... Protocol authentication '
        "error",
        "col",
    )
    assert text.startswith("Slurm could not be used from here: ")
    assert "Change the resources" not in text


def test_a_refused_request_says_what_to_change():
    text = submission_failed_message("Memory specification can not be satisfied", "col")
    assert text.startswith("sbatch refused the job: Memory specification")
    assert "Change the resources sbatch refused" in text and "stay STAGED" in text


def test_the_arrays_submitted_before_are_named_with_their_experiments():
    arrays = [
        SimpleNamespace(array_id="41", jobs={"41_0": (None, [1, 2]), "41_1": (None, [3])}),
        SimpleNamespace(array_id="42", jobs={"42_0": (None, [4])}),
    ]
    text = submitted_note(arrays, "col")
    assert "The 4 experiment(s) submitted before it (job(s) 41, 42) run" in text
    assert "`seml col status`" in text
    assert submitted_note([], "col") == ""
