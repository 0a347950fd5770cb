"""`layer-locality report`: quantiles as Prometheus interpolates them, figures from samples,
reading Prometheus answers, and the command's refusals. Expected values are worked out by hand
in the comments next to them."""

from __future__ import annotations

import math
import socket
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from webhook.cli import main
from webhook.report.figures import figures
from webhook.report.histogram import bucket_quantile
from webhook.report.output import as_json, as_table
from webhook.report.promread import (
    PromResult,
    from_prometheus,
    span_queries,
    window_queries,
    window_seconds,
)
from webhook.report.series import Sample, created_span

INF = math.inf
# Cumulative buckets: 2 observations <= 1, 4 more in (1, 2], 2 in (2, 4], 2 above 4.
BUCKETS = [(1.0, 2.0), (2.0, 6.0), (4.0, 8.0), (INF, 10.0)]


@pytest.mark.parametrize(("q", "expected"), [
    (0.5, 1.75),   # rank 5 falls in (1, 2] holding 4 (ranks 3..6): 1 + 1 * (5 - 2) / 4
    (0.1, 0.5),    # rank 1 in the first bucket, lower bound 0: 0 + 1 * 1 / 2
    (0.8, 4.0),    # rank 8 is the top of (2, 4]: 2 + 2 * (8 - 6) / 2
    (0.95, 4.0),   # rank 9.5 falls in +Inf: the second-highest bound
    (1.0, 4.0),    # rank 10, +Inf bucket again
    (0.0, 0.0),    # rank 0 in the first bucket: its lower bound
])
def test_bucket_quantile_interpolates_like_prometheus(q: float, expected: float) -> None:
    assert bucket_quantile(q, BUCKETS) == pytest.approx(expected)


def test_bucket_quantile_sorts_and_merges_buckets_sharing_a_bound() -> None:
    # (2, 3) twice merges into (2, 6): the same histogram as BUCKETS, given out of order.
    assert bucket_quantile(0.5, [(INF, 10.0), (2.0, 3.0), (1.0, 2.0), (2.0, 3.0), (4.0, 8.0)]) \
        == pytest.approx(1.75)


def test_bucket_quantile_forces_monotonic_counts() -> None:
    # (2, 3) is below its predecessor's 5: the envelope makes it 5; rank 5 then sits at the
    # top of the first bucket: 0 + 1 * 5 / 5.
    assert bucket_quantile(0.5, [(1.0, 5.0), (2.0, 3.0), (INF, 10.0)]) == pytest.approx(1.0)


def test_bucket_quantile_bounds_at_or_below_zero() -> None:
    assert bucket_quantile(0.5, [(0.0, 3.0), (1.0, 4.0), (INF, 4.0)]) == 0.0
    assert bucket_quantile(0.25, [(-1.0, 2.0), (INF, 4.0)]) == -1.0


@pytest.mark.parametrize("buckets", [
    [(1.0, 2.0), (2.0, 4.0)],          # no +Inf bucket
    [(INF, 4.0)],                      # a single bucket
    [(1.0, 0.0), (INF, 0.0)],          # no observations
    [],
])
def test_bucket_quantile_is_undefined_where_prometheus_answers_nan(
        buckets: list[tuple[float, float]]) -> None:
    assert bucket_quantile(0.5, buckets) is None


def test_bucket_quantile_out_of_range_q() -> None:
    assert bucket_quantile(-0.1, BUCKETS) == -INF
    assert bucket_quantile(1.1, BUCKETS) == INF
    assert bucket_quantile(math.nan, BUCKETS) is None
    assert bucket_quantile(0.0, [(1.0, 0.0), (INF, 4.0)]) is None  # 0/0 in Prometheus


@given(st.lists(st.integers(min_value=0, max_value=20), min_size=2, max_size=8),
       st.floats(min_value=0, max_value=1), st.floats(min_value=0, max_value=1))
