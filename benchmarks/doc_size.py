"""The size of an experiment document of a plain sweep, besides its config and result.

    python benchmarks/doc_size.py [--points 4]

Copies ``examples/train.py`` and its ``conf/`` into a fresh git repository under a temporary
directory and launches ``--points`` learning rates twice with ``hydra/launcher=seml`` (this
checkout's interpreter, the database ``seml`` resolves by default: ``seml configure``, or
``SEML_MONGODB_URI``), in two collections of their own that are deleted at the end:

1. held in Slurm (``+hydra.launcher.additional_parameters.hold=true``, ``wait=false``): the
   documents as staged and submitted, before any task ran;
2. run to the end (``wait=true``): the same documents after Sacred's run fields (captured
   output, host, meta, stats, ...) were added.

For each, prints the BSON size of every document without ``config``, ``config_unresolved``
and ``result``, the largest fields, and whether any document holds a snapshot file list
(``seml.source_files``: the list is stored once per launch, as a manifest). Target: a staged
document under ~2 KiB besides its config and result.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import bson

from seml_hydra.store.db.client import get_collection
from seml_hydra.store.db.settings import resolve_db_settings

ROOT = Path(__file__).resolve().parent.parent
#: what a document holds of the point itself, left out of the size
POINT_FIELDS = ("config", "config_unresolved", "result")


def launch(workdir: Path, collection: str, points: int, held: bool) -> None:
    """Launch ``points`` learning rates of the example into ``collection`` (held: not run)."""
    lrs = ",".join(str(0.1 / 2**i) for i in range(points))
    extra = ["hydra.launcher.wait=false", "+hydra.launcher.additional_parameters.hold=true"]
    command = [sys.executable, "train.py", "-m", "hydra/launcher=seml",
               f"hydra.launcher.collection={collection}", *(extra if held else []),
               f"optimizer.lr={lrs}"]  # fmt: skip
    subprocess.run(command, cwd=workdir, check=True, capture_output=True, text=True)


def report(collection: str, label: str) -> list[int]:
    """Print the sizes of ``collection``'s documents; returns them (bytes, without the point)."""
    coll = get_collection(collection, resolve_db_settings())
    sizes = []
    for doc in coll.find().sort("_id", 1):
        rest = {k: v for k, v in doc.items() if k not in POINT_FIELDS}
        sizes.append(len(bson.encode(rest)))
        fields = sorted(((len(bson.encode({k: v})), k) for k, v in rest.items()), reverse=True)
        listed = "source_files" in doc.get("seml", {})
        print(f"{label} #{doc['_id']}: {sizes[-1]} bytes without {', '.join(POINT_FIELDS)}; "
              f"largest {', '.join(f'{k} {n}' for n, k in fields[:5])}; "
              f"seml.source_files {'present' if listed else 'absent'}")  # fmt: skip
    return sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=4)
    args = parser.parse_args()
    seml = str(Path(sys.executable).with_name("seml"))
    with tempfile.TemporaryDirectory(prefix="seml-doc-size-") as tmp:
        work = Path(tmp)
        shutil.copy(ROOT / "examples" / "train.py", work)
        shutil.copytree(ROOT / "examples" / "conf", work / "conf")
        for git in (["init", "-q"], ["add", "-A"], ["-c", "user.name=b", "-c", "user.email=b@b",
                                                     "commit", "-qm", "example"]):  # fmt: skip
            subprocess.run(["git", *git], cwd=work, check=True)
        held, ran = "bench_doc_size_held", "bench_doc_size_ran"
        try:
            launch(work, held, args.points, held=True)
            staged = report(held, "staged")
            launch(work, ran, args.points, held=False)
            done = report(ran, "after the run")
        finally:
            for name in (held, ran):
                subprocess.run([seml, name, "delete", "-y"], capture_output=True)
    print(f"staged: {min(staged)}-{max(staged)} bytes (target < ~2048); "
          f"after the run: {min(done)}-{max(done)} bytes")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
