"""The waiter (``seml_hydra.launch.wait``): its pause between two polls (``poll_pause``: the poll
interval, stretched when counting the states is slow) and the ``JobReturn``s it builds from the
documents. Pure."""

from __future__ import annotations

from seml_hydra.config import SemlLauncherConf
from seml_hydra.launch.wait import QUERY_SHARE, poll_pause


def test_a_cheap_count_polls_at_the_interval():
    assert poll_pause(0.25, 0.001) == 0.25
    assert poll_pause(5.0, 0.0) == 5.0


def test_a_slow_count_stretches_the_pause_so_counting_stays_a_small_share():
    assert poll_pause(0.25, 0.2) == QUERY_SHARE * 0.2
    assert poll_pause(0.25, 0.2) >= 0.2 * 19  # the count takes at most ~5% of the waiting


def test_the_stretched_pause_has_a_ceiling():
    from seml_hydra.launch.wait import MAX_STRETCHED_PAUSE_S

    assert poll_pause(0.25, 61.0) == MAX_STRETCHED_PAUSE_S
    assert poll_pause(30.0, 61.0) == 30.0  # the user's own interval stays


def test_waiting_for_an_unreachable_database_is_no_slow_count(monkeypatch):
    """The state count rides out an outage (``retrying``); the time spent waiting for the
    server is not the count's duration. It was: a 61 s outage stretched the next pause to
    20 x 61 s, and the launcher slept ~20 minutes after its experiments had finished (CI,
    session 7: test_db_outage timed out)."""
    import io
    import time
    from types import SimpleNamespace

    from pymongo.errors import AutoReconnect
    from rich.console import Console

    from seml_hydra.launch import wait

    answers = iter([AutoReconnect("down"), {"RUNNING": 1}, {"COMPLETED": 1}])

    def count_states(collection, ids):
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer  # retrying pauses 0.5 s, then asks again
        return answer

    pauses = []
    monkeypatch.setattr(wait, "count_states", count_states)
    monkeypatch.setattr(
        wait, "time", SimpleNamespace(monotonic=time.monotonic, sleep=pauses.append)
    )
    console = Console(file=io.StringIO())
    wait.wait_for(None, [1], poll_interval_s=0.25, jobs={}, console=console, collection_name="c")
    assert pauses == [0.25]
    assert "reachable again" in console.file.getvalue()


def test_the_default_interval_notices_the_end_within_a_quarter_second():
    """hydra-submitit-launcher's ``Job.result`` checks for the result pickle every second."""
    assert SemlLauncherConf().poll_interval_s <= 0.25


#: a COMPLETED experiment's document, as the launcher's wait loop reads it
COMPLETED_DOC = {
    "_id": 3,
    "status": "COMPLETED",
    "result": 7,
    "config": {"x": 1},
    "hydra": {"node_diff": [], "job_id": "12_2", "overrides": ["x=1"]},
}


def test_a_job_return_builds_its_configs_only_when_read(monkeypatch):
    """The sweepers read ``status`` and ``return_value``: the launcher creates no
    ``DictConfig`` for a finished experiment until ``cfg`` or ``hydra_cfg`` is read."""
    from omegaconf import OmegaConf

    from seml_hydra.launch.wait import job_return_from_document

    created = []
    create = OmegaConf.create
    monkeypatch.setattr(OmegaConf, "create", lambda *a, **k: created.append(a) or create(*a, **k))
    doc = dict(COMPLETED_DOC)
    ret = job_return_from_document(doc, {"job": {"name": "app"}}, "coll")
    assert ret.return_value == 7 and ret.overrides == ["x=1"] and created == []
    assert ret.cfg.x == 1 and ret.hydra_cfg.hydra.job.id == "12_2"
    assert ret.cfg is ret.cfg and len(created) == 2  # built once each