def test_bucket_quantile_grows_with_q(counts: list[int], a: float, b: float) -> None:
    cumulative, total = [], 0
    for i, count in enumerate(counts):
        total += count
        cumulative.append((float(i + 1) if i < len(counts) - 1 else INF, float(total)))
    low, high = sorted((a, b))
    first, second = bucket_quantile(low, cumulative), bucket_quantile(high, cumulative)
    if total == 0 or (low == 0 and cumulative[0][1] == 0):
        return
    assert first is not None and second is not None
    assert first <= second + 1e-9
    assert 0 <= first <= len(counts) - 1


# A /metrics page with every series the report reads; NOW is 12 hours after the earliest
# `_created`.
NOW = 1_700_043_200.0
PAGE = """\
# TYPE layer_locality_binds counter
layer_locality_binds_total{outcome="top"} 6.0
layer_locality_binds_total{outcome="preferred"} 2.0
layer_locality_binds_total{outcome="other"} 2.0
layer_locality_binds_created{outcome="top"} 1700001000.0
# TYPE layer_locality_bind_present_ratio histogram
layer_locality_bind_present_ratio_bucket{le="0.1"} 1.0
layer_locality_bind_present_ratio_bucket{le="0.25"} 1.0
layer_locality_bind_present_ratio_bucket{le="0.5"} 2.0
layer_locality_bind_present_ratio_bucket{le="0.75"} 4.0
layer_locality_bind_present_ratio_bucket{le="0.9"} 7.0
layer_locality_bind_present_ratio_bucket{le="1.0"} 10.0
layer_locality_bind_present_ratio_bucket{le="+Inf"} 10.0
layer_locality_bind_present_ratio_count 10.0
layer_locality_bind_present_ratio_sum 6.5
# TYPE layer_locality_image_pull_seconds histogram
layer_locality_image_pull_seconds_bucket{le="0.5",patched="true"} 2.0
layer_locality_image_pull_seconds_bucket{le="1.0",patched="true"} 5.0
layer_locality_image_pull_seconds_bucket{le="2.0",patched="true"} 8.0
layer_locality_image_pull_seconds_bucket{le="5.0",patched="true"} 9.0
layer_locality_image_pull_seconds_bucket{le="10.0",patched="true"} 10.0
layer_locality_image_pull_seconds_bucket{le="30.0",patched="true"} 10.0
layer_locality_image_pull_seconds_bucket{le="+Inf",patched="true"} 10.0
layer_locality_image_pull_seconds_count{patched="true"} 10.0
layer_locality_image_pull_seconds_sum{patched="true"} 14.0
layer_locality_image_pull_seconds_bucket{le="0.5",patched="false"} 0.0
layer_locality_image_pull_seconds_bucket{le="1.0",patched="false"} 1.0
layer_locality_image_pull_seconds_bucket{le="2.0",patched="false"} 2.0
layer_locality_image_pull_seconds_bucket{le="5.0",patched="false"} 4.0
layer_locality_image_pull_seconds_bucket{le="10.0",patched="false"} 7.0
layer_locality_image_pull_seconds_bucket{le="30.0",patched="false"} 10.0
layer_locality_image_pull_seconds_bucket{le="+Inf",patched="false"} 10.0
layer_locality_image_pull_seconds_count{patched="false"} 10.0
layer_locality_image_pull_seconds_sum{patched="false"} 80.0
# TYPE layer_locality_image_pulls counter
layer_locality_image_pulls_total{patched="true",result="present"} 3.0
layer_locality_image_pulls_total{patched="true",result="pulled"} 1.0
layer_locality_image_pulls_total{patched="false",result="present"} 1.0
layer_locality_image_pulls_total{patched="false",result="pulled"} 3.0
# TYPE layer_locality_bytes_avoided counter
layer_locality_bytes_avoided_total 3221225472.0
layer_locality_bytes_avoided_created 1700000000.0
# TYPE layer_locality_reviews counter
layer_locality_reviews_total{reason="",result="patched"} 90.0
layer_locality_reviews_total{reason="namespace",result="skipped"} 5.0
layer_locality_reviews_total{reason="no-layers",result="skipped"} 4.0
layer_locality_reviews_total{reason="inventory",result="error"} 1.0
# TYPE layer_locality_review_duration_seconds histogram
layer_locality_review_duration_seconds_bucket{le="0.001"} 50.0
layer_locality_review_duration_seconds_bucket{le="0.005"} 90.0
layer_locality_review_duration_seconds_bucket{le="0.01"} 98.0
layer_locality_review_duration_seconds_bucket{le="0.1"} 99.0
layer_locality_review_duration_seconds_bucket{le="1.0"} 100.0
layer_locality_review_duration_seconds_bucket{le="+Inf"} 100.0
layer_locality_review_duration_seconds_count 100.0
layer_locality_review_duration_seconds_sum 0.5
"""


