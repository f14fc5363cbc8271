"""The benchmark's arithmetic: percentiles, Prometheus deltas, /proc parsing, tables."""

from __future__ import annotations

import math

import pytest
from bench.stats import (
    FrameGroup,
    Sample,
    bucket_delta,
    counter_delta,
    cpu_ticks,
    flat_to_samples,
    fmt,
    fraction_above,
    frame_location,
    histogram_buckets,
    histogram_quantile,
    markdown_table,
    parse_samples,
    percentile,
    ratio,
    reclaim_floor,
    renewal_offsets,
    rss_bytes,
    schedstat,
    stack_share,
    sum_samples,
    summarize,
    system_cpu_ticks,
    top_frames,
)


def test_percentile_interpolates_between_ranks_like_numpy() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0.0) == 1.0
    assert percentile(values, 1.0) == 4.0
    assert percentile(values, 0.5) == pytest.approx(2.5)
    assert percentile(list(map(float, range(101))), 0.99) == pytest.approx(99.0)
    assert percentile([7.0], 0.99) == 7.0
    assert math.isnan(percentile([], 0.5))


def test_percentile_rejects_a_quantile_outside_0_1() -> None:
    with pytest.raises(ValueError, match="outside"):
        percentile([1.0], 1.5)


def test_summarize() -> None:
    s = summarize([0.001 * i for i in range(1, 101)])
    assert s.n == 100
    assert s.p50 == pytest.approx(0.0505)
    assert s.p99 == pytest.approx(0.09901)
    assert s.max == pytest.approx(0.1)
    assert s.mean == pytest.approx(0.0505)
    empty = summarize([])
    assert empty.n == 0
    assert math.isnan(empty.p99)


def test_ratio_is_nan_without_a_baseline() -> None:
    assert ratio(3.0, 2.0) == 1.5
    assert math.isnan(ratio(1.0, 0.0))
    assert math.isnan(ratio(math.nan, 1.0))


