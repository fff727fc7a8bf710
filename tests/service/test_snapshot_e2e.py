"""Jobs run the code of launch time: a flat project, a src-layout project (installed
editable), a module the task imports only when it runs and an app in a subfolder launched from
the project root are edited while their job is held, and the result still shows the launched
code. A plain sweep's documents stay small however many files the snapshot holds."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.mongo import snapshot_files
from support.run import run_app, run_points

APP = """
import hydra
{imports}


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    return {{"value": {value_expr}, "file": {file_expr}, "cwd": __import__("os").getcwd()}}


if __name__ == "__main__":
    main()
"""


def write_flat_project(root: Path) -> Path:
    (root / "conf").mkdir(parents=True)
    (root / "conf" / "config.yaml").write_text("tag: flat\n")
    (root / "helper.py").write_text("VALUE = 1\n")
    app = root / "app.py"
    app.write_text(
        APP.format(imports="import helper", value_expr="helper.VALUE", file_expr="helper.__file__")
    )
    return app


def write_src_project(root: Path) -> Path:
    (root / "src" / "mypkg").mkdir(parents=True)
    (root / "src" / "mypkg" / "__init__.py").write_text("VALUE = 1\n")
    (root / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [build-system]
            requires = ["setuptools"]
            build-backend = "setuptools.build_meta"
            [project]
            name = "seml-hydra-test-mypkg"
            version = "0.0.1"
            [tool.setuptools.packages.find]
            where = ["src"]
            """
        )
    )
    (root / "conf").mkdir()
    (root / "conf" / "config.yaml").write_text("tag: src\n")
    app = root / "app.py"
    app.write_text(
        APP.format(imports="import mypkg", value_expr="mypkg.VALUE", file_expr="mypkg.__file__")
    )
    return app


def launch_held(app: Path, collection, cwd: Path | None = None) -> dict:
    """Launch one point with wait=false and a held array (from ``cwd``, default the app's
    folder); returns its document."""
    proc = run_app(
        app,
        "-m",
        "hydra/launcher=seml",
        "hydra.launcher.wait=false",
        "+hydra.launcher.additional_parameters.hold=true",
        cwd=cwd or app.parent,
        timeout=120,
        check=True,
    )
    assert "Not in the code snapshot:" in proc.stdout, proc.stdout
    (doc,) = list(collection.find())
    assert doc["status"] == "PENDING"
    return doc


def release_and_wait(doc: dict, collection) -> dict:
    subprocess.run(["scontrol", "release", str(doc["slurm"][0]["array_id"])], check=True)
    return wait_done(doc, collection)


def wait_done(doc: dict, collection) -> dict:
    """The document once its experiment has ended."""
    deadline = time.monotonic() + 120
    while True:
        current = collection.find_one({"_id": doc["_id"]})
        if current["status"] in ("COMPLETED", "FAILED", "KILLED"):
            return current
        assert time.monotonic() < deadline, current["status"]
        time.sleep(0.3)


def test_flat_project_job_runs_the_code_of_launch_time(slurm, test_db, tmp_path):
    app = write_flat_project(tmp_path / "flat")
    doc = launch_held(app, test_db["app"])
    assert sorted(rel for rel, _ in snapshot_files(test_db, doc)) == [
        "app.py",
        "conf/config.yaml",
        "helper.py",
    ]
    (app.parent / "helper.py").write_text("VALUE = 2\n")  # edited while the job waits
    done = release_and_wait(doc, test_db["app"])
    assert done["status"] == "COMPLETED", done.get("fail_trace")
    assert done["result"]["value"] == 1
    assert "/src-semltest_" in done["result"]["file"]  # in the private runtime directory
    # kept a while for the next tasks of this code on the node, its registry saying when the
    # job left it
    registry = Path(done["result"]["file"]).parent.name.rsplit("-", 1)[0] + ".json"
    assert Path(done["result"]["file"]).exists()
    assert json.loads((Path(done["result"]["file"]).parent.parent / registry).read_text())["left"]
    assert done["result"]["cwd"] == str(app.parent)  # the launch directory, as Hydra has it