def parse(text: str) -> list[Sample]:
    return [(s.name, s.labels, s.value)
            for family in text_string_to_metric_families(text) for s in family.samples]


def test_figures_from_a_metrics_page() -> None:
    samples = parse(PAGE)
    span = created_span(samples, NOW)
    assert span == 43200.0  # NOW minus the earliest _created (bytes avoided, 1700000000)
    doc = figures(samples, span, "test")
    assert doc["follow"]["binds"] == {"top": 6.0, "preferred": 2.0, "other": 2.0}
    assert doc["follow"]["followed_rate"] == pytest.approx(0.8)  # (6 + 2) / 10
    # rank 5 in (0.75, 0.9] holding ranks 5..7: 0.75 + 0.15 * (5 - 4) / 3
    assert doc["present"]["at_bind_p50"] == pytest.approx(0.8)
    assert doc["present"]["at_bind_mean"] == pytest.approx(0.65)  # 6.5 / 10
    assert doc["present"]["pulls_present_share"] == {"patched": 0.75, "not_patched": 0.25}
    pulls = doc["pull_seconds"]
    assert pulls["patched"]["p50"] == pytest.approx(1.0)  # rank 5 tops (0.5, 1]: 0.5 + 0.5*3/3
    assert pulls["patched"]["p95"] == pytest.approx(7.5)  # rank 9.5 in (5, 10]: 5 + 5*0.5/1
    assert pulls["not_patched"]["p50"] == pytest.approx(5 + 5 * 1 / 3)   # (5, 10], ranks 5..7
    assert pulls["not_patched"]["p95"] == pytest.approx(10 + 20 * 2.5 / 3)  # (10, 30]
    assert doc["bytes_avoided"]["total"] == 3 * 2**30
    assert doc["bytes_avoided"]["per_day"] == pytest.approx(6 * 2**30)  # 3 GiB in half a day
    reviews = doc["reviews"]
    assert reviews["counts"] == {"patched": 90.0, "skipped": 9.0, "error": 1.0}  # reasons summed
    assert reviews["error_share"] == pytest.approx(0.01)
    assert reviews["p99_seconds"] == pytest.approx(0.1)  # rank 99 tops (0.01, 0.1]
    table = as_table(doc)
    for shown in ("6 / 2 / 2", "80.0%", "80.0% / 65.0%", "75.0%", "25.0%", "1.00 s", "7.50 s",
                  "3.0 GiB / 6.0 GiB", "90 / 9 / 1", "1.0%", "100.0 ms", "12.0 hours"):
        assert shown in table, shown
    assert "n/a" not in table
    assert orjson.loads(as_json(doc)) == orjson.loads(orjson.dumps(doc))


