"""Pure tests of seml_hydra.slurm (parse, records, and the client with a fake subprocess):
parsers on captured Slurm 22.05 output, no Slurm needed.

The fixtures in tests/fixtures/slurm are described in its README.md.
"""

from __future__ import annotations

import datetime as dt
import subprocess
import sys

import pytest
from support.paths import ROOT

from seml_hydra.slurm import client as slurm
from seml_hydra.slurm import records
from seml_hydra.slurm.client import SlurmError
from seml_hydra.slurm.parse import (
    ALIVE_STATES,
    COMPACT_STATE_CODES,
    TERMINAL_STATES,
    JobId,
    is_alive,
    normalize_state,
    parse_array_task_spec,
    parse_duration_s,
    parse_job_id,
    parse_scontrol_show_config,
    parse_scontrol_show_job,
)
from seml_hydra.slurm.records import (
    FIELD_SEP,
    RECORD_SEP,
    SQUEUE_FIELDS,
    parse_sacct,
    parse_squeue,
)

FIXTURES = ROOT / "tests" / "fixtures" / "slurm"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def by_id(rows):
    out = {}
    for r in rows:
        assert r.job_id not in out, f"duplicate row {r.job_id}"
        out[r.job_id] = r
    return out


def fields_by_id(rows: dict, *names: str) -> dict:
    """``{job id: (the row's values of names)}`` of ``rows`` (``{job id: row}``, :func:`by_id`)."""
    return {jid: tuple(getattr(r, name) for name in names) for jid, r in rows.items()}


# --------------------------------------------------------------------------------------------
# array task specs and job ids
# --------------------------------------------------------------------------------------------

LONG_SPEC = "0,4,10,12,16,18,24,28,30,36,40,42,48,52,54,58,60,66,70,72,76,78,82,84,90,94,96,98"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("4", [4]),
        ("0", [0]),
        ("[4]", [4]),
        ("[4%1]", [4]),
        ("[1-3,7]", [1, 2, 3, 7]),
        ("1-3,7", [1, 2, 3, 7]),
        ("[0-9%2]", list(range(10))),
        ("0-9%2", list(range(10))),
        ("[1-3:2]", [1, 3]),
        ("[1-9:2]", [1, 3, 5, 7, 9]),
        ("0-98:2", list(range(0, 99, 2))),
        ("[0-1,3,5]", [0, 1, 3, 5]),
        ("[7,1-3]", [1, 2, 3, 7]),  # sorted
        ("[1-3,2-4]", [1, 2, 3, 4]),  # unique
        ("[5-5]", [5]),
        (" [2-4] ", [2, 3, 4]),
        ("[0-999%10]", list(range(1000))),
        (LONG_SPEC, [int(x) for x in LONG_SPEC.split(",")]),
    ],
)
def test_parse_array_task_spec(spec, expected):
    assert parse_array_task_spec(spec) == expected


@pytest.mark.parametrize(
    "spec",
    [
        "",
        "[]",
        "[4",
        "4]",
        "[[4]]",
        "[3-1]",  # reversed
        "[1-3:0]",  # step 0
        "[1-3:]",
        "[1-]",
        "[-1]",
        "[1,,2]",
        "[1,2,]",
        "[4%]",
        "[4%x]",
        "[%2]",
        "[4%1%2]",
        "abc",
        "1.5",
        "[0,4,10,12,16,18,24,28,30,36,40,42,48,52,54,58,60,66,70,72,76...]",  # truncated
        "0,4,10,12,16,18,24,28,30,36,40,42,48,52,54,58,60,66,70,72,76...",
        "[0-99999999999]",  # more ids than any MaxArraySize allows
        "\u0664",  # Arabic-Indic digit four: not ASCII
        "N/A",
    ],
)
def test_parse_array_task_spec_malformed_gives_none(spec):
    assert parse_array_task_spec(spec) is None


def test_parse_array_task_spec_never_raises_on_non_strings():
    assert parse_array_task_spec(None) is None  # type: ignore[arg-type]
    assert parse_array_task_spec(4) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("123", JobId(123, None, None, None)),
        (" 123 ", JobId(123, None, None, None)),
        ("123_4", JobId(123, 123, (4,), None)),
        ("123_[4%1]", JobId(123, 123, (4,), 1)),
        ("123_[1-3,7]", JobId(123, 123, (1, 2, 3, 7), None)),
        ("2_[2-9%1]", JobId(2, 2, tuple(range(2, 10)), 1)),
        ("7_[1,3,5,7,9]", JobId(7, 7, (1, 3, 5, 7, 9), None)),
        ("13_[3]", JobId(13, 13, (3,), None)),
        ("30_[0-9:3%2]", JobId(30, 30, (0, 3, 6, 9), 2)),
        ("123+0", JobId(123, None, None, None, het_offset=0)),
        ("10+1", JobId(10, None, None, None, het_offset=1)),
    ],
)
def test_parse_job_id(text, expected):
    assert parse_job_id(text) == expected


def test_job_id_is_array():
    assert parse_job_id("5_[1-3]").is_array
    assert not parse_job_id("5").is_array
    assert not parse_job_id("5+1").is_array


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "abc",
        "123_",
        "123_[",
        "123_[4%1",
        "_4",
        "123_abc",
        "123+",
        "123+x",
        "123.batch",  # a step, not a job
        "123_4.0",
        "-j",
        "--all",
        "123 456",
        "123,456",
        "14_[0,4,10,12,16,18,24,28,30,36",  # squeue's truncated %i
        "123_4_5",
    ],
)
def test_parse_job_id_garbage_raises_with_text(text):
    with pytest.raises(ValueError) as info:
        parse_job_id(text)
    assert repr(text) in str(info.value)


