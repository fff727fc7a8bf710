"""Which markers a test gets from the fixtures it uses, and the order tests start in (the
collection hook of ``tests/conftest.py`` applies them)."""

from __future__ import annotations

from pathlib import Path

#: marker -> the fixtures that bring it: a test that uses one of them (directly, through another
#: fixture or autouse) gets the marker at collection, so ``-m "not slurm"`` selects what it says
SERVICE_FIXTURES = {
    "mongo": {
        "mongo_client",
        "mongo_url",
        "mongo_user",
        "private_mongod",
        "replica_set",
        "auth_mongod",
    },
    "slurm": {"slurm", "fault_slurm"},
    "serial": {"fault_slurm"},
    "sshd": {"sshd"},
    "other_user": {"other_user"},
}
#: markers that mean "needs a service or the machine's state": never in ``tests/unit``
SERVICE_MARKERS = {*SERVICE_FIXTURES, "service", "serial", "outage", "discovery"}
UNIT_DIR = Path(__file__).resolve().parents[1] / "unit"
SERVICE_DIR = Path(__file__).resolve().parents[1] / "service"


def start_order(item) -> int:
    """Where a collected test (a pytest item) starts: 0 for the fault cluster's tests, 1 for the
    other Slurm tests, 2 for the other service tests, 3 for the unit tier."""
    for rank, marker in enumerate(("serial", "slurm", "service")):
        if item.get_closest_marker(marker) is not None:
            return rank
    return 3