def test_replicas_are_summed() -> None:
    """Two replicas' pages (an instance label apart) add up before any ratio or quantile."""
    one = [(name, {**labels, "instance": "a"}, value) for name, labels, value in parse(PAGE)]
    two = [(name, {**labels, "instance": "b"}, value) for name, labels, value in parse(PAGE)]
    doc = figures(one + two, None, "two")
    assert doc["follow"]["binds"] == {"top": 12.0, "preferred": 4.0, "other": 4.0}
    assert doc["follow"]["followed_rate"] == pytest.approx(0.8)
    assert doc["pull_seconds"]["patched"]["p95"] == pytest.approx(7.5)  # same shape, doubled
    assert doc["bytes_avoided"] == {"total": 6 * 2**30, "per_day": None}  # no span: no rate


def test_missing_metrics_read_n_a() -> None:
    """A webhook without outcome telemetry (or no traffic yet): n/a, never a crash."""
    samples = parse("# TYPE layer_locality_inventory_nodes gauge\n"
                    "layer_locality_inventory_nodes 8.0\n")
    doc = figures(samples, created_span(samples, NOW), "empty")
    assert doc["follow"] == {"binds": {}, "followed_rate": None}
    assert doc["pull_seconds"]["patched"] == {"p50": None, "p95": None}
    assert doc["bytes_avoided"] == {"total": None, "per_day": None}
    assert doc["reviews"]["error_share"] is None
    table = as_table(doc)
    assert table.count("n/a") >= 14
    assert "covering: n/a" in table
    assert orjson.loads(as_json(doc))["present"]["at_bind_p50"] is None


def test_zero_binds_is_no_rate() -> None:
    samples = parse('# TYPE layer_locality_binds counter\n'
                    'layer_locality_binds_total{outcome="other"} 0.0\n')
    assert figures(samples, None, "zero")["follow"]["followed_rate"] is None


@pytest.mark.parametrize(("window", "seconds"), [
    ("1d", 86400), ("6h", 21600), ("1h30m", 5400), ("2w", 1209600), ("90s", 90),
])
def test_window_seconds(window: str, seconds: float) -> None:
    assert window_seconds(window) == seconds


@pytest.mark.parametrize("window", ["", "1", "d", "1x", "1d;", "-1d", "0s", "1d 2h"])
def test_window_seconds_refuses(window: str) -> None:
    with pytest.raises(ValueError, match=r"duration|positive"):
        window_seconds(window)


def test_window_queries() -> None:
    queries = window_queries("6h")
    # Every replica observes every bind and pull event: the max across replicas, not the sum.
    assert queries["layer_locality_binds_total"] == \
        "max by (outcome) (increase(layer_locality_binds_total[6h]))"
    assert queries["layer_locality_image_pull_seconds_bucket"] == (
        "max by (patched, group, le) (increase(layer_locality_image_pull_seconds_bucket[6h]))")
    assert queries["layer_locality_holdout_starts_total"] == (
        "max by (group, cohort) (increase(layer_locality_holdout_starts_total[6h]))")
    # A gauge: its highest value in the window, of the replica that saw the most.
    assert queries["layer_locality_holdout_workloads"] == (
        "max by (group) (max_over_time(layer_locality_holdout_workloads[6h]))")
    assert queries["layer_locality_bytes_avoided_total"] == \
        "max (increase(layer_locality_bytes_avoided_total[6h]))"
    # Each replica counts only the reviews it answered: those are summed.
    assert queries["layer_locality_reviews_total"] == \
        "sum by (result) (increase(layer_locality_reviews_total[6h]))"
    # four counters, six of the holdout's, its gauge, three histograms of three series
    assert len(queries) == 4 + 6 + 1 + 3 * 3