def test_parse_job_id_non_string_raises_value_error():
    with pytest.raises(ValueError):
        parse_job_id(123)  # type: ignore[arg-type]


# --------------------------------------------------------------------------------------------
# durations
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("0:00", 0.0),
        ("0:07", 7.0),
        ("1:39", 99.0),
        ("59:59", 3599.0),
        ("1:02:03", 3723.0),
        ("00:01:45", 105.0),
        ("12:34:56", 45296.0),
        ("1-00:00:00", 86400.0),
        ("2-03:04:05", 2 * 86400 + 3 * 3600 + 4 * 60 + 5.0),
        ("1-00:00:05", 86405.0),
        ("00:01.234", 1.234),
        (" 1:00 ", 60.0),
    ],
)
def test_parse_duration_s(text, seconds):
    assert parse_duration_s(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "INVALID",
        "UNLIMITED",
        "NOT_SET",
        "N/A",
        "None",
        "Unknown",
        "abc",
        "5",
        "1-",
        "1-5:00",
        "1:2:3:4",
    ],
)
def test_parse_duration_s_none(text):
    assert parse_duration_s(text) is None


# --------------------------------------------------------------------------------------------
# states
# --------------------------------------------------------------------------------------------

#: from squeue 22.05's own error message for `squeue -t BOGUS`
SQUEUE_VALID_STATES = (
    "PENDING,RUNNING,SUSPENDED,COMPLETED,CANCELLED,FAILED,TIMEOUT,NODE_FAIL,PREEMPTED,BOOT_FAIL,"
    "DEADLINE,OUT_OF_MEMORY,COMPLETING,CONFIGURING,RESIZING,RESV_DEL_HOLD,REQUEUED,REQUEUE_FED,"
    "REQUEUE_HOLD,REVOKED,SIGNALING,SPECIAL_EXIT,STAGE_OUT,STOPPED"
).split(",")


def test_state_sets_partition_every_squeue_state():
    assert not (ALIVE_STATES & TERMINAL_STATES)
    assert set(SQUEUE_VALID_STATES) <= ALIVE_STATES | TERMINAL_STATES
    assert TERMINAL_STATES == {
        "COMPLETED",
        "FAILED",
        "CANCELLED",
        "TIMEOUT",
        "NODE_FAIL",
        "PREEMPTED",
        "BOOT_FAIL",
        "DEADLINE",
        "OUT_OF_MEMORY",
        "REVOKED",
    }
    assert set(COMPACT_STATE_CODES.values()) <= ALIVE_STATES | TERMINAL_STATES


@pytest.mark.parametrize("state", sorted(ALIVE_STATES))
def test_alive_states_are_alive(state):
    assert is_alive(state)
    assert is_alive(state.lower())


@pytest.mark.parametrize("state", sorted(TERMINAL_STATES))
def test_terminal_states_are_dead(state):
    assert not is_alive(state)
    assert not is_alive(f" {state.lower()} ")


@pytest.mark.parametrize(
    ("state", "normal", "alive"),
    [
        ("CANCELLED by 0", "CANCELLED", False),
        ("CANCELLED by 1000", "CANCELLED", False),
        ("CANCELLED+", "CANCELLED", False),  # sacct's truncation mark
        ("OUT_OF_ME+", "OUT_OF_MEMORY", False),  # truncated, unique prefix
        ("REQUEUE+", "REQUEUE", True),  # truncated, ambiguous (REQUEUED, REQUEUE_FED, ...)
        ("PD", "PENDING", True),
        ("R", "RUNNING", True),
        ("CG", "COMPLETING", True),
        ("CF", "CONFIGURING", True),
        ("S", "SUSPENDED", True),
        ("CD", "COMPLETED", False),
        ("CA", "CANCELLED", False),
        ("F", "FAILED", False),
        ("TO", "TIMEOUT", False),
        ("OOM", "OUT_OF_MEMORY", False),
        ("NF", "NODE_FAIL", False),
        ("SOME_FUTURE_STATE", "SOME_FUTURE_STATE", True),  # unknown -> alive
        ("", "", True),
        ("   ", "", True),
    ],
)
def test_normalize_state_and_is_alive(state, normal, alive):
    assert normalize_state(state) == normal
    assert is_alive(state) is alive


# --------------------------------------------------------------------------------------------
# squeue
# --------------------------------------------------------------------------------------------


def test_squeue_format_uses_unit_and_record_separators():
    fmt = records.squeue_format()
    assert fmt == FIELD_SEP.join("%" + c for c in SQUEUE_FIELDS) + RECORD_SEP
    assert "|" not in fmt
    assert records.squeue_format(["%i", "T"]) == f"%i{FIELD_SEP}%T{RECORD_SEP}"
    with pytest.raises(ValueError):
        records.squeue_format(["%.18i"])


