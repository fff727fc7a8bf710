"""Right-sizing (``slurm.usage``, ``track.usage``): sacct's accounting parsed, requests read
from the stored sbatch options, the suggestion rules and the launcher's one line."""

from __future__ import annotations

import pytest

from seml_hydra.slurm.usage import TaskUsage, parse_memory_mb, parse_usage
from seml_hydra.track.usage import advice_lines, group_usage, requested_from_options, underused_line

SACCT = """\
18_0|COMPLETED|00:10:00|00:16:00||8|16G|10:00:00|billing=8,cpu=8,gres/gpu=1,mem=16G,node=1
18_0.batch|COMPLETED|00:10:00|00:16:00|2949120K|8|||
18_0.0|COMPLETED|00:09:58|00:00:01|1024K|8|||
18_1|TIMEOUT|10:00:02|01:00:00||8|16G|10:00:00|billing=8,cpu=8,mem=16G,node=1
garbage line
"""


def test_sacct_usage_is_read_per_task_with_the_steps_peak_memory():
    usage = parse_usage(SACCT)
    assert set(usage) == {"18_0", "18_1"}
    first = usage["18_0"]
    assert first.max_rss_mb == pytest.approx(2880.0)  # the largest step's MaxRSS
    assert (first.req_cpus, first.req_mem_mb, first.time_limit_min, first.gpus) == (
        8,
        16384.0,
        600.0,
        1,
    )
    assert first.cpu_efficiency == pytest.approx(960 / (600 * 8))
    assert usage["18_1"].state == "TIMEOUT" and usage["18_1"].max_rss_mb is None


def test_memory_values_in_slurms_units():
    assert parse_memory_mb("61592K") == pytest.approx(60.1, abs=0.1)
    assert parse_memory_mb("2G") == 2048
    assert parse_memory_mb("4000", default_unit="M") == 4000
    assert parse_memory_mb("") is None and parse_memory_mb("lots") is None


def test_requests_from_the_stored_sbatch_options():
    options = {"nodes": 2, "ntasks-per-node": 2, "cpus-per-task": 4, "mem": "8G", "time": 90}
    assert requested_from_options(options) == {
        "cpus": 16,
        "mem_mb": 16384,
        "time_min": 90,
        "gpus": None,
    }
    assert requested_from_options({"gpus-per-task": 1, "ntasks": 3, "time": "1:30:00"}) == {
        "cpus": 3,
        "mem_mb": None,
        "time_min": 90,
        "gpus": 3,
    }


def doc(exp_id, array, task, *, rss=None, real=None, cpu=0.0, batch=1, **options):
    return {
        "_id": exp_id,
        "batch_id": batch,
        "status": "COMPLETED",
        "slurm": [
            {
                "array_id": array,
                "task_id": task,
                "sbatch_options": {"comment": "c", "job-name": "c_1", **options},
            }
        ],
        "stats": {}
        if real is None
        else {"max_rss_mb": rss, "real_time": real, "self": {"user_time": cpu, "system_time": 0.0}},
    }


BIG = {"cpus-per-task": 8, "mem": "16G", "time": 600}


def test_suggestions_with_headroom_from_sacct():
    docs = [doc(1, 18, 0, **BIG), doc(2, 18, 1, **BIG)]
    sacct = parse_usage(SACCT.replace("TIMEOUT", "COMPLETED").replace("10:00:02", "01:01:00"))
    [group] = group_usage(docs, sacct)
    assert group.requested == {"cpus": 8, "mem_mb": 16384, "time_min": 600, "gpus": 1}
    assert group.used["max_rss_mb"] == pytest.approx(2880.0)
    assert group.used["elapsed_min"] == pytest.approx(61.0)
    assert group.suggested["mem_mb"] == 4096  # 2.8 GiB + 25% -> 4 GiB
    assert group.suggested["time_min"] == 95  # 61 min + 50% in 5-minute steps
    assert group.suggested["cpus"] == 2  # mean efficiency 16% of 8 CPUs, +25%
    assert group.advice[0] == "mem_gb: 16 -> 4: largest 2.8 GiB + 25%"
    assert group.advice[1] == "timeout_min: 600 -> 95: longest 61 min + 50%"
    assert group.advice[2].startswith("cpus_per_task: 8 -> 2: CPU efficiency 16%")
    assert group.missing == []