def test_a_document_of_an_earlier_version_runs_from_the_list_it_carries(slurm, test_db, tmp_path):
    """Documents staged before manifests carry the file list themselves
    (``seml.source_files``): the job runs those from their snapshot as before."""
    app = write_flat_project(tmp_path / "older")
    doc = launch_held(app, test_db["app"])
    test_db["app"].update_one(
        {"_id": doc["_id"]},
        {
            "$set": {"seml.source_files": snapshot_files(test_db, doc)},
            "$unset": {"seml.source_manifest": ""},
        },
    )
    test_db["fs.files"].delete_many({"metadata.type": "source_manifest"})  # only the list left
    (app.parent / "helper.py").write_text("VALUE = 2\n")
    done = release_and_wait(doc, test_db["app"])
    assert done["status"] == "COMPLETED", done.get("fail_trace")
    assert done["result"]["value"] == 1
    assert "/src-semltest_" in done["result"]["file"]


LAZY_APP = """
import hydra


@hydra.main(version_base="1.3", config_path=None)
def main(cfg):
    import lazy  # only when the task runs: not loaded at launch

    return {"value": lazy.VALUE, "file": lazy.__file__}


if __name__ == "__main__":
    main()
"""


def git_project(root: Path, app_rel: str) -> Path:
    """A git work tree at ``root`` with the app at ``app_rel`` (committed) and, beside it, the
    module ``lazy.py`` it imports inside its task (untracked, not ignored); returns the app."""
    app = root / app_rel
    app.parent.mkdir(parents=True)
    app.write_text(LAZY_APP)
    (app.parent / "lazy.py").write_text("VALUE = 1\n")
    (root / ".gitignore").write_text("multirun/\n")
    for args in (["init", "-q"], ["add", app_rel, ".gitignore"]):
        subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)
    return app


def test_a_module_the_task_imports_when_it_runs_is_the_launch_time_version(
    slurm, test_db, tmp_path
):
    app = git_project(tmp_path / "lazyproj", "app.py")
    doc = launch_held(app, test_db["app"])
    assert "lazy.py" in [rel for rel, _ in snapshot_files(test_db, doc)]
    (app.parent / "lazy.py").write_text("VALUE = 2\n")  # edited while the job waits
    done = release_and_wait(doc, test_db["app"])
    assert done["status"] == "COMPLETED", done.get("fail_trace")
    assert done["result"]["value"] == 1
    assert "/src-semltest_" in done["result"]["file"]


def test_an_app_in_a_subfolder_launched_from_the_root_imports_from_the_snapshot(
    slurm, test_db, tmp_path
):
    """``python sub/app.py -m`` from the project root: the module beside the app that the task
    imports is found (Hydra's basic launcher finds it in the script's folder), as it was."""
    root = tmp_path / "subproj"
    app = git_project(root, "sub/app.py")
    doc = launch_held(app, test_db["app"], cwd=root)
    (app.parent / "lazy.py").write_text("VALUE = 2\n")
    done = release_and_wait(doc, test_db["app"])
    assert done["status"] == "COMPLETED", done.get("fail_trace")
    assert done["result"]["value"] == 1
    assert done["result"]["file"].endswith("/sub/lazy.py")
    assert "/src-semltest_" in done["result"]["file"]