# job_id -> (job_id_raw, array_job_id, task_ids, throttle, state, reason, nodelist, elapsed_s,
#            user, name, comment, alive)
SQUEUE_RANGES = {
    "2_0": (8, 2, [0], None, "CANCELLED", None, "node1", 44.0, "root", "held_arr", "my_collection", False),
    "1": (1, None, None, None, "COMPLETED", None, "node[1-2]", 0.0, "root", "hostname", None, False),
    "4": (4, None, None, None, "FAILED", "NonZeroExitCode", "node1", 0.0, "root", "failing", None, False),
    "2_[2-9%1]": (2, 2, list(range(2, 10)), 1, "PENDING", "JobArrayTaskLimit", None, 0.0, "root", "held_arr", "my_collection", True),
    "10+0": (10, None, None, None, "PENDING", "Resources", None, 0.0, "root", "het", None, True),
    "10+1": (11, None, None, None, "PENDING", "Resources", None, 0.0, "root", "het", None, True),
    "13_[3]": (13, 13, [3], None, "PENDING", "Priority", None, 0.0, "root", "probe.sh", None, True),
    f"14_[{LONG_SPEC}]": (14, 14, [int(x) for x in LONG_SPEC.split(",")], None, "PENDING", "JobHeldUser", None, 0.0, "root", "long", None, True),
    "9": (9, None, None, None, "PENDING", "JobHeldUser", None, 0.0, "root", "nl\nname", "line1\nline2", True),
    "7_[1,3,5,7,9]": (7, 7, [1, 3, 5, 7, 9], None, "PENDING", "JobHeldUser", None, 0.0, "root", "stepped", None, True),
    "6_[0-1,3,5]": (6, 6, [0, 1, 3, 5], None, "PENDING", "JobHeldUser", None, 0.0, "root", "cancel_some", None, True),
    "5_[1-3,7]": (5, 5, [1, 2, 3, 7], None, "PENDING", "JobHeldUser", None, 0.0, "root", "name with|pipe", "a|b=c d", True),
    "3": (3, None, None, None, "RUNNING", None, "node[1-2]", 99.0, "root", "two_node", "my collection with spaces", True),
    "2_1": (12, 2, [1], None, "RUNNING", None, "node1", 52.0, "root", "held_arr", "my_collection", True),
}  # fmt: skip


def _row_tuple(r):
    return (
        r.job_id_raw,
        r.array_job_id,
        r.task_ids,
        r.throttle,
        r.state,
        r.reason,
        r.nodelist,
        r.elapsed_s,
        r.user,
        r.name,
        r.comment,
        r.alive,
    )


def test_parse_squeue_ranges_fixture():
    rows = parse_squeue(fixture("squeue_ranges.txt"))
    assert [r.job_id for r in rows][:3] == ["2_0", "1", "4"]  # output order kept
    got = {jid: _row_tuple(r) for jid, r in by_id(rows).items()}
    assert got == SQUEUE_RANGES


def test_parse_squeue_expanded_fixture_has_one_row_per_task():
    rows = by_id(parse_squeue(fixture("squeue_expanded.txt")))
    held = sorted(r.task_ids[0] for r in rows.values() if r.array_job_id == 2)
    assert held == list(range(10))
    for t in range(2, 10):
        r = rows[f"2_{t}"]
        assert (r.job_id_raw, r.array_task, r.state, r.reason) == (
            2,
            str(t),
            "PENDING",
            "JobArrayTaskLimit",
        )
        assert r.throttle is None  # squeue --array does not print the throttle
    long_tasks = sorted(r.task_ids[0] for r in rows.values() if r.array_job_id == 14)
    assert long_tasks == [int(x) for x in LONG_SPEC.split(",")]
    assert sorted(j for j in rows if j.startswith("6_")) == ["6_0", "6_1", "6_3", "6_5"]
    assert rows["9"].name == "nl\nname" and rows["9"].comment == "line1\nline2"
    assert rows["5_7"].name == "name with|pipe"


def test_parse_squeue_after_cancel_fixture_everything_is_dead():
    rows = by_id(parse_squeue(fixture("squeue_after_cancel.txt")))
    assert len(rows) == 14
    assert not any(r.alive for r in rows.values())
    assert rows["2_[2-9%1]"].state == "CANCELLED"
    assert rows["2_[2-9%1]"].task_ids == list(range(2, 10))
    assert rows["13_3"].state == "COMPLETED"


# job_id -> (state, alive, reason, nodelist, elapsed_s, user, comment)
SQUEUE_HANDWRITTEN = {
    "20": ("CONFIGURING", True, None, "node[1-2]", 3.0, "alice", "coll_a"),
    "21_3": ("COMPLETING", True, None, "node2", 3723.0, "root", "my_collection"),
    "22": ("REQUEUED", True, "BeginTime", None, 0.0, "root", "my_collection"),
    "23": ("REQUEUE_HOLD", True, "JobHeldAdmin", None, 0.0, "root", None),
    "24": ("SUSPENDED", True, None, "node[1-2]", 183845.0, "bob", None),
    "25": ("STOPPED", True, None, "node[1-2]", 600.0, "root", "my collection with spaces"),
    "26": ("SIGNALING", True, None, "node[1-2]", 59.0, "root", "my collection with spaces"),
    "27": ("RESIZING", True, None, "node[1-2]", 99.0, "root", "my collection with spaces"),
    "28": ("SPECIAL_EXIT", True, "JobHeldUser", None, 0.0, "root", None),
    "29": ("STAGE_OUT", True, None, "node[1-2]", 99.0, "root", "my collection with spaces"),
    "30_[4%1]": ("RESV_DEL_HOLD", True, "ResvDeleted", None, 0.0, "root", None),
    "31_[0-999%10]": ("PENDING", True, "ReqNodeNotAvail,_UnavailableNodes:node[3-4]", None, 0.0, "alice", "alice_coll"),
    "32": ("REQUEUE_FED", True, None, None, 0.0, "root", None),
    "33": ("PENDING", True, "launch failed requeued held", None, None, "root", None),
    "34": ("POWER_UP_NODE", True, "Resources", "node2", 0.0, "root", None),
    "35": ("SOME_FUTURE_STATE", True, "Dependency", None, 0.0, "root", "  spaced comment "),
    "40": ("TIMEOUT", False, "TimeLimit", "node1", 86400.0, "bob", None),
    "41_2": ("OUT_OF_MEMORY", False, "OutOfMemory", "node1", 0.0, "root", None),
    "42": ("NODE_FAIL", False, "NodeDown", "node[1-2]", 0.0, "root", None),
    "43": ("PREEMPTED", False, None, "node1", 0.0, "root", None),
    "44": ("BOOT_FAIL", False, "BadConstraints", None, 0.0, "root", None),
    "45": ("DEADLINE", False, "DeadLine", None, 0.0, "root", None),
    "46": ("REVOKED", False, None, None, 0.0, "root", None),
    "47": ("COMPLETED", False, None, "node[1-2]", 1.0, "root", "my collection with spaces"),
}  # fmt: skip