def test_from_prometheus_turns_vectors_into_samples() -> None:
    """Prometheus answers (canned here) become samples named after the series they sum."""
    answers: dict[str, list[PromResult]] = {
        "max by (outcome) (increase(layer_locality_binds_total[1d]))": [
            {"metric": {"outcome": "top"}, "value": (1.0, "30")},
            {"metric": {"outcome": "other"}, "value": (1.0, "10")},
        ],
        "max (increase(layer_locality_bytes_avoided_total[1d]))": [
            {"metric": {}, "value": (1.0, "NaN")},  # skipped, not a crash
        ],
        span_queries("1d")[0]: [{"metric": {}, "value": (1.0, "3600")}],
        span_queries("1d")[1]: [{"metric": {}, "value": (1.0, "1800")}],  # first review later
    }
    asked: list[str] = []

    def query(expression: str) -> list[PromResult]:
        asked.append(expression)
        return answers.get(expression, [])

    samples, span = from_prometheus(query, "1d")
    assert span == 3600.0
    assert samples == [("layer_locality_binds_total", {"outcome": "top"}, 30.0),
                       ("layer_locality_binds_total", {"outcome": "other"}, 10.0)]
    assert set(window_queries("1d").values()) <= set(asked)
    doc = figures(samples, span, "p")
    assert doc["follow"]["followed_rate"] == pytest.approx(0.75)  # 30 / (30 + 0 + 10)


def test_span_is_clipped_to_the_window() -> None:
    def query(expression: str) -> list[PromResult]:
        return [{"metric": {}, "value": (1.0, "99999")}] if expression.startswith("time()") else []

    assert from_prometheus(query, "1h")[1] == 3600.0


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port  # closed again: connecting is refused


@pytest.mark.parametrize("args", [
    ["--url", "http://127.0.0.1:{port}/metrics"],
    ["--prometheus", "http://127.0.0.1:{port}"],
    ["--url", "ftp://127.0.0.1:{port}/metrics"],
    ["--prometheus", "http://127.0.0.1:{port}", "--window", "yesterday"],
])
def test_report_command_refuses_cleanly(args: list[str], capsys: Any) -> None:
    port = closed_port()
    code = main(["report", *[a.format(port=port) for a in args]], env={})
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("layer-locality report: ")
    assert "Traceback" not in err


def test_report_needs_a_source(capsys: Any) -> None:
    with pytest.raises(SystemExit):
        main(["report"], env={})
    with pytest.raises(SystemExit):
        main(["report", "--url", "http://127.0.0.1:1/metrics", "--prometheus", "x"], env={})


def test_the_table_says_why_figures_are_n_a() -> None:
    """A static inventory (`serve --demo`) reviews pods but has no pod watch: the table says
    why the bind figures are n/a; with binds but no kubelet events, why pull times are."""
    static = parse('# TYPE layer_locality_reviews counter\n'
                   'layer_locality_reviews_total{result="patched",reason="none"} 3.0\n')
    table = as_table(figures(static, None, "static"))
    assert "n/a: no bind seen" in table and "static inventory (--demo, --nodes)" in table
    assert "no review seen" not in table
    no_events = parse('# TYPE layer_locality_binds counter\n'
                      'layer_locality_binds_total{outcome="top"} 2.0\n')
    table = as_table(figures(no_events, None, "binds only"))
    assert "n/a: no bind seen" not in table
    assert "n/a: no image pull seen" in table and "n/a: no review seen" in table
    assert "n/a:" not in as_table(figures(parse(PAGE), None, "full"))


def test_a_missing_ca_file_is_named(tmp_path: Path, capsys: Any) -> None:
    missing = tmp_path / "no-such-ca.crt"
    not_pem = tmp_path / "notes.txt"
    not_pem.write_text("not a certificate\n")
    port = closed_port()
    for ca, reason in ((missing, "No such file or directory"), (not_pem, "")):
        for source in (["--url", f"https://127.0.0.1:{port}/metrics"],
                       ["--prometheus", f"https://127.0.0.1:{port}"]):
            assert main(["report", *source, "--ca", str(ca)], env={}) == 2
            err = capsys.readouterr().err
            assert err.startswith(f"layer-locality report: --ca {ca}: "), err
            assert reason in err and len(err.strip().splitlines()) == 1