@pytest.fixture
def short_dir():
    """A launch folder with a path as short as a user's project (``/tmp/pXXXXXXXX``): the
    documents repeat it in a few paths, which pytest's ~60-character ``tmp_path`` would
    lengthen by ~400 bytes."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="p", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_plain_sweep_point_stays_under_2_kib_besides_its_config_and_result(
    slurm, test_db, short_dir
):
    """Every document of a launch names its snapshot's manifest instead of carrying the file
    list (here this repository's ~250 Python files): a plain sweep point as staged and
    submitted (what ``delete``, ``cancel`` and ``status`` rewrite) is under 2 KiB besides its
    config, a few bytes more than without a snapshot; once run, Sacred's
    ``experiment.sources`` lists only the files of the modules loaded when the run started, as
    Sacred does, not the snapshot."""
    import bson

    def size_besides_config_and_result(doc):
        return len(bson.encode({k: v for k, v in doc.items() if k not in ("config", "result")}))

    def launch(collection, *extra):
        held = ("hydra.launcher.wait=false", "+hydra.launcher.additional_parameters.hold=true")
        proc = run_points(
            2, f"hydra.launcher.collection={collection}", *held, *extra, cwd=short_dir
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return list(test_db[collection].find().sort("_id", 1))

    pending = launch("small")
    bare = launch("bare", "hydra.launcher.snapshot=false")
    # only measured: its held array would wait in the testbed's queue for ever
    subprocess.run(["scancel", str(bare[0]["slurm"][0]["array_id"])], check=True)
    assert [d["status"] for d in pending] == ["PENDING", "PENDING"]
    assert len(snapshot_files(test_db, pending[0])) > 100  # the whole project
    for doc, without in zip(pending, bare):
        assert "source_files" not in doc["seml"]
        size = size_besides_config_and_result(doc)
        print(f"{doc['_id']}: {size} bytes as staged")
        # 2 KiB, and the ~110 bytes the test's own overrides holding the array add (to
        # seml.command and the sbatch options)
        assert size < 2048 + 128, doc
        # the same launch without a snapshot differs in the manifest's id and main_file alone
        grown = size - size_besides_config_and_result(without)
        assert grown <= len(bson.encode({"source_manifest": doc["seml"]["source_manifest"]})) + 40
    done = [release_and_wait(pending[0], test_db["small"]), wait_done(pending[1], test_db["small"])]
    for doc in done:
        assert doc["status"] == "COMPLETED", doc.get("fail_trace")
        assert "examples/fail.py" in [rel for rel, _ in doc["experiment"]["sources"]]
        assert len(doc["experiment"]["sources"]) < 10, doc["experiment"]["sources"]
        print(f"{doc['_id']}: {size_besides_config_and_result(doc)} bytes once run")


@pytest.fixture
def editable_src_project(tmp_path):
    app = write_src_project(tmp_path / "srcproj")
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "install", "--no-deps", "--no-build-isolation", "-e", str(app.parent)],
        check=True,
        capture_output=True,
    )
    yield app
    subprocess.run([*pip, "uninstall", "-y", "seml-hydra-test-mypkg"], capture_output=True)


def test_src_layout_project_installed_editable_runs_from_the_snapshot(
    slurm, test_db, editable_src_project
):
    app = editable_src_project
    doc = launch_held(app, test_db["app"])
    assert "src/mypkg/__init__.py" in [rel for rel, _ in snapshot_files(test_db, doc)]
    (app.parent / "src" / "mypkg" / "__init__.py").write_text("VALUE = 2\n")
    done = release_and_wait(doc, test_db["app"])
    assert done["status"] == "COMPLETED", done.get("fail_trace")
    assert done["result"]["value"] == 1
    assert "/src-semltest_" in done["result"]["file"]
    assert done["result"]["file"].endswith("src/mypkg/__init__.py")


def test_a_module_another_user_plants_for_the_job_is_not_imported(
    slurm, test_db, tmp_path, other_user
):
    """Job ids are public: while the job waits, another user creates the snapshot directory
    the job used to take (``/tmp/seml_hydra_src_<cluster>_<array>_<task>``, with a counter
    saying it is in use) holding its own ``helper.py``. The job imports the launched one from
    its private directory."""
    app = write_flat_project(tmp_path / "flat")
    doc = launch_held(app, test_db["app"])
    key = f"semltest_{doc['slurm'][0]['array_id']}_0"
    planted = Path("/tmp") / f"seml_hydra_src_{key}"
    counter = Path("/tmp") / f".seml_hydra_src_{key}.users"
    try:
        other_user.run(
            "sh",
            "-c",
            f"mkdir -m 755 {planted} && echo 'VALUE = 666' > {planted}/helper.py"
            f" && echo 1 > {counter}",
            check=True,
        )
        done = release_and_wait(doc, test_db["app"])
        assert done["status"] == "COMPLETED", done.get("fail_trace")
        assert done["result"]["value"] == 1
        assert not done["result"]["file"].startswith(str(planted))
    finally:
        other_user.run("rm", "-rf", str(planted), str(counter))