def test_parse_squeue_handwritten_states():
    rows = by_id(parse_squeue(fixture("squeue_handwritten.txt")))
    got = fields_by_id(rows, "state", "alive", "reason", "nodelist", "elapsed_s", "user", "comment")
    assert got == SQUEUE_HANDWRITTEN
    # with the real fixtures, every state squeue knows is covered
    real = parse_squeue(fixture("squeue_ranges.txt")) + parse_squeue(
        fixture("squeue_after_cancel.txt")
    )
    assert set(SQUEUE_VALID_STATES) <= {r.state for r in [*rows.values(), *real]}
    assert rows["30_[4%1]"].task_ids == [4] and rows["30_[4%1]"].throttle == 1
    assert rows["31_[0-999%10]"].task_ids == list(range(1000))
    assert rows["31_[0-999%10]"].throttle == 10
    assert rows["41_2"].job_id_raw == 141 and rows["41_2"].array_job_id == 41
    others = sorted({r.user for r in rows.values()} - {"root"})
    assert others == ["alice", "bob"]


def test_parse_squeue_empty_output():
    assert parse_squeue("") == []
    assert parse_squeue("\n") == []


def _rec(*fields: str) -> str:
    return FIELD_SEP.join(fields) + RECORD_SEP + "\n"


GOOD = ("5", "5", "5", "N/A", "RUNNING", "None", "node1", "0:01", "u", "n", "(null)")


def test_parse_squeue_surplus_separators_stay_in_comment():
    text = _rec(*GOOD[:-1], "a" + FIELD_SEP + "b")
    (row,) = parse_squeue(text)
    assert row.comment == "a" + FIELD_SEP + "b"


@pytest.mark.parametrize(
    "text",
    [
        _rec(*GOOD[:-1]),  # a field short
        _rec("5", "x", *GOOD[2:]),  # %A not a number
        _rec(*GOOD[:2], "y", "3", *GOOD[4:]),  # %F not a number for an array task
        "5|5|5|N/A|RUNNING" + RECORD_SEP,
    ],
)
def test_parse_squeue_bad_records_raise(text):
    with pytest.raises(ValueError):
        parse_squeue(text)


def test_parse_squeue_fields_must_include_ours_and_extras_are_kept():
    with pytest.raises(ValueError, match="lack"):
        parse_squeue("", fields=("i", "T"))
    fields = (*SQUEUE_FIELDS, "P")
    (row,) = parse_squeue(_rec(*GOOD, "debug"), fields=fields)
    assert row.extra == {"P": "debug"}
    assert row.comment is None


def test_parse_squeue_line_mode_joins_records_split_by_newlines():
    # (a newline in the last field cannot be told from a record end in line mode: that is
    # why squeue_jobs asks for record separators)
    text = "1|1|1|N/A|PENDING|None||0:00|root|nl\nname|c\n2_[0-3%2]|2|2|0-3%2|PENDING|JobArrayTaskLimit||0:00|root|x|\n"
    rows = parse_squeue(text, field_sep="|", record_sep=None)
    assert [r.job_id for r in rows] == ["1", "2_[0-3%2]"]
    assert rows[0].name == "nl\nname" and rows[0].comment == "c"
    assert rows[1].task_ids == [0, 1, 2, 3] and rows[1].comment is None
    with pytest.raises(ValueError, match="incomplete"):
        parse_squeue("1|1|1|N/A\n", field_sep="|", record_sep=None)


# --------------------------------------------------------------------------------------------
# sacct
# --------------------------------------------------------------------------------------------


#: sacct.txt and sacct_by_id.txt were captured (while jobs ran) with this earlier field order
EARLIER_SACCT_FIELDS = (
    "JobID", "JobIDRaw", "State", "ExitCode", "NodeList", "Start", "End", "Elapsed", "Reason",
    "User", "JobName", "Comment",
)  # fmt: skip


def test_sacct_format():
    assert records.sacct_format() == ",".join(records.SACCT_FIELDS)
    assert records.SACCT_FIELDS[-1] == "JobIDRaw"  # never free text last
    assert set(records.SACCT_FIELDS) == set(EARLIER_SACCT_FIELDS)


