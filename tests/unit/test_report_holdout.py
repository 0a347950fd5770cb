"""The report's holdout comparison, from the metrics a webhook exports: synthetic starts with a
known effect go through the real metric sink and its /metrics page, and come back as effects
with intervals, pods and workloads; too little data says so; no experiment says how to start
one."""

from __future__ import annotations

import random

import orjson
from prometheus_client.parser import text_string_to_metric_families

from webhook.core.holdout import HoldoutPolicy, cohort, workload_hash
from webhook.report.figures import EffectDoc, HoldoutDoc, figures
from webhook.report.output import as_json, as_table
from webhook.report.series import Sample
from webhook.serving.metrics import Metrics

POLICY = HoldoutPolicy(0.3, "report-test")
GiB = 1 << 30


def page(metrics: Metrics) -> list[Sample]:
    return [(s.name, s.labels, s.value) for family in
            text_string_to_metric_families(metrics.render().decode()) for s in family.samples]


def experiment(workloads: int, steered_factor: float, seed: int = 1) -> tuple[Metrics, dict[
        str, int]]:
    """Workloads of 2..8 pods each; a held-out pod pulls about 1 GiB in 20 s, a steered one
    `steered_factor` of that; each workload has its own scale (pods of one are alike)."""
    rng = random.Random(seed)
    metrics = Metrics()
    sink = metrics.live_inventory().telemetry
    sink.holdout_series()
    pods = {"steered": 0, "holdout": 0}
    for i in range(workloads):
        key = f"team/Deployment/app-{i}"
        group = POLICY.group(key).value
        workload = workload_hash(key)
        bucket = cohort(workload)
        assert bucket is not None
        scale = rng.uniform(0.5, 1.5)
        factor = steered_factor if group == "steered" else 1.0
        for _ in range(rng.randint(2, 8)):
            missing = int(GiB * scale * factor * rng.uniform(0.8, 1.2))
            sink.start(group, bucket, workload, missing)
            seconds = 20 * scale * factor * rng.uniform(0.8, 1.2)
            sink.pull(group == "steered", group, "pulled", seconds, 1)
            sink.start_pull(group, bucket, seconds, 1)
            sink.running(group, bucket, seconds + 2.0)
            pods[group] += 1
    return metrics, pods


def by_metric(doc: HoldoutDoc) -> dict[str, EffectDoc]:
    return {e["metric"]: e for e in doc["effects"]}


def test_a_large_effect_on_enough_workloads_is_measured() -> None:
    metrics, pods = experiment(120, steered_factor=0.4)
    doc = figures(page(metrics), None, "test")
    holdout = doc["holdout"]
    assert holdout["on"]
    effects = by_metric(holdout)
    pulls = effects["image pull seconds per start"]
    assert pulls["verdict"] == "lower"
    assert pulls["pods"] == {"steered": pods["steered"], "holdout": pods["holdout"]}
    assert sum(w or 0 for w in pulls["workloads"].values()) == 120
    relative = pulls["relative"]
    assert isinstance(relative, float) and -0.75 < relative < -0.45  # the truth: -0.6
    assert pulls["relative_ci"] is not None
    low, high = pulls["relative_ci"]
    assert low < relative < high < 0
    assert effects["bytes pulled per start"]["verdict"] == "lower"
    assert effects["seconds from creation to Running"]["verdict"] == "lower"
    # Every synthetic start pulled something: no warm start in either group.
    warm = effects["starts that pulled nothing"]
    assert warm["steered"] == warm["holdout"] == 0.0
    assert set(holdout["pull_buckets"]) == {"steered", "holdout"}
    table = as_table(doc)
    assert "image pull seconds per start: lower with steering (better)" in table
    assert f"{pods['steered']}/{pods['holdout']}" in table
    assert "upper bound" in table
    assert orjson.loads(as_json(doc))["holdout"]["effects"][0]["verdict"] == "lower"


def test_no_effect_is_no_clear_difference() -> None:
    metrics, _ = experiment(150, steered_factor=1.0, seed=3)
    effects = by_metric(figures(page(metrics), None, "test")["holdout"])
    ci = effects["bytes pulled per start"]["difference_ci"]
    assert isinstance(ci, list) and ci[0] < 0 < ci[1]
    assert effects["bytes pulled per start"]["verdict"] == "no clear difference"


def test_few_workloads_are_not_enough_data() -> None:
    metrics, _ = experiment(6, steered_factor=0.4)
    doc = figures(page(metrics), None, "test")
    effects = by_metric(doc["holdout"])
    assert {e["verdict"] for e in effects.values()} == {"not enough data"}
    assert all(e["difference_ci"] is None for e in effects.values())
    assert "not enough data to tell: each group needs" in as_table(doc)


def test_without_the_holdout_the_report_says_how_to_start_it() -> None:
    metrics = Metrics()
    metrics.live_inventory()
    doc = figures(page(metrics), None, "test")
    assert not doc["holdout"]["on"]
    assert "--holdout" in as_table(doc)


def test_pulls_of_both_groups_add_up() -> None:
    """Prometheus answers `max by (patched, result, group)`: the groups' pulls are added
    afterwards (a max across groups would drop the smaller one)."""
    samples: list[Sample] = [
        ("layer_locality_image_pulls_total",
         {"patched": "false", "result": result, "group": group}, value)
        for result, group, value in (("present", "none", 1.0), ("present", "holdout", 3.0),
                                     ("pulled", "none", 4.0), ("pulled", "holdout", 4.0))]
    share = figures(samples, None, "test")["present"]["pulls_present_share"]["not_patched"]
    assert share == 4.0 / 12.0
