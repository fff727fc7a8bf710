"""The app's script on the node (``seml_hydra.job.main_module``): a
single-file app whose configs name ``__main__`` targets runs on both launchers, a failing task's
trace names the app's file, line and source line, and an app in a subfolder of the project root
imports its sibling modules from the code snapshot."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.mongo import snapshot_files, statuses
from support.paths import ROOT
from support.run import run_python
from support.wait import wait_until

ZEN_APP = ROOT / "tests" / "apps" / "zen_app.py"


def launch(app: Path | str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run ``python <app> -m <args>`` in ``cwd``; fails the test when it does not exit 0."""
    return run_python(str(app), "-m", *args, cwd=cwd, check=True)


@pytest.mark.parametrize("launcher", ["seml", "seml_local"])
def test_a_hydra_zen_app_with_main_targets_runs_on_the_node(slurm, test_db, tmp_path, launcher):
    """``builds(make_model)`` names ``__main__.make_model``; on the node that is the snapshot's
    copy of the script (module ``__main__`` without its main guard), not submitit's."""
    launch(
        ZEN_APP,
        f"hydra/launcher={launcher}",
        "hydra.launcher.collection=zen",
        f"hydra.sweep.dir={tmp_path / 'out'}",
        "model.width=2,3",
        cwd=tmp_path,
    )
    docs = sorted(test_db["zen"].find(), key=lambda d: d["_id"])
    assert [d["status"] for d in docs] == ["COMPLETED", "COMPLETED"], [
        d.get("fail_trace") for d in docs
    ]
    assert [d["result"] for d in docs] == [
        {"width": 2, "built_by": "__main__"},
        {"width": 3, "built_by": "__main__"},
    ]
    assert docs[0]["seml"]["main_file"] == "tests/apps/zen_app.py"


SUB_APP = """
import hydra
from hydra.utils import instantiate

import models


class Foo:
    def __init__(self, x):
        self.x = x


@hydra.main(version_base="1.3", config_path="conf", config_name="config")
def main(cfg):
    if cfg.get("fail"):
        raise ValueError(f"the task fails on purpose ({cfg.foo.x})")
    foo = instantiate(cfg.foo)
    return {"value": models.VALUE, "file": models.__file__, "foo": [type(foo).__module__, foo.x]}


if __name__ == "__main__":
    main()
"""


def write_sub_project(root: Path) -> Path:
    """A git project ``root`` whose app is ``root/sub/app.py``, importing ``sub/models.py``
    and instantiating ``_target_: __main__.Foo`` (plain Hydra)."""
    sub = root / "sub"
    (sub / "conf").mkdir(parents=True)
    (sub / "conf" / "config.yaml").write_text("foo:\n  _target_: __main__.Foo\n  x: 7\n")
    (sub / "models.py").write_text("VALUE = 1\n")
    (sub / "app.py").write_text(textwrap.dedent(SUB_APP))
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    return sub / "app.py"


def test_an_app_in_a_subfolder_imports_its_sibling_from_the_snapshot(slurm, test_db, tmp_path):
    """Launched from another directory (``python proj/sub/app.py``), the held job imports the
    snapshot's ``sub/models.py``, not the file changed after the launch."""
    write_sub_project(tmp_path / "proj")
    launch(
        "proj/sub/app.py",
        "hydra/launcher=seml",
        "hydra.launcher.collection=sub",
        "hydra.launcher.wait=false",
        "+hydra.launcher.additional_parameters.hold=true",
        cwd=tmp_path,
    )
    (doc,) = test_db["sub"].find()
    assert "sub/models.py" in [rel for rel, _ in snapshot_files(test_db, doc)]
    (tmp_path / "proj" / "sub" / "models.py").write_text("VALUE = 2\n")  # after the launch
    subprocess.run(["scontrol", "release", str(doc["slurm"][0]["array_id"])], check=True)
    wait_until(
        "the experiment finished",
        lambda: statuses(test_db["sub"])[1] in ("COMPLETED", "FAILED", "KILLED"),
        timeout=180,
    )
    done = test_db["sub"].find_one()
    assert done["status"] == "COMPLETED", done.get("fail_trace")
    assert done["result"]["value"] == 1
    assert "/src-semltest_" in done["result"]["file"]
    assert done["result"]["file"].endswith("sub/models.py")
    assert done["result"]["foo"] == ["__main__", 7]
    assert done["seml"]["main_file"] == "sub/app.py"


@pytest.mark.parametrize("launcher", ["seml", "seml_local"])
def test_a_failing_tasks_trace_names_the_apps_file_line_and_source(
    slurm, test_db, tmp_path, launcher
):
    """``fail_trace`` (and ``print-fail-trace``) show the script's path at launch, the line
    and its source, as Hydra's basic launcher does; not ``File "<dynamic-code>"``. (Launched
    from the app's directory: its ``models`` import works without the snapshot too.)"""
    app = write_sub_project(tmp_path / "proj")
    proc = subprocess.run(
        [sys.executable, "app.py", "-m", f"hydra/launcher={launcher}"]
        + ["hydra.launcher.collection=fail", f"hydra.sweep.dir={tmp_path / 'out'}", "+fail=true"],
        cwd=app.parent,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert proc.returncode != 0
    (doc,) = test_db["fail"].find()
    assert doc["status"] == "FAILED"
    trace = "".join(doc["fail_trace"])
    source = 'raise ValueError(f"the task fails on purpose ({cfg.foo.x})")'
    (line,) = [i for i, text in enumerate(app.read_text().splitlines(), 1) if source in text]
    assert f'File "{app}", line {line}, in main\n    {source}\n' in trace, trace
    assert "<dynamic-code>" not in trace
    cli = subprocess.run(
        [str(Path(sys.executable).with_name("seml")), "fail", "print-fail-trace", "-id", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert source in cli.stdout and f"line {line}, in main" in cli.stdout, cli.stdout