# job_id -> (job_id_raw, state, state_raw, exit_code, exit_signal, nodelist, start, end,
#            elapsed_s, reason, user, name, alive)
T = dt.datetime
SACCT_AFTER_CANCEL = {
    "3": ("3", "CANCELLED", "CANCELLED by 0", 0, 0, "node[1-2]", T(2026, 11, 29, 23, 37, 50), T(2026, 11, 29, 23, 39, 35), 105.0, None, "root", "two_node", False),
    "4": ("4", "FAILED", "FAILED", 3, 0, "node1", T(2026, 11, 29, 23, 37, 50), T(2026, 11, 29, 23, 37, 50), 0.0, None, "root", "failing", False),
    "2_0": ("8", "CANCELLED", "CANCELLED by 0", 0, 0, "node1", T(2026, 11, 29, 23, 37, 53), T(2026, 11, 29, 23, 38, 37), 44.0, "JobHeldUser", "root", "held_arr", False),
    "2_1": ("12", "CANCELLED", "CANCELLED by 0", 0, 0, "node1", T(2026, 11, 29, 23, 38, 37), T(2026, 11, 29, 23, 39, 35), 58.0, "JobArrayTaskLimit", "root", "held_arr", False),
    "2_[2-9%1]": ("2", "CANCELLED", "CANCELLED by 0", 0, 0, None, None, T(2026, 11, 29, 23, 39, 35), 0.0, "JobArrayTaskLimit", "root", "held_arr", False),
    "5_[1-3,7]": ("5", "CANCELLED", "CANCELLED by 0", 0, 0, None, None, T(2026, 11, 29, 23, 39, 35), 0.0, "JobHeldUser", "root", "name with|pipe", False),
    "6_[0-1,3,5]": ("6", "CANCELLED", "CANCELLED by 0", 0, 0, None, None, T(2026, 11, 29, 23, 39, 35), 0.0, "JobHeldUser", "root", "cancel_some", False),
    "7_[1,3,5,7,9]": ("7", "CANCELLED", "CANCELLED by 0", 0, 0, None, None, T(2026, 11, 29, 23, 39, 35), 0.0, "JobHeldUser", "root", "stepped", False),
    "9": ("9", "CANCELLED", "CANCELLED by 0", 0, 0, None, None, T(2026, 11, 29, 23, 39, 35), 0.0, "JobHeldUser", "root", "nl\nname", False),
    "10+0": ("10", "CANCELLED", "CANCELLED by 0", 0, 0, None, None, T(2026, 11, 29, 23, 39, 35), 0.0, None, "root", "het", False),
    "10+1": ("11", "CANCELLED", "CANCELLED by 0", 0, 0, None, None, T(2026, 11, 29, 23, 39, 35), 0.0, None, "root", "het", False),
    f"14_[{LONG_SPEC}]": ("14", "CANCELLED", "CANCELLED by 0", 0, 0, None, None, T(2026, 11, 29, 23, 39, 35), 0.0, "JobHeldUser", "root", "long", False),
}  # fmt: skip


def _sacct_tuple(r):
    return (
        r.job_id_raw,
        r.state,
        r.state_raw,
        r.exit_code,
        r.exit_signal,
        r.nodelist,
        r.start,
        r.end,
        r.elapsed_s,
        r.reason,
        r.user,
        r.name,
        r.alive,
    )


def test_parse_sacct_after_cancel_fixture():
    rows = by_id(parse_sacct(fixture("sacct_after_cancel.txt")))
    assert {j: _sacct_tuple(r) for j, r in rows.items()} == SACCT_AFTER_CANCEL
    assert all(r.comment is None for r in rows.values())  # not stored without job_comment
    assert rows["2_[2-9%1]"].task_ids == list(range(2, 10))
    assert rows["2_0"].task_ids == [0]
    assert rows["3"].task_ids is None


def test_parse_sacct_live_fixtures():
    rows = by_id(parse_sacct(fixture("sacct_by_id.txt"), fields=EARLIER_SACCT_FIELDS))
    assert len(rows) == 12
    alive = sorted(j for j, r in rows.items() if r.alive)
    assert alive == sorted(set(rows) - {"4", "2_0"})
    assert rows["3"].state == "RUNNING" and rows["3"].end is None
    assert rows["4"].exit_code == 3 and rows["4"].state == "FAILED"
    assert rows["2_0"].state_raw == "CANCELLED by 0"
    assert rows["2_[2-9%1]"].nodelist is None and rows["2_[2-9%1]"].start is None
    assert rows["9"].name == "nl\nname"
    every_user = by_id(parse_sacct(fixture("sacct.txt"), fields=EARLIER_SACCT_FIELDS))
    assert set(every_user) == {"1", "3", "4", "2_0", "2_1", "10+0", "10+1", "13_[3]"}


# job_id -> (state, alive, exit_code, exit_signal, elapsed_s, user, comment)
SACCT_HANDWRITTEN = {
    "40": ("TIMEOUT", False, 0, 0, 86405.0, "bob", "bob_coll"),
    "41_2": ("OUT_OF_MEMORY", False, 0, 125, 44.0, "root", "my_collection"),
    "42": ("NODE_FAIL", False, 0, 0, 0.0, "root", None),
    "43": ("PREEMPTED", False, 0, 15, 0.0, "root", None),
    "44": ("BOOT_FAIL", False, 0, 0, 0.0, "root", None),
    "45": ("DEADLINE", False, 0, 0, 0.0, "root", None),
    "46": ("CANCELLED", False, 0, 9, 105.0, "alice", None),
    "47": ("REQUEUED", True, 0, 0, 105.0, "root", None),
    "48": ("SUSPENDED", True, 0, 0, 45296.0, "root", None),
    "49": ("RUNNING", True, 0, 0, 105.0, "root", "a comment | with bars"),
    "50_[0-9%2]": ("PENDING", True, 0, 0, 0.0, "root", None),
    "51": ("REVOKED", False, 0, 0, 105.0, "root", None),
    "52": ("COMPLETED", False, 0, 0, 1.0, "root", None),
    "53": ("FAILED", False, 1, 0, 0.0, "root", None),
}


