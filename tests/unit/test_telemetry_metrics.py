"""The outcome metrics: the contract names exist from the start (zero), negative savings go
to their own counter, and every exported metric is explained in docs/monitoring.md."""

from __future__ import annotations

from pathlib import Path

from webhook.serving.metrics import Metrics

DOCS = Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"
CONTRACT: dict[str, list[dict[str, str]]] = {  # what dashboards and alerts use (DESIGN.md)
    "layer_locality_binds_total": [{"outcome": o} for o in ("top", "preferred", "other")],
    "layer_locality_bind_present_ratio_count": [{}],
    "layer_locality_bytes_avoided_total": [{}],
    "layer_locality_bytes_missed_total": [{}],
    "layer_locality_image_pull_seconds_count": [{"patched": p, "group": "none"}
                                                for p in ("true", "false")],
    "layer_locality_image_pulls_total": [{"patched": p, "group": g, "result": r}
                                         for p, g in (("true", "none"), ("true", "steered"),
                                                      ("false", "none"), ("false", "steered"),
                                                      ("false", "holdout"))
                                         for r in ("pulled", "present")],
    "layer_locality_pull_events_unparsed_total": [{}],
    "layer_locality_pull_events_unmatched_total": [{}],
}


def test_every_contract_series_exists_before_anything_happens() -> None:
    metrics = Metrics()
    metrics.live_inventory()  # what `serve` does in every mode
    for name, label_sets in CONTRACT.items():
        for labels in label_sets:
            assert metrics.registry.get_sample_value(name, labels) == 0, (name, labels)


def test_the_sink_records_what_it_is_given() -> None:
    metrics = Metrics()
    sink = metrics.live_inventory().telemetry
    sink.bind("top", 1.0, 300)
    sink.bind("preferred", 0.5, -100)
    sink.bind("other", None, None)  # a node the index did not know: the outcome only
    sink.pull(True, "none", "present", 0.0, 3)
    sink.pull(False, "holdout", "pulled", 12.5, 1)
    sink.unparsed(2)
    sink.unmatched(1)
    value = metrics.registry.get_sample_value
    assert [value("layer_locality_binds_total", {"outcome": o})
            for o in ("top", "preferred", "other")] == [1, 1, 1]
    assert value("layer_locality_bind_present_ratio_count") == 2
    assert value("layer_locality_bind_present_ratio_sum") == 1.5
    assert value("layer_locality_bytes_avoided_total") == 300
    assert value("layer_locality_bytes_missed_total") == 100
    assert value("layer_locality_image_pulls_total",
                 {"patched": "true", "group": "none", "result": "present"}) == 3
    assert value("layer_locality_image_pull_seconds_bucket",
                 {"patched": "true", "group": "none", "le": "0.0"}) == 3
    assert value("layer_locality_image_pull_seconds_sum",
                 {"patched": "false", "group": "holdout"}) == 12.5
    assert value("layer_locality_pull_events_unparsed_total") == 2
    assert value("layer_locality_pull_events_unmatched_total") == 1


def test_holdout_figures_go_to_their_group_and_cohort() -> None:
    metrics = Metrics()
    sink = metrics.live_inventory().telemetry
    sink.start("steered", 5, "a" * 16, 0)
    sink.start("steered", 5, "a" * 16, 300)  # the same workload: counted once
    sink.start("holdout", 9, "b" * 16, 700)
    sink.start_pull("holdout", 9, 2.5, 2)
    sink.running("steered", 5, 1.5)
    value = metrics.registry.get_sample_value
    steered, held = {"group": "steered", "cohort": "5"}, {"group": "holdout", "cohort": "9"}
    assert value("layer_locality_holdout_starts_total", steered) == 2
    assert value("layer_locality_holdout_warm_starts_total", steered) == 1
    assert value("layer_locality_holdout_missing_bytes_total", steered) == 300
    assert value("layer_locality_holdout_missing_bytes_total", held) == 700
    assert value("layer_locality_holdout_warm_starts_total", held) == 0  # exists, at 0
    assert value("layer_locality_holdout_pull_seconds_total", held) == 5.0
    assert value("layer_locality_holdout_pull_seconds_total", steered) == 0
    assert value("layer_locality_holdout_running_total", steered) == 1
    assert value("layer_locality_holdout_running_seconds_total", steered) == 1.5
    assert value("layer_locality_holdout_running_total", held) == 0
    assert value("layer_locality_holdout_workloads", {"group": "steered"}) == 1
    assert value("layer_locality_holdout_workloads", {"group": "holdout"}) == 1


def test_holdout_series_start_at_zero_when_the_holdout_is_on() -> None:
    metrics = Metrics()
    sink = metrics.live_inventory().telemetry
    value = metrics.registry.get_sample_value
    starts = "layer_locality_holdout_starts_total"
    assert value(starts, {"group": "holdout", "cohort": "63"}) is None
    sink.holdout_series()
    for group in ("steered", "holdout"):
        for cohort in ("0", "63"):
            labels = {"group": group, "cohort": cohort}
            assert value("layer_locality_holdout_starts_total", labels) == 0
            assert value("layer_locality_holdout_running_seconds_total", labels) == 0
    assert value(starts, {"group": "holdout", "cohort": "64"}) is None


def test_every_metric_is_explained_in_the_monitoring_docs() -> None:
    metrics = Metrics()
    metrics.live_inventory()
    docs = DOCS.read_text()
    names = []
    for family in metrics.registry.collect():
        name = family.name + ("_total" if family.type == "counter" else "")
        names.append(name)
    missing = [name for name in names if f"`{name}`" not in docs]
    assert names and not missing, missing