APISERVER_TEXT = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",resource="jobleases",verb="PATCH",subresource=""} 10
apiserver_request_total{code="409",resource="jobleases",verb="PATCH",subresource=""} 2
apiserver_request_total{code="200",resource="jobleases",verb="GET",subresource=""} 5
apiserver_request_total{code="200",resource="pods",verb="PATCH",subresource=""} 99
"""


def test_parse_and_sum_apiserver_requests_by_labels() -> None:
    samples = parse_samples(APISERVER_TEXT)
    assert len(samples) == 4
    assert sum_samples(samples, "apiserver_request_total", resource="jobleases") == 17
    assert sum_samples(samples, "apiserver_request_total", resource="jobleases", verb="PATCH") == 12
    assert sum_samples(samples, "apiserver_request_total", verb=("PATCH", "GET"), code="200") == 114
    later = parse_samples(APISERVER_TEXT.replace("} 10", "} 25"))
    assert counter_delta(samples, later, "apiserver_request_total", verb="PATCH") == 15


def test_flat_operator_metrics_become_samples() -> None:
    flat = {
        "leasehold_renewals_observed_total": 3.0,
        'leasehold_watch_lag_seconds_bucket{le="0.5"}': 2.0,
        'leasehold_jobs{phase="Run\\"ning"}': 1.0,
    }
    samples = flat_to_samples(flat)
    assert Sample("leasehold_renewals_observed_total", {}, 3.0) in samples
    assert Sample("leasehold_watch_lag_seconds_bucket", {"le": "0.5"}, 2.0) in samples
    assert Sample("leasehold_jobs", {"phase": 'Run"ning'}, 1.0) in samples


def lag_histogram(counts: dict[str, float]) -> list[Sample]:
    return [Sample("leasehold_watch_lag_seconds_bucket", {"le": le}, v) for le, v in counts.items()]


def test_histogram_buckets_are_sorted_with_inf_last() -> None:
    samples = lag_histogram({"+Inf": 10, "0.1": 4, "1.0": 9})
    assert histogram_buckets(samples, "leasehold_watch_lag_seconds") == [
        (0.1, 4),
        (1.0, 9),
        (math.inf, 10),
    ]


def test_bucket_delta_keeps_only_the_window() -> None:
    before = [(0.1, 4.0), (1.0, 9.0), (math.inf, 10.0)]
    after = [(0.1, 104.0), (1.0, 109.0), (math.inf, 110.0)]
    assert bucket_delta(before, after) == [(0.1, 100.0), (1.0, 100.0), (math.inf, 100.0)]
    assert bucket_delta([], after) == after


def test_histogram_quantile_interpolates_like_promql() -> None:
    buckets = [(0.1, 50.0), (0.5, 90.0), (1.0, 100.0), (math.inf, 100.0)]
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.1)
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.05)
    assert histogram_quantile(0.7, buckets) == pytest.approx(0.3)
    assert histogram_quantile(0.99, buckets) == pytest.approx(0.95)
    assert math.isnan(histogram_quantile(0.5, [(0.1, 0.0), (math.inf, 0.0)]))


def test_histogram_quantile_in_the_inf_bucket_is_the_highest_bound() -> None:
    buckets = [(0.1, 1.0), (1.0, 2.0), (math.inf, 10.0)]
    assert histogram_quantile(0.99, buckets) == 1.0


def test_fraction_above_a_bound() -> None:
    buckets = [(0.5, 90.0), (1.0, 98.0), (math.inf, 100.0)]
    assert fraction_above(1.0, buckets) == pytest.approx(0.02)
    assert math.isnan(fraction_above(0.7, buckets))


def test_cpu_ticks_counts_user_and_system_even_with_odd_command_names() -> None:
    stat = "4242 (leasehold (op) x) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 25 0 0 20 0 9 0"
    assert cpu_ticks(stat) == 175


def test_system_cpu_ticks() -> None:
    text = "cpu  100 5 50 1000 20 1 2 3 0 0\ncpu0 50 2 25 500 10 0 1 1 0 0\n"
    assert system_cpu_ticks(text) == (161, 1181)
    assert system_cpu_ticks("") == (0, 0)


def test_rss_bytes() -> None:
    status = "Name:\tleasehold\nVmPeak:\t  999 kB\nVmRSS:\t  2048 kB\n"
    assert rss_bytes(status) == 2048 * 1024
    assert rss_bytes("Name:\tzombie\n") == 0


def test_renewal_offsets_spread_evenly_and_interleave_by_phase() -> None:
    assert renewal_offsets(4, 10.0) == [0.0, 2.5, 5.0, 7.5]
    assert renewal_offsets(2, 10.0, phase=0.5) == [2.5, 7.5]
    assert renewal_offsets(0, 10.0) == []


def test_top_frames_by_self_and_inclusive_share() -> None:
    collapsed = "\n".join(
        [
            "main (a.py:1);loop (a.py:5);handler (b.py:9) 6",
            "main (a.py:1);loop (a.py:5);json (c.py:2) 3",
            "main (a.py:1);loop (a.py:5) 1",
            "garbage",
        ]
    )
    own, incl = top_frames(collapsed, limit=2)
    assert own == [("handler (b.py)", 0.6), ("json (c.py)", 0.3)]
    assert incl[0][1] == 1.0
    assert {f for f, _ in incl} == {"main (a.py)", "loop (a.py)"}
    assert top_frames("") == ([], [])


def test_top_frames_merges_the_lines_of_a_function() -> None:
    collapsed = "main (a.py:1);handler (b.py:9) 2\nmain (a.py:1);handler (b.py:12) 2\n"
    own, _ = top_frames(collapsed)
    assert own == [("handler (b.py)", 1.0)]
    own, _ = top_frames(collapsed, by_function=False)
    assert own == [("handler (b.py:9)", 0.5), ("handler (b.py:12)", 0.5)]


def test_fmt() -> None:
    assert fmt(1234.5, digits=0) == "1,234"
    assert fmt(1.234, "x", 2) == "1.23x"
    assert fmt(3.0, "ms") == "3.0 ms"
    assert fmt(math.nan) == "-"


def test_markdown_table_lines_up_columns() -> None:
    table = markdown_table(["a", "long header"], [["1", "2"], ["333", "4"]])
    assert table.splitlines() == [
        "| a   | long header |",
        "| --- | ----------- |",
        "| 1   | 2           |",
        "| 333 | 4           |",
    ]


def test_markdown_table_rejects_ragged_rows() -> None:
    with pytest.raises(ValueError, match="cells"):
        markdown_table(["a", "b"], [["1"]])


def test_stack_share_counts_stacks_with_a_frame_of_the_group() -> None:
    collapsed = (
        "main (a.py:1);handler (pkg/b.py:9) 3\n"
        "main (a.py:1);idle (c.py:2) 1\n"
        "main (a.py:1);handler (other/b.py:9) 1\n"
    )
    assert stack_share(collapsed, FrameGroup("pkg.b", "handler")) == 0.6
    assert stack_share(collapsed, FrameGroup("a", "main")) == 1.0
    assert stack_share(collapsed, FrameGroup("b")) == 0.8
    assert math.isnan(stack_share("", FrameGroup("x")))


def test_frame_location_gives_function_and_module_parts() -> None:
    assert frame_location(
        "ListWatch._watch_from (leasehold/controller/engines/watching.py:12)"
    ) == (
        "ListWatch._watch_from",
        ("leasehold", "controller", "engines", "watching"),
    )
    assert frame_location("<module> (leasehold/__init__.py)") == ("<module>", ("leasehold",))
    assert frame_location("select (/usr/lib/python3.11/selectors.py:468)")[1][-1] == "selectors"
    assert frame_location("not a frame") == ("", ())


def test_frame_group_matches_by_module_not_by_file_path() -> None:
    watch = FrameGroup("leasehold.controller.engines.watching", "ListWatch._watch_from")
    # py-spy keeps more or less of the path; the module's dotted name is its tail.
    assert watch.matches("ListWatch._watch_from (leasehold/controller/engines/watching.py:12)")
    assert watch.matches(
        "ListWatch._watch_from (/work/x/operator/leasehold/controller/engines/watching.py:12)"
    )
    # The old flat layout's file, another module or another function: not the group.
    assert not watch.matches("ListWatch._watch_from (leasehold/watching.py:12)")
    assert not watch.matches("ListWatch._watch_from (other/controller/engines/watching.py:12)")
    assert not watch.matches("ListWatch._run (leasehold/controller/engines/watching.py:12)")
    # A bare method name matches it in any class of the module.
    select = FrameGroup("selectors", "select")
    assert select.matches("EpollSelector.select (selectors.py:468)")
    assert not select.matches("EpollSelector.unselect (selectors.py:468)")
    # A package without a function: every frame of it and its submodules.
    prom = FrameGroup("prometheus_client")
    assert prom.matches("MutexValue.inc (prometheus_client/values.py:20)")
    assert not prom.matches("inc (my_prometheus_client/values.py:20)")


def test_profile_groups_name_the_operator_code_where_it_is() -> None:
    from bench.profile import PROFILE_GROUPS

    from leasehold.controller.runtime import Runtime

    group = PROFILE_GROUPS["lease events on the loop (Runtime.on_lease_event)"]
    assert group == FrameGroup("leasehold.controller.runtime", "Runtime.on_lease_event")
    assert Runtime.on_lease_event.__qualname__ == group.function
    for g in PROFILE_GROUPS.values():
        __import__(g.module)  # every group names a module that exists


def test_schedstat() -> None:
    assert schedstat("958162273 123238929 928\n") == (958162273, 123238929)
    assert schedstat("") == (0, 0)


def test_reclaim_floor_is_the_burst_s_api_server_time() -> None:
    # 10 s window, API server 1.5 cores: 15 CPU s over 5,000 requests = 3 ms each.
    # 1,000 reclaims x 2 requests x 3 ms = 6 CPU s: 4 s at 1.5 cores.
    # Renewals 3,000: 9 CPU s, 0.9 cores; at the 0.6 cores left, 10 s.
    floor = reclaim_floor(
        reclaims=1000,
        operator_requests=2000,
        renewals=3000,
        served=5000,
        apiserver_cpu_seconds=15.0,
        window_seconds=10.0,
        expiry_spread=2.0,
        margin=1.0,
    )
    assert floor.requests_per_reclaim == 2.0
    assert floor.cpu_per_request == pytest.approx(0.003)
    assert floor.apiserver_cores == pytest.approx(1.5)
    assert floor.renewal_cores == pytest.approx(0.9)
    assert floor.burst_seconds == pytest.approx(4.0)
    assert floor.p99_floor == pytest.approx(1.0 + 0.99 * 2.0)
    assert floor.burst_seconds_with_renewals == pytest.approx(10.0)
    assert floor.p99_with_renewals == pytest.approx(1.0 + 0.99 * 8.0)


def test_reclaim_floor_is_the_margin_when_the_burst_fits_in_its_spread() -> None:
    floor = reclaim_floor(
        reclaims=10,
        operator_requests=30,
        renewals=0,
        served=100,
        apiserver_cpu_seconds=0.5,
        window_seconds=5.0,
        expiry_spread=2.0,
        margin=1.0,
    )
    assert floor.burst_seconds == pytest.approx(1.5)
    assert floor.p99_floor == 1.0
    assert floor.p99_with_renewals == 1.0


def test_reclaim_floor_without_room_for_the_burst_is_infinite() -> None:
    floor = reclaim_floor(
        reclaims=10,
        operator_requests=30,
        renewals=130,  # the window's requests were all renewals: nothing left
        served=130,
        apiserver_cpu_seconds=1.3,
        window_seconds=1.0,
        expiry_spread=0.0,
        margin=1.0,
    )
    assert floor.burst_seconds == pytest.approx(0.3 / 1.3)  # 30 x 10 ms at 1.3 cores
    assert floor.burst_seconds_with_renewals == math.inf
    assert floor.p99_with_renewals == math.inf
    empty = reclaim_floor(
        reclaims=0,
        operator_requests=0,
        renewals=0,
        served=0,
        apiserver_cpu_seconds=0.0,
        window_seconds=1.0,
        expiry_spread=0.0,
        margin=1.0,
    )
    assert math.isnan(empty.p99_floor)


def test_reclaim_floor_counts_idle_cores_as_the_api_server_s_too() -> None:
    # 0.5 cores used + 1.0 idle: 1.5 cores; 30 requests x 10 ms = 0.3 CPU s: 0.2 s.
    floor = reclaim_floor(
        reclaims=10,
        operator_requests=30,
        renewals=20,
        served=50,
        apiserver_cpu_seconds=0.5,
        window_seconds=1.0,
        expiry_spread=0.0,
        margin=1.0,
        idle_cores=1.0,
    )
    assert floor.apiserver_cores == pytest.approx(1.5)
    assert floor.burst_seconds == pytest.approx(0.2)
    assert floor.renewal_cores == pytest.approx(0.2)
    assert floor.burst_seconds_with_renewals == pytest.approx(0.3 / 1.3)
