"""seml_hydra.manage and seml_hydra.track on the test database: the dead-job output copy and
``seml start``'s put-back (the pure decisions: tests/unit/test_manage.py)."""

from __future__ import annotations

import contextlib
from pathlib import Path

from seml_hydra.manage.start import start


def test_the_waiting_launcher_copies_only_the_dead_jobs_own_output(test_db, tmp_path):
    """Two local submitit jobs end while their experiments are RUNNING: the one's output tail
    goes into ``fail_trace``; the other's output file was replaced by a symlink to a private
    file, which is not read."""
    import submitit

    from seml_hydra.track.killed import mark_dead_jobs

    secret = tmp_path / "id_ed25519"
    secret.write_text("s3cr3t\n")
    executor = submitit.LocalExecutor(folder=str(tmp_path / "submitit" / "%j"))
    executor.update_parameters(timeout_min=1)
    job_a = executor.submit(print, "line from job a")
    job_b = executor.submit(print, "line from job b")
    job_a.result(), job_b.result()
    stdout_b = Path(job_b.paths.stdout)
    stdout_b.unlink()
    stdout_b.symlink_to(secret)
    test_db["c"].insert_many([{"_id": 1, "status": "RUNNING"}, {"_id": 2, "status": "RUNNING"}])
    marked = mark_dead_jobs(test_db["c"], {"a": (job_a, [1]), "b": (job_b, [2])})
    assert sorted(marked) == [1, 2]
    trace_a = "".join(test_db["c"].find_one({"_id": 1})["fail_trace"])
    trace_b = "".join(test_db["c"].find_one({"_id": 2})["fail_trace"])
    assert "line from job a" in trace_a
    assert "s3cr3t" not in trace_b and "a symbolic link" in trace_b


def test_start_puts_back_only_semls_queued_spelling_not_a_concurrent_pending(test_db):
    """``start`` turns SEML's old ``QUEUED`` into STAGED before submitting; an experiment a
    concurrent ``start`` moved to PENDING between the selection and that update stays PENDING
    (the update used to match any status but STAGED and undid the other's submission)."""
    coll = test_db["queued"]
    coll.insert_one({"_id": 1, "status": "QUEUED", "batch_id": 1, "config": {}})

    class ConcurrentStart:
        """``db[name]`` whose first ``update_many`` is preceded by another process' move."""

        def __init__(self, db):
            self._db = db

        def __getitem__(self, name):
            real = self._db[name]

            class Proxy:
                def __getattr__(self, attr):
                    return getattr(real, attr)

                def update_many(self, *args, **kwargs):
                    real.update_one({"_id": 1}, {"$set": {"status": "PENDING"}})
                    return real.update_many(*args, **kwargs)

            return Proxy()

        def __getattr__(self, attr):
            return getattr(self._db, attr)

    with contextlib.suppress(Exception):  # no payload: this SEML document cannot be submitted
        start(ConcurrentStart(test_db), "queued", {})
    assert coll.find_one({"_id": 1})["status"] == "PENDING"
