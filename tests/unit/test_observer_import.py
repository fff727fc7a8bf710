"""The Sacred observer's module is where Sacred gets imported: the package, the job's runner and
``job.observed`` import without it; ``job.observer`` imports it without setuptools'
``pkg_resources``. Each check runs in a fresh interpreter (this one may hold Sacred already)."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def imported_after(code: str) -> list[str]:
    """Which of sacred / pkg_resources a fresh interpreter has imported after ``code``."""
    check = "import sys; print(*[m for m in ('sacred', 'pkg_resources') if m in sys.modules])"
    proc = subprocess.run(
        [sys.executable, "-W", "error::UserWarning", "-c", textwrap.dedent(code) + "\n" + check],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_the_package_and_the_run_code_import_without_sacred():
    assert imported_after("import seml_hydra, seml_hydra.job.runner, seml_hydra.job.observed") == []


def test_the_observer_module_imports_sacred_through_sacred_compat():
    assert imported_after("from seml_hydra.job.observer import DocumentObserver") == ["sacred"]


def test_each_observer_has_its_own_lock_and_starts_from_the_documents_id_alone():
    """Two runs in one process (``seml start --local`` runs experiments one after another; a
    requeued run's observer may still hold its lock) never share a lock; the observer's entry is
    Sacred's overwrite of ``{"_id": ...}`` alone, its metrics go to the collection's own."""
    import pymongo

    from seml_hydra.job.observer import DocumentObserver
    from seml_hydra.store.db.collections import metrics_collection_name

    client: pymongo.MongoClient[dict[str, object]] = pymongo.MongoClient(
        "mongodb://127.0.0.1:1", connect=False
    )
    try:
        db = client["unit"]
        doc = {"_id": 3, "seml": {}}
        first = DocumentObserver(db, "exps", doc, fence={"execution.restart": 0})
        second = DocumentObserver(db, "exps", {**doc, "_id": 4})
        assert first._lock is not second._lock
        assert first.overwrite == {"_id": 3} and second.overwrite == {"_id": 4}
        assert first.frozen is False and first.metrics.name == metrics_collection_name("exps")
        assert first._filter({"_id": 3}, final=False) == {
            "_id": 3,
            "execution.restart": 0,
            "fail_fast.reason": {"$exists": False},
            "status": {"$ne": "FAILED"},
        }
        assert first._filter({"_id": 3}) == {"_id": 3, "execution.restart": 0}
    finally:
        client.close()