def test_memory_slurm_gave_by_default_is_said_to_be_unset_not_asked():
    unset = {"cpus-per-task": 8, "time": 600}  # no mem_gb: Slurm's default memory (ReqMem)
    docs = [doc(1, 18, 0, **unset), doc(2, 18, 1, **unset)]
    sacct = parse_usage(SACCT.replace("TIMEOUT", "COMPLETED").replace("|16G|", "|16000M|"))
    [group] = group_usage(docs, sacct)
    assert group.suggested["mem_mb"] == 4096
    assert group.advice[0] == "mem_gb: unset (Slurm gave 15.6 GiB) -> 4: largest 2.8 GiB + 25%"


def test_a_job_that_hit_its_limit_gets_more_time_not_less():
    docs = [doc(1, 18, 0, **BIG), doc(2, 18, 1, **BIG)]
    [group] = group_usage(docs, parse_usage(SACCT))
    assert group.suggested["time_min"] == 1200
    assert "a job reached its time limit" in " ".join(group.advice)


def test_without_sacct_the_stats_are_used_and_the_gap_is_said():
    docs = [doc(1, 7, 0, rss=100.0, real=120.0, cpu=60.0, mem="4G", time=60)]
    [group] = group_usage(docs, {})
    assert group.used["max_rss_mb"] == 100.0 and group.used["elapsed_min"] == 2.0
    assert group.used["cpu_efficiency"] == pytest.approx(0.5)
    assert group.suggested["mem_mb"] == 1024 and group.suggested["time_min"] == 5
    assert "no Slurm accounting records" in group.missing[0]


def test_groups_split_by_batch_and_resources_and_skip_unsubmitted():
    docs = [
        doc(1, 7, 0, mem="4G"),
        doc(2, 7, 1, mem="4G"),
        doc(3, 8, 0, mem="8G"),
        doc(4, 9, 0, batch=2, mem="4G"),
        {"_id": 5, "batch_id": 2, "status": "STAGED"},
    ]
    groups = group_usage(docs, {})
    assert [(g.batch_id, g.arrays, len(g.experiments)) for g in groups] == [
        (1, ["7"], 2),
        (1, ["8"], 1),
        (2, ["9"], 1),
    ]
    assert groups[0].missing == ["no experiment of this group has run yet"]


def test_the_launchers_line_names_what_was_under_a_quarter():
    small = [doc(1, 7, 0, rss=100.0, real=60.0, mem="4G", time=60)]
    line = underused_line(group_usage(small, {}), "my coll")
    assert line == (
        "Batch 1 (array 7) used less than a quarter of its request (memory 100 MiB of 4.0 GiB, time "
        "1.0 min of 60 min): `seml 'my coll' usage` suggests smaller requests."
    )
    fitting = [doc(1, 7, 0, rss=3000.0, real=50 * 60.0, mem="4G", time=60)]
    assert underused_line(group_usage(fitting, {}), "c") is None


def test_the_launchers_line_names_the_memory_used_when_none_was_asked_for():
    """No mem_gb: Slurm's default applied (the launcher does not know it), so the line says
    what was used and what to set, next to what was under a quarter (here: time)."""
    unset = [doc(1, 7, 0, rss=2000.0, real=60.0, cpu=12.0, **{"cpus-per-task": 2, "time": 60})]
    line = underused_line(group_usage(unset, {}), "c")
    assert line == (
        "Batch 1 (array 7) used less than a quarter of its request (time 1.0 min of 60 min, "
        "CPU efficiency 10% of 2 CPUs); it asked for no memory (Slurm's default applies) and "
        "used 2.0 GiB (set hydra.launcher.mem_gb=3): `seml c usage` suggests smaller requests."
    )