def test_parse_sacct_handwritten_states():
    rows = by_id(parse_sacct(fixture("sacct_handwritten.txt")))
    got = fields_by_id(
        rows, "state", "alive", "exit_code", "exit_signal", "elapsed_s", "user", "comment"
    )
    assert got == SACCT_HANDWRITTEN
    assert rows["46"].state_raw == "CANCELLED by 1000" and rows["46"].name == "alice job"
    assert rows["44"].start is None and rows["44"].nodelist is None
    assert rows["50_[0-9%2]"].task_ids == list(range(10))


def test_parse_sacct_edge_cases():
    assert parse_sacct("") == []
    with pytest.raises(ValueError, match="lack"):
        parse_sacct("", fields=("JobID", "State"))
    with pytest.raises(ValueError, match="incomplete"):
        parse_sacct(FIELD_SEP.join(["1", "RUNNING", "0:0"]) + "\n")
    # JobID State ExitCode NodeList Start End Elapsed Reason User JobName Comment JobIDRaw
    line = FIELD_SEP.join(
        ["1", "RUNNING", "", "", "garbage", "", "", "", "u", "n", "", "1", "debug"]
    )
    (row,) = parse_sacct(line + "\n", fields=(*records.SACCT_FIELDS, "Partition"))
    assert row.extra == {"Partition": "debug"}
    assert (row.exit_code, row.exit_signal, row.start, row.elapsed_s) == (None, None, None, None)
    # newlines in the free-text fields, even at the end of one, stay in their record
    rec = ["9", "PENDING", "0:0", "None assigned", "None", "Unknown", "00:00:00", "None", "root"]
    text = FIELD_SEP.join([*rec, "a\nb", "line1\nline2\n", "9"]) + "\n"
    text += FIELD_SEP.join([*rec, "x", "", "10"]) + "\n"
    first, second = parse_sacct(text)
    assert (first.name, first.comment, first.job_id_raw) == ("a\nb", "line1\nline2\n", "9")
    assert second.job_id_raw == "10"
    # a misaligned record is refused rather than misread
    bad = FIELD_SEP.join([*rec, "x", "", "not-an-id"]) + "\n"
    with pytest.raises(ValueError, match="JobIDRaw"):
        parse_sacct(bad)


# --------------------------------------------------------------------------------------------
# scontrol show job
# --------------------------------------------------------------------------------------------


def test_scontrol_show_job_multiline_and_oneline_agree():
    multi = parse_scontrol_show_job(fixture("scontrol_show_job.txt"))
    one = parse_scontrol_show_job(fixture("scontrol_show_job_oneline.txt"))
    assert len(multi) == 14
    assert multi == one


def test_scontrol_show_job_values():
    recs = parse_scontrol_show_job(fixture("scontrol_show_job.txt"))
    by = {r["JobId"]: r for r in recs}
    running = by["3"]
    assert running["JobName"] == "two_node"
    assert running["JobState"] == "RUNNING"
    assert running["Reason"] == "None"
    assert running["NodeList"] == "node[1-2]"
    assert running["TRES"] == "cpu=2,node=2,billing=2"
    assert running["Comment"] == "my collection with spaces"
    assert running["AllocNode:Sid"] == "localhost:4118"
    assert running["CPUs/Task"] == "1"
    assert running["ReqB:S:C:T"] == "0:0:*:*"
    assert running["ReqNodeList"] == "(null)"
    assert running["WorkDir"] == "/tmp/slurmcap"
    assert running["Power"] == ""
    pending = by["2"]
    assert pending["ArrayJobId"] == "2" and pending["ArrayTaskId"] == "2-9%1"
    assert pending["ArrayTaskThrottle"] == "1"
    assert pending["NodeList"] == ""
    assert pending["TRES"] == "cpu=1,mem=16000M,node=1,billing=1"
    assert pending["Comment"] == "my_collection"
    task = by["12"]
    assert (task["ArrayJobId"], task["ArrayTaskId"], task["JobState"]) == ("2", "1", "RUNNING")
    assert "Comment" not in by["4"] and by["4"]["ExitCode"] == "3:0"
    assert by["4"]["Reason"] == "NonZeroExitCode"
    assert by["9"]["JobName"] == "nl\nname" and by["9"]["Comment"] == "line1\nline2"
    assert by["5"]["JobName"] == "name with|pipe" and by["5"]["Comment"] == "a|b=c d"
    assert by["14"]["ArrayTaskId"] == LONG_SPEC  # not cut with SLURM_BITSTR_LEN=0
    assert (by["11"]["HetJobId"], by["11"]["HetJobOffset"], by["11"]["HetJobIdSet"]) == (
        "10",
        "1",
        "10-11",
    )


@pytest.mark.parametrize(
    "name", ["scontrol_show_job_handwritten.txt", "scontrol_show_job_oneline_handwritten.txt"]
)
def test_scontrol_show_job_free_text_with_equals_and_spaces(name):
    (rec,) = parse_scontrol_show_job(fixture(name))
    assert rec["JobId"] == "77"
    assert rec["JobName"] == "train model lr=0.1"
    assert rec["UserId"] == "alice(1000)"
    assert rec["JobState"] == "COMPLETING"
    assert rec["Reason"] == "launch failed requeued held"
    assert rec["Dependency"] == "(null)"
    assert rec["NodeList"] == "(null)"
    assert rec["Command"] == "/home/u/run.sh --lr=0.1 batch=32"
    assert rec["WorkDir"] == "/home/u/my dir"
    assert rec["Comment"] == "coll=a b=c  trailing"
    assert rec["StdErr"] == "/tmp/slurmcap/slurm-3.out"
    assert "lr" not in rec and "batch" not in rec and "b" not in rec


@pytest.mark.parametrize("text", ["", "\n", "No jobs in the system\n"])
def test_scontrol_show_job_no_records(text):
    assert parse_scontrol_show_job(text) == []


