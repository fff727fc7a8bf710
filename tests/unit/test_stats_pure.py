"""``seml_hydra.job.stats.stats_fields``: the ``stats`` block of a run from two readings (pure)."""

from seml_hydra.job.stats import Usage, sample, stats_fields


def usage(wall, user, system, rss_kb, kid_user=0.0, kid_rss_kb=0, gpu=None):
    return Usage(wall, user, system, rss_kb, kid_user, 0.0, kid_rss_kb, gpu)


def test_times_are_differences_and_memory_the_high_water_mark_in_seml_names():
    fields = stats_fields(
        usage(100.0, 1.0, 0.5, 1000),
        usage(112.5, 4.0, 1.5, 204800, 2.0, 10240),
        torch_imported=False,
    )
    assert fields == {
        "real_time": 12.5,
        "self": {"user_time": 3.0, "system_time": 1.0, "max_memory_bytes": 204800 * 1024},
        "children": {"user_time": 2.0, "system_time": 0.0, "max_memory_bytes": 10240 * 1024},
        "max_rss_mb": 200.0,
    }


def test_max_rss_mb_is_the_larger_of_process_and_children():
    fields = stats_fields(
        usage(0, 0, 0, 0), usage(1, 0, 0, 1024, 0, 3 * 1024), torch_imported=False
    )
    assert fields["max_rss_mb"] == 3.0


def test_torch_imported_adds_the_pytorch_block_with_the_gpu_peak_when_there_is_one():
    start = usage(0, 0, 0, 10)
    assert stats_fields(start, usage(1, 0, 0, 10), torch_imported=True)["pytorch"] == {}
    with_gpu = stats_fields(start, usage(1, 0, 0, 10, gpu=5 << 20), torch_imported=True)
    assert with_gpu["pytorch"] == {"gpu_max_memory_bytes": 5 << 20}


def test_a_sample_reads_this_process():
    before = sample()
    sum(i * i for i in range(200_000))  # some CPU time
    after = sample()
    assert after.self_user_s + after.self_system_s >= before.self_user_s + before.self_system_s
    assert after.self_maxrss_kb > 0 and after.wall_s >= before.wall_s