def test_cpu_efficiency_is_rounded_one_way_in_the_advice_the_line_and_the_table():
    from seml_hydra.track.usage import percent

    assert (percent(0.205), percent(0.215), percent(None)) == ("20%", "22%", "-")
    docs = [doc(1, 7, 0, rss=100.0, real=100.0, cpu=41.0, **{"cpus-per-task": 2, "time": 60})]
    [group] = group_usage(docs, {})
    shown = percent(group.used["cpu_efficiency"])
    assert group.advice[-1].endswith(f"CPU efficiency {shown}") and shown == "20%"
    assert f"CPU efficiency {shown} of 2 CPUs" in underused_line([group], "c")


def test_task_usage_without_elapsed_has_no_efficiency():
    assert TaskUsage("1", total_cpu_s=5.0, req_cpus=2).cpu_efficiency is None


def test_memory_is_suggested_per_node_for_every_task_on_it():
    two_tasks = dict(nodes=2, **{"ntasks-per-node": 2}, mem="8G", time=60)
    [group] = group_usage([doc(1, 7, 0, rss=2900.0, real=60.0, **two_tasks)], {})
    assert group.requested["mem_mb"] == 16384  # 8 GiB on each of 2 nodes
    # 2.8 GiB per task x 2 tasks per node + 25% -> 8 GiB per node: no smaller request
    assert group.suggested["mem_mb"] is None
    [one] = group_usage([doc(1, 7, 0, rss=1000.0, real=60.0, **two_tasks)], {})
    assert one.suggested["mem_mb"] == 3 * 1024 * 2
    assert one.advice[0] == "mem_gb: 8 -> 3: largest 1000 MiB x 2 tasks per node + 25%"


@pytest.mark.parametrize(
    "forged",
    [
        {"slurm": "garbage"},
        {"slurm": [5]},
        {"slurm": {"array_id": 7, "task_id": 0, "sbatch_options": {"mem": "4G"}}},
        {"stats": [1, 2]},
        {"stats": {"self": 3, "max_rss_mb": float("nan")}},
        {"batch_id": "abc", "_id": "x1"},
        {"slurm": [{"array_id": 7, "sbatch_options": [1]}]},
        {"stats": {"max_rss_mb": 1e308}},
    ],
)
def test_a_forged_document_is_read_without_a_crash(forged):
    good = doc(1, 7, 0, rss=100.0, real=60.0, mem="4G", time=60)
    groups = group_usage([good, {**doc(2, 7, 1, mem="4G"), **forged}], {})
    assert sum(len(g.experiments) for g in groups) in (1, 2)
    assert all(g.used["max_rss_mb"] in (None, 100.0) for g in groups)


def test_seml_05_documents_keep_their_task_in_execution_and_local_runs_are_left_out():
    seml = {"_id": 1, "batch_id": 1, "status": "COMPLETED",
            "slurm": [{"array_id": 18, "sbatch_options": {"mem": "16G"}}],
            "execution": {"cluster": "c", "array_id": 18, "task_id": 0}}  # fmt: skip
    local = {**doc(2, 4242, 0, mem="4G"), "execution": {"cluster": "local", "array_id": 4242}}
    [group] = group_usage([seml, local], parse_usage(SACCT))
    assert [e.job_id for e in group.experiments] == ["18_0"]
    assert group.experiments[0].from_sacct and group.used["max_rss_mb"] == pytest.approx(2880.0)


def test_a_job_our_time_limit_signal_ended_counts_as_having_hit_its_limit():
    ended = {**doc(1, 7, 0, rss=100.0, real=3540.0, mem="4G", time=60), "status": "FAILED",
             "fail_trace": ["Slurm signalled a timeout or preemption and the task did not opt in"]}  # fmt: skip
    [group] = group_usage([ended], {})
    assert group.suggested["time_min"] == 120


def test_markdown_advice_follows_the_table_as_a_list_not_as_rows():
    small = [doc(1, 7, i, mem="16G", rss=500.0, real=60.0) for i in range(2)]
    groups = group_usage(small, {})
    plain = advice_lines(groups)
    assert plain and all(line.startswith("batch 1 [7]: ") for line in plain)
    lines = advice_lines(groups, markdown=True)
    assert lines[0] == ""  # a blank line ends the table above
    assert lines[1:] == [f"- {line}" for line in plain]
    assert advice_lines([], markdown=True) == []