def test_scontrol_show_job_unknown_keys():
    # an unknown key is its own field after a plain field, part of the text after a
    # free-text one (JobName, Comment, ...) -- which keeps "lr=0.1" in a job name
    text = "JobId=1 JobName=a FutureKey=x y NumNodes=1 NewFlag=on\nJobId=2 JobName=b\n"
    assert parse_scontrol_show_job(text) == [
        {"JobId": "1", "JobName": "a FutureKey=x y", "NumNodes": "1", "NewFlag": "on"},
        {"JobId": "2", "JobName": "b"},
    ]


# --------------------------------------------------------------------------------------------
# scontrol show config
# --------------------------------------------------------------------------------------------


def test_scontrol_show_config_fixture():
    cfg = parse_scontrol_show_config(fixture("scontrol_show_config.txt"))
    assert cfg["MaxArraySize"] == "1001"
    assert cfg["ClusterName"] == "semltest"
    assert cfg["AcctGatherNodeFreq"] == "0 sec"
    assert cfg["AccountingStorageTRES"] == "cpu,mem,energy,node,billing,fs/disk,vmem,pages"
    assert cfg["SlurmctldHost[0]"] == "vm(127.0.0.1)"
    assert cfg["MinJobAge"] == "300 sec"
    assert not any(k.startswith(("Configuration", "Slurmctld(")) for k in cfg)
    assert len(cfg) > 150


def test_scontrol_show_config_edge_cases():
    text = (
        "Configuration data as of 2026-01-01T00:00:00\n"
        "SchedulerParameters     = bf_interval=30,bf_window=60\n"
        "MaxArraySize            = 5000\n"
        "\n"
        "MPI Plugins Configuration:\n"
        "MaxArraySize = 1\n"
        "Slurmctld(primary) at vm is UP\n"
    )
    cfg = parse_scontrol_show_config(text)
    assert cfg == {"SchedulerParameters": "bf_interval=30,bf_window=60", "MaxArraySize": "5000"}
    assert parse_scontrol_show_config("") == {}


# --------------------------------------------------------------------------------------------
# command logic with a fake subprocess.run (no Slurm involved)
# --------------------------------------------------------------------------------------------


class FakeRun:
    """Stands in for subprocess.run: records calls, answers with canned results."""

    def __init__(self, stdout="", stderr="", returncode=0, exc=None):
        self.stdout, self.stderr, self.returncode, self.exc = stdout, stderr, returncode, exc
        self.calls = []

    def __call__(self, cmd, **kw):
        self.calls.append((cmd, kw))
        if self.exc is not None:
            raise self.exc
        return subprocess.CompletedProcess(cmd, self.returncode, self.stdout, self.stderr)


@pytest.fixture
def fake(monkeypatch):
    def install(**kw):
        f = FakeRun(**kw)
        monkeypatch.setattr(slurm.subprocess, "run", f)
        return f

    return install


def test_run_slurm_uses_argument_lists_timeouts_and_a_clean_environment(fake, monkeypatch):
    monkeypatch.setenv("SQUEUE_FORMAT", "%i")
    monkeypatch.setenv("SACCT_FORMAT", "JobID")
    monkeypatch.setenv("SLURM_TIME_FORMAT", "relative")
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    f = fake(stdout="out")
    assert slurm.run_slurm(["squeue", "-h"], timeout_s=7) == "out"
    ((cmd, kw),) = f.calls
    assert cmd == ["squeue", "-h"]
    assert kw["timeout"] == 7 and kw.get("shell", False) is False
    assert kw["stdin"] is subprocess.DEVNULL
    env = kw["env"]
    assert env["SLURM_BITSTR_LEN"] == "0" and env["SLURM_CONF"] == "/etc/slurm/slurm.conf"
    assert not {"SQUEUE_FORMAT", "SACCT_FORMAT", "SLURM_TIME_FORMAT"} & set(env)


def test_run_slurm_refuses_strings():
    with pytest.raises(TypeError):
        slurm.run_slurm("squeue -h")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        slurm.run_slurm([])


@pytest.mark.parametrize(
    ("kw", "needle"),
    [
        ({"exc": FileNotFoundError(2, "No such file")}, "Slurm command 'squeue' not found"),
        ({"exc": subprocess.TimeoutExpired(["squeue"], 3)}, "timed out after"),
        ({"exc": PermissionError(13, "denied")}, "could not be started"),
        (
            {
                "returncode": 1,
                "stderr": "slurm_load_jobs error: Unable to contact slurm controller",
            },
            "Unable to contact slurm controller",
        ),
        ({"returncode": 0, "stderr": "squeue: error: Invalid user: nosuchuser\n"}, "Invalid user"),
    ],
)
def test_run_slurm_failures_raise_slurm_error_with_command_and_stderr(fake, kw, needle):
    fake(**kw)
    with pytest.raises(SlurmError) as info:
        slurm.run_slurm(["squeue", "-h", "--user=x y"])
    msg = str(info.value)
    assert needle in msg
    assert "squeue -h '--user=x y'" in msg  # the command, shell-quoted for reading
    assert info.value.cmd == ["squeue", "-h", "--user=x y"]


def test_squeue_jobs_builds_a_safe_command(fake):
    f = fake(stdout=fixture("squeue_ranges.txt"))
    rows = slurm.squeue_jobs(user="root", job_ids=["2", "3", "10+1", "2_[2-9%1]"], states=["all"])
    assert len(rows) == 14
    ((cmd, _),) = f.calls
    assert cmd[0] == "squeue"
    assert f"--format={records.squeue_format()}" in cmd
    assert "--noheader" in cmd and "--all" in cmd and "--array" not in cmd
    assert "--jobs=2,3,10+1,2_[2-9%1]" in cmd
    assert "--user=root" in cmd and "--states=all" in cmd