def test_a_job_return_from_a_document_pickles_as_hydras_own():
    """hydra-zen's ``launch`` hands the JobReturns to the caller, who may pickle them (a plain
    Hydra ``JobReturn`` pickles): one built from a document loads as a ``JobReturn`` with its
    configs, status and result, a FAILED one with its ``ExperimentFailed``."""
    import pickle

    import pytest
    from hydra.core.utils import JobReturn, JobStatus

    from seml_hydra.launch.wait import ExperimentFailed, job_return_from_document

    doc = dict(COMPLETED_DOC)
    back = pickle.loads(pickle.dumps(job_return_from_document(doc, {"job": {"name": "a"}}, "c")))
    assert type(back) is JobReturn and back.status == JobStatus.COMPLETED
    assert back.return_value == 7 and back.overrides == ["x=1"] and back.cfg.x == 1
    assert back.hydra_cfg.hydra.job.id == "12_2"
    failed = job_return_from_document(
        {**doc, "status": "FAILED", "fail_trace": ["boom\n"]}, {"job": {}}
    )
    back = pickle.loads(pickle.dumps(failed))
    assert back.status == JobStatus.FAILED
    with pytest.raises(ExperimentFailed, match="boom"):
        _ = back.return_value


def test_a_killed_point_without_a_trace_still_says_why_it_failed():
    """A KILLED set by another tool carries no ``fail_trace``: the point's error must not be
    an empty reason."""
    import pytest

    from seml_hydra.launch.wait import ExperimentFailed, job_return_from_document

    for trace in (None, [], ""):
        doc = {**COMPLETED_DOC, "status": "KILLED", "fail_trace": trace}
        ret = job_return_from_document(doc, {"job": {}}, "coll")
        with pytest.raises(ExperimentFailed) as error:
            _ = ret.return_value
        assert str(error.value).splitlines()[1].startswith("no reason was recorded")
        assert "seml coll print-output -id" in str(error.value)


def test_a_failed_point_is_reported_by_hydra_as_its_trace_alone(capsys, monkeypatch):
    """Hydra's basic sweeper re-raises the first failed point's ``return_value``; Hydra's
    ``run_and_report`` then printed its own and the sweeper's frames around the experiment's
    trace (it strips only up to ``run_job``, which the launcher never runs). Now it prints the
    message: the experiment, its trace and where every failed point's trace is, exit 1."""
    import pytest
    from hydra._internal.utils import run_and_report

    from seml_hydra.launch.wait import ExperimentFailed, job_return_from_document

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    trace = ["Traceback (most recent call last):\n", '  File "app.py", line 3\n', "ValueError: x\n"]
    doc = {**COMPLETED_DOC, "status": "FAILED", "fail_trace": trace}
    ret = job_return_from_document(doc, {"job": {}}, "my runs")

    def sweep():  # what hydra's BasicSweeper.sweep does with each JobReturn
        _ = ret.return_value

    with pytest.raises(SystemExit) as exit_:
        run_and_report(sweep)
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert "experiment 3 is FAILED:\nTraceback (most recent call last):" in err
    assert "ValueError: x\n(`seml 'my runs' print-fail-trace` shows the trace of every" in err
    assert "basic_sweeper" not in err and "run_and_report" not in err, err
    assert isinstance(ExperimentFailed("x"), RuntimeError)  # what callers may catch


def test_a_point_deleted_meanwhile_gets_no_print_fail_trace_hint():
    """The launcher reports a point deleted while it waited as DELETED with a trace of its own;
    ``print-fail-trace`` cannot show it (outside tester, session of 2026-12-07)."""
    import pytest

    from seml_hydra.launch.wait import ExperimentFailed, job_return_from_document

    doc = {**COMPLETED_DOC, "status": "DELETED", "fail_trace": ["deleted while waiting"]}
    with pytest.raises(ExperimentFailed) as error:
        _ = job_return_from_document(doc, {"job": {}}, "c").return_value
    assert str(error.value) == "experiment 3 is DELETED:\ndeleted while waiting"
