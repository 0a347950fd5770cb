"""For the monitoring tests: the component's files as data (rule groups, dashboard panels and
their expressions), the metric contract, and `promtool test rules` cases.

Each alert gets a failing series (it must fire, with the labels stated) and a healthy one (it
must stay quiet). Series use promtool's expanding notation: `a+bxN` is a, a+b, ... N+1 values,
one per minute (interval 1m).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import yaml

COMPONENT = Path(__file__).resolve().parents[2] / "manifests" / "components" / "monitoring"
Obj = dict[str, Any]


def rule_groups() -> list[Obj]:
    rule = yaml.safe_load((COMPONENT / "prometheusrule.yaml").read_text())
    groups: list[Obj] = rule["spec"]["groups"]
    return groups


def write_rules(path: Path) -> Path:
    """The PrometheusRule's groups as a Prometheus rules file."""
    path.write_text(yaml.safe_dump({"groups": rule_groups()}))
    return path


def dashboard() -> Obj:
    doc: Obj = orjson.loads((COMPONENT / "dashboard.json").read_bytes())
    return doc


def panels(doc: Obj) -> Iterator[Obj]:
    for panel in doc["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows hold their panels


def panel_expressions() -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in panels(dashboard()) for t in p.get("targets", [])]


def rule_expressions() -> list[tuple[str, str]]:
    return [(r.get("alert") or r["record"], r["expr"]) for g in rule_groups() for r in g["rules"]]


# Metric names the dashboard and alerts may use (DESIGN.md, the contract; counters as
# their `_total` sample, histograms by family name).
COUNTERS = {
    "layer_locality_reviews_total", "layer_locality_bad_requests_total",
    "layer_locality_callers_refused_total", "layer_locality_metrics_scrapes_authorized_total",
    "layer_locality_layer_budget_misses_total", "layer_locality_connections_closed_total",
    "layer_locality_watch_restarts_total", "layer_locality_relists_total",
    "layer_locality_registry_requests_total", "layer_locality_registry_failures_total",
    "layer_locality_registry_cache_lookups_total", "layer_locality_binds_total",
    "layer_locality_bytes_avoided_total", "layer_locality_image_pulls_total",
    "layer_locality_pull_events_unparsed_total", "layer_locality_holdout_starts_total",
    "layer_locality_holdout_missing_bytes_total", "layer_locality_holdout_warm_starts_total",
    "layer_locality_holdout_pull_seconds_total", "layer_locality_holdout_running_total",
    "layer_locality_holdout_running_seconds_total",
}
GAUGES = {"layer_locality_inventory_nodes", "layer_locality_inventory_layers",
          "layer_locality_open_connections", "layer_locality_holdout_workloads"}
HISTOGRAMS = {"layer_locality_review_duration_seconds", "layer_locality_bind_present_ratio",
              "layer_locality_image_pull_seconds"}
CONTRACT = COUNTERS | GAUGES | {f"{h}_{s}" for h in HISTOGRAMS for s in ("bucket", "sum", "count")}

# Panels of the holdout's comparison (no data without a holdout, as in demo mode).
HOLDOUT_PANELS = {"Holdout: pull time per start, steered vs held out, last 24h",
                  "Holdout: bytes pulled per start, steered vs held out, last 24h",
                  "Holdout: pull seconds per start by group (6h window)"}

REQUIRED_ALERTS = {
    "LayerLocalityReviewErrors", "LayerLocalityReviewLatencyHigh",
    "LayerLocalityInventoryNotReady", "LayerLocalityBudgetMissesClimbing",
    "LayerLocalityFollowedRateCollapsing", "LayerLocalityCallersRefused",
}

TARGET = 'namespace="layer-locality",job="layer-locality",instance="10.0.0.7:8443"'
GROUP = {"namespace": "layer-locality", "job": "layer-locality"}  # after sum by (namespace, job)


def _case(alert: str, at: str, series: dict[str, str], fires: list[dict[str, str]]) -> Any:
    return {
        "interval": "1m",
        "input_series": [{"series": name, "values": values} for name, values in series.items()],
        "alert_rule_test": [{"eval_time": at, "alertname": alert,
                             "exp_alerts": [{"exp_labels": labels} for labels in fires]}],
    }


def _pair(alert: str, at: str, failing: dict[str, str], healthy: dict[str, str],
          labels: dict[str, str]) -> list[Any]:
    return [_case(alert, at, failing, [labels]), _case(alert, at, healthy, [])]


def _metric(name: str, extra: str = "") -> str:
    return f"{name}{{{TARGET}{',' + extra if extra else ''}}}"


REVIEWS = "layer_locality_reviews_total"
LATENCY = "layer_locality_review_duration_seconds_bucket"
BINDS = "layer_locality_binds_total"
MISSES = "layer_locality_layer_budget_misses_total"

ALERT_CASES: list[Any] = [
    # 6 errors for 60 patched a minute: 9% of reviews fail (> 1%), for more than 15 minutes.
    *_pair("LayerLocalityReviewErrors", "30m",
           {_metric(REVIEWS, 'result="patched",reason=""'): "0+60x40",
            _metric(REVIEWS, 'result="error",reason="inventory"'): "0+6x40"},
           {_metric(REVIEWS, 'result="patched",reason=""'): "0+60x40",
            _metric(REVIEWS, 'result="error",reason="inventory"'): "0+0x40"},
           {**GROUP, "severity": "warning"}),
    # 10 reviews in 110 above 1 s: p99 lands in +Inf, histogram_quantile answers 1 (>= 1).
    # Healthy: all of them under 0.5 s.
    *_pair("LayerLocalityReviewLatencyHigh", "30m",
           {_metric(LATENCY, 'le="0.5"'): "0+100x40", _metric(LATENCY, 'le="1.0"'): "0+100x40",
            _metric(LATENCY, 'le="+Inf"'): "0+110x40"},
           {_metric(LATENCY, 'le="0.5"'): "0+110x40", _metric(LATENCY, 'le="1.0"'): "0+110x40",
            _metric(LATENCY, 'le="+Inf"'): "0+110x40"},
           {**GROUP, "severity": "warning"}),
    # An inventory with no node for 30 minutes vs one with 8.
    *_pair("LayerLocalityInventoryNotReady", "30m",
           {_metric("layer_locality_inventory_nodes"): "0x40"},
           {_metric("layer_locality_inventory_nodes"): "8x40"},
           {**GROUP, "instance": "10.0.0.7:8443", "severity": "warning"}),
    # 30 misses per 60 reviews a minute (0.5 per review > 0.25, 900 in 30m > 10) for 60m;
    # healthy: 1 per 60.
    *_pair("LayerLocalityBudgetMissesClimbing", "65m",
           {_metric(MISSES): "0+30x70", _metric(REVIEWS, 'result="patched",reason=""'): "0+60x70"},
           {_metric(MISSES): "0+1x70", _metric(REVIEWS, 'result="patched",reason=""'): "0+60x70"},
           {**GROUP, "severity": "info"}),
    # A day at 50 top / 10 other binds a minute (83% followed), then 2 hours at 1 top / 50
    # other (2%): at 26h the hour's rate (2%) is under half the day's (~78%). Healthy: the
    # first pattern throughout.
    *_pair("LayerLocalityFollowedRateCollapsing", "1560m",
           {_metric(BINDS, 'outcome="top"'): "0+50x1440 72001+1x119",
            _metric(BINDS, 'outcome="other"'): "0+10x1440 14450+50x119"},
           {_metric(BINDS, 'outcome="top"'): "0+50x1560",
            _metric(BINDS, 'outcome="other"'): "0+10x1560"},
           {**GROUP, "severity": "info"}),
    # Five admission calls a minute refused and none reviewed for 30 minutes; healthy: the
    # same refusals (a stray caller) while the API server's calls are reviewed.
    *_pair("LayerLocalityCallersRefused", "30m",
           {_metric("layer_locality_callers_refused_total",
                    'endpoint="admission",reason="no_certificate"'): "0+5x40",
            _metric(REVIEWS, 'result="patched",reason=""'): "0+0x40"},
           {_metric("layer_locality_callers_refused_total",
                    'endpoint="admission",reason="no_certificate"'): "0+5x40",
            _metric(REVIEWS, 'result="patched",reason=""'): "0+60x40"},
           {**GROUP, "severity": "warning"}),
    # No target up for 15 minutes; healthy: up.
    *_pair("LayerLocalityDown", "15m",
           {_metric("up"): "0x20"}, {_metric("up"): "1x20"},
           {"namespace": "layer-locality", "severity": "warning"}),
]