def test_squeue_jobs_user_selection(fake, monkeypatch):
    monkeypatch.setattr(slurm, "current_user", lambda: "me")
    f = fake()
    slurm.squeue_jobs()
    slurm.squeue_jobs(all_users=True, expand_arrays=True)
    (a, _), (b, _) = f.calls
    assert "--user=me" in a
    assert not any(x.startswith("--user") for x in b) and "--array" in b
    with pytest.raises(ValueError):
        slurm.squeue_jobs(user="x", all_users=True)


@pytest.mark.parametrize("bad", [["-a"], ["1;rm -rf /"], ["1 2"], ["abc"]])
def test_squeue_jobs_rejects_bad_ids_before_running(fake, bad):
    f = fake()
    with pytest.raises(ValueError):
        slurm.squeue_jobs(job_ids=bad)
    with pytest.raises(TypeError):
        slurm.squeue_jobs(job_ids="123")  # type: ignore[arg-type]
    assert f.calls == []


def test_squeue_jobs_empty_id_list_asks_nothing(fake):
    f = fake()
    assert slurm.squeue_jobs(job_ids=[]) == []
    assert slurm.sacct_jobs([]) == []
    slurm.scancel([])
    assert f.calls == []


def test_squeue_jobs_invalid_job_id_is_an_answer_other_errors_raise(fake):
    fake(returncode=1, stderr="slurm_load_jobs error: Invalid job id specified\n")
    assert slurm.squeue_jobs(job_ids=["999999"]) == []
    fake(returncode=1, stderr="slurm_load_jobs error: Unable to contact slurm controller\n")
    with pytest.raises(SlurmError):
        slurm.squeue_jobs(job_ids=["999999"])
    # without job ids, "Invalid job id" is not a sensible answer: raise
    fake(returncode=1, stderr="slurm_load_jobs error: Invalid job id specified\n")
    with pytest.raises(SlurmError):
        slurm.squeue_jobs(user="root")
    fake(returncode=0, stderr="squeue: error: Invalid user: nosuchuser\n")
    with pytest.raises(SlurmError, match="Invalid user"):
        slurm.squeue_jobs(user="nosuchuser")


def test_squeue_jobs_bad_output_raises_not_empty(fake):
    fake(stdout="garbage without separators" + RECORD_SEP + "\n")
    with pytest.raises(ValueError):
        slurm.squeue_jobs(user="root")


def test_scontrol_show_job_invalid_id_gives_empty(fake):
    fake(returncode=1, stderr="slurm_load_jobs error: Invalid job id specified\n")
    assert slurm.scontrol_show_job("999999") == []
    fake(returncode=1, stderr="slurm_load_jobs error: Socket timed out\n")
    with pytest.raises(SlurmError, match="Socket timed out"):
        slurm.scontrol_show_job("5")
    with pytest.raises(ValueError):
        slurm.scontrol_show_job("--all")


def test_sacct_jobs_command(fake):
    f = fake(stdout=fixture("sacct_after_cancel.txt"))
    assert len(slurm.sacct_jobs(["3", "2_[2-9%1]"])) == 12
    ((cmd, _),) = f.calls
    assert cmd[:4] == ["sacct", "--noheader", "--parsable2", "--allocations"]
    assert f"--delimiter={FIELD_SEP}" in cmd and "--jobs=3,2_[2-9%1]" in cmd


def test_actions_commands(fake):
    f = fake()
    slurm.scancel(["5", "6_[1-3]"])
    slurm.hold(["5", "6"])
    slurm.release(["7"])
    assert [c for c, _ in f.calls] == [
        ["scancel", "5", "6_[1-3]"],
        ["scontrol", "hold", "5,6"],
        ["scontrol", "release", "7"],
    ]
    fake(
        returncode=1,
        stderr="Job has already finished for job 4\nslurm_suspend error: Job has already finished\n",
    )
    with pytest.raises(SlurmError, match="already finished"):
        slurm.release(["4"])


def test_max_array_size(fake):
    fake(stdout=fixture("scontrol_show_config.txt"))
    assert slurm.max_array_size() == 1001
    fake(stdout="MaxArraySize            = 40001\n")
    assert slurm.max_array_size() == 40001
    fake(stdout="ClusterName = x\n")
    assert slurm.max_array_size() == slurm.DEFAULT_MAX_ARRAY_SIZE
    fake(stdout="MaxArraySize = lots\n")
    with pytest.raises(SlurmError, match="MaxArraySize"):
        slurm.max_array_size()


def test_current_user_falls_back_and_fails_loudly(monkeypatch):
    import getpass
    import pwd

    assert slurm.current_user() == pwd.getpwuid(__import__("os").getuid()).pw_name

    def no_entry(uid):
        raise KeyError(uid)

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    monkeypatch.setattr(getpass, "getuser", lambda: "from_env")
    assert slurm.current_user() == "from_env"

    def no_user():
        raise OSError("No username set in the environment")

    monkeypatch.setattr(getpass, "getuser", no_user)
    with pytest.raises(SlurmError, match="current user"):
        slurm.current_user()


def test_importing_runs_nothing():
    code = (
        "import subprocess, sys\n"
        "def boom(*a, **k): raise AssertionError('ran a command at import')\n"
        "subprocess.run = subprocess.Popen = boom\n"
        "import seml_hydra.slurm.client\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr
