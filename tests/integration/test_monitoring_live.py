"""A real Prometheus (Debian's `prometheus`) on 127.0.0.1 scrapes a real
`layer-locality serve --demo` process over HTTPS (verifying its CA) and a stand-in exporter of
the outcome series (see prometheus_fixture), and evaluates the component's rules:

* every dashboard panel and alert/recording expression runs through /api/v1/query without
  error; every panel returns data except the few that cannot in demo mode (EMPTY_IN_DEMO);
* every rule evaluates healthy and none fires on a healthy webhook;
* `layer-locality report` reads the webhook's /metrics (with its CA; without it the TLS check
  refuses), the stand-in page and Prometheus: figures equal what was sent and the batch
  worked out by hand;
* webhook.report.histogram.bucket_quantile equals Prometheus' histogram_quantile on the same
  buckets.

prometheus missing: fails under CI, skips elsewhere. Loopback only.
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.helpers import pod, review
from tests.integration.monitoring_component import (
    HOLDOUT_PANELS,
    dashboard,
    panel_expressions,
    panels,
    rule_expressions,
    write_rules,
)
from tests.integration.prometheus_fixture import (
    BATCH,
    GiB,
    OutcomeExporter,
    PrometheusServer,
    get_json,
    require_tool,
    start_prometheus,
)
from webhook.devcluster.processes import free_port
from webhook.report.histogram import bucket_quantile
from webhook.serving.certs import CertificateFiles

JOB = "layer-locality"  # as the ServiceMonitor names it: LayerLocalityDown selects on it
PATCHED, SKIPPED = 5, 3  # reviews sent
# Panels that return no data against `serve --demo`: nothing failed, no registry is used
# and no cluster is watched there. Every other panel must return data.
EMPTY_IN_DEMO = {"Review errors and refused requests per second",
                 "Watch restarts and relists, last hour",
                 "Registry requests per second by outcome",
                 "Registry lookup failures per minute by kind",
                 # No holdout in demo mode: tests/integration/test_cluster_holdout.py runs these
                 # on a real run's metrics.
                 *HOLDOUT_PANELS}


class Stack:
    def __init__(self, webhook: str, prometheus: PrometheusServer,
                 exporter: OutcomeExporter) -> None:
        self.webhook, self.prometheus, self.exporter = webhook, prometheus, exporter


def send_reviews(base: str, context: ssl.SSLContext, patched: int, skipped: int) -> None:
    """Pods the demo inventory patches, and pods labelled to be skipped."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=context))
    skip = {"labels": {"layer-locality.io/skip": "true"}}
    for i, metadata in enumerate([{}] * patched + [skip] * skipped):
        body = orjson.dumps(review(pod(["node:18-slim"], name=f"p{i}", metadata=metadata),
                                   uid=f"mon-{i}-{os.urandom(4).hex()}"))
        request = urllib.request.Request(f"{base}/mutate", data=body,
                                         headers={"Content-Type": "application/json"})
        with opener.open(request, timeout=10) as response:
            assert response.status == 200


@pytest.fixture(scope="module")
def stack(tls_files: CertificateFiles, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[Stack]:
    prometheus_binary = require_tool("prometheus")
    work = tmp_path_factory.mktemp("monitoring-live")
    rules_file = write_rules(work / "rules.yaml")
    port = free_port()
    with (work / "serve.log").open("wb") as log:
        serve = subprocess.Popen(
            [sys.executable, "-m", "webhook", "serve", "--demo", "--listen", f"127.0.0.1:{port}",
             "--tls-cert", str(tls_files.cert), "--tls-key", str(tls_files.key)],
            stdout=log, stderr=subprocess.STDOUT)
    exporter = OutcomeExporter()
    prometheus: PrometheusServer | None = None
    try:
        base = f"https://127.0.0.1:{port}"
        prometheus = start_prometheus(prometheus_binary, work / "prometheus", {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(rules_file)],
            "scrape_configs": [
                {"job_name": JOB, "scheme": "https",
                 "tls_config": {"ca_file": str(tls_files.ca_cert)},
                 "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]},
                {"job_name": "outcome-stand-in",
                 "static_configs": [{"targets": [f"127.0.0.1:{exporter.port}"]}]},
            ]})
        prometheus.wait_for(f'up{{job="{JOB}"}} == 1', "the webhook scraped over https")
        prometheus.wait_for('up{job="outcome-stand-in"} == 1', "the stand-in exporter")
        context = ssl.create_default_context(cafile=str(tls_files.ca_cert))
        # A counter's first sample is not an increase: one review of each result first, so
        # that the rest shows in increase() (what --prometheus reports).
        send_reviews(base, context, 1, 1)
        prometheus.wait_for("sum(layer_locality_reviews_total) == 2", "the first reviews")
        send_reviews(base, context, PATCHED - 1, SKIPPED - 1)
        prometheus.wait_for(f"sum(layer_locality_reviews_total) == {PATCHED + SKIPPED}",
                            "every review")
        prometheus.wait_for('count_over_time(layer_locality_reviews_total{result="patched"}[1d])'
                            " >= 10", "ten samples of the review counter")
        prometheus.wait_for("layer_locality:followed_ratio:rate1h", "the recording rules")
        yield Stack(base, prometheus, exporter)
    finally:
        if prometheus is not None:
            prometheus.stop()
        exporter.close()
        serve.terminate()
        serve.wait(timeout=30)


def test_every_panel_and_rule_expression_runs(stack: Stack) -> None:
    for name, expression in panel_expressions() + rule_expressions():
        answer = stack.prometheus.query(expression)
        assert answer["status"] == "success", f"{name}: {expression}: {answer.get('error')}"
    for panel in panels(dashboard()):  # a panel has data when one of its queries has
        if panel["type"] != "row" and panel["title"] not in EMPTY_IN_DEMO:
            assert any(stack.prometheus.vector(t["expr"]) for t in panel["targets"]), \
                f"{panel['title']}: no data"
    (nodes,) = stack.prometheus.vector("layer_locality_inventory_nodes")
    assert nodes["value"][1] == "8"  # the demo inventory


def test_rules_evaluate_and_nothing_fires_on_a_healthy_webhook(stack: Stack) -> None:
    for _ in range(300):
        groups = get_json(f"{stack.prometheus.url}/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if rules and all(r["health"] != "unknown" for r in rules):
            break
        time.sleep(0.1)
    assert len(rules) == len(rule_expressions())
    assert [(r["name"], r.get("lastError")) for r in rules if r["health"] != "ok"] == []
    assert get_json(f"{stack.prometheus.url}/api/v1/alerts")["data"]["alerts"] == []


def run_report(*args: str) -> Any:
    result = subprocess.run([sys.executable, "-m", "webhook", "report", *args],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    return orjson.loads(result.stdout) if "json" in args else result.stdout


def assert_outcome_figures(doc: Any) -> None:
    """One BATCH of the stand-in exporter, worked out by hand (every window holds whole
    batches in proportion, so these hold for any window)."""
    assert doc["follow"]["followed_rate"] == pytest.approx(0.8)  # (3 + 1) / 5
    present = doc["present"]
    # 0.2, 0.6, 0.8, 0.95 in the webhook's ratio buckets (0, 0.1, ..., 0.9, 0.95, 0.99, 1):
    # rank 2 falls in (0.5, 0.6], which holds rank 2 alone: 0.5 + 0.1 * 1 = 0.6
    assert present["at_bind_p50"] == pytest.approx(0.6)
    assert present["at_bind_mean"] == pytest.approx(2.55 / 4)
    assert present["pulls_present_share"] == pytest.approx({"patched": 0.75,
                                                            "not_patched": 0.25})
    pulls = doc["pull_seconds"]
    # patched 0.4, 0.8, 1.5, 3 in the pull buckets (0, .25, .5, 1, 2.5, 5, 10, 20, ...): rank 2
    # tops (0.5, 1]; rank 3.8 in (2.5, 5] holding rank 4: 2.5 + 2.5 * 0.8
    assert pulls["patched"] == pytest.approx({"p50": 1.0, "p95": 4.5})
    # not patched 2.5, 4, 7, 20: rank 2 tops (2.5, 5]; rank 3.8 in (10, 20]: 10 + 10 * 0.8
    assert pulls["not_patched"] == pytest.approx({"p50": 5.0, "p95": 18.0})


def test_report_from_the_webhook_metrics(stack: Stack, tls_files: CertificateFiles) -> None:
    url = f"{stack.webhook}/metrics"
    doc = run_report("--url", url, "--ca", str(tls_files.ca_cert), "--output", "json")
    reviews = doc["reviews"]
    assert reviews["counts"] == {"patched": PATCHED, "skipped": SKIPPED, "error": 0}
    assert reviews["error_share"] == 0
    assert 0 < reviews["p99_seconds"] <= 1
    assert doc["follow"]["followed_rate"] is None  # no cluster in demo mode: no bind
    assert doc["pull_seconds"]["patched"] == {"p50": None, "p95": None}
    table = run_report("--url", url, "--ca", str(tls_files.ca_cert))
    assert f"{PATCHED} / {SKIPPED} / 0" in table and "n/a" in table
    refused = subprocess.run([sys.executable, "-m", "webhook", "report", "--url", url],
                             capture_output=True, text=True, timeout=60, check=False)
    assert refused.returncode == 2 and "CERTIFICATE_VERIFY_FAILED" in refused.stderr


@pytest.mark.parametrize(("name", "verifies"), [
    ("layer-locality.layer-locality.svc", True),  # as through `kubectl port-forward`
    ("layer-locality.other-namespace.svc", False),
])
def test_report_verifies_the_server_name(stack: Stack, tls_files: CertificateFiles, name: str,
                                         verifies: bool) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "report", "--url", f"{stack.webhook}/metrics",
         "--ca", str(tls_files.ca_cert), "--server-name", name],
        capture_output=True, text=True, timeout=60, check=False)
    assert (result.returncode == 0) is verifies, result.stderr
    if not verifies:
        assert "Hostname mismatch" in result.stderr


def test_report_from_the_outcome_page(stack: Stack) -> None:
    doc = run_report("--url", stack.exporter.url, "--output", "json")
    assert_outcome_figures(doc)
    batches = doc["follow"]["binds"]["preferred"]  # one per batch
    assert doc["follow"]["binds"] == {"top": 3 * batches, "preferred": batches,
                                      "other": batches}
    assert doc["bytes_avoided"]["total"] == batches * GiB
    assert BATCH["bytes_avoided"] == GiB


def test_report_from_prometheus(stack: Stack) -> None:
    doc = run_report("--prometheus", stack.prometheus.url, "--window", "1d", "--output", "json")
    assert_outcome_figures(doc)
    # Reviews: Prometheus sees the increase after each counter's first sample (one review of
    # each result), extrapolated by at most 1.1 scrape intervals at either end of >= 9 s of
    # samples: between the count and 1.25 times it.
    counts = doc["reviews"]["counts"]
    assert PATCHED - 1 <= counts["patched"] <= 1.25 * (PATCHED - 1)
    assert SKIPPED - 1 <= counts["skipped"] <= 1.25 * (SKIPPED - 1)
    assert counts["error"] == 0 and doc["reviews"]["error_share"] == 0
    assert 0 < doc["reviews"]["p99_seconds"] <= 1
    # About one batch (1 GiB) per 1 s scrape, over the seconds Prometheus has data for.
    assert 0 < doc["span_seconds"] < 600
    assert 0.4 * 86400 * GiB < doc["bytes_avoided"]["per_day"] < 2.5 * 86400 * GiB


@pytest.mark.parametrize(("histogram", "q"), [
    ("layer_locality_review_duration_seconds_bucket", 0.5),
    ("layer_locality_review_duration_seconds_bucket", 0.99),
    ('layer_locality_image_pull_seconds_bucket{patched="false"}', 0.3),
    ('layer_locality_image_pull_seconds_bucket{patched="true"}', 0.95),
    ('layer_locality_image_pull_seconds_bucket{patched="true"}', 1.0),
])
def test_bucket_quantile_matches_prometheus(stack: Stack, histogram: str, q: float) -> None:
    """webhook.report.histogram.bucket_quantile against Prometheus' histogram_quantile on the same
    buckets (extrapolated increases, not round numbers), at one evaluation time."""
    at = time.time()
    buckets_expression = f"sum by (le) (increase({histogram}[1d]))"
    buckets = [(float(r["metric"]["le"]), float(r["value"][1]))
               for r in stack.prometheus.vector(buckets_expression, at)]
    (expected,) = stack.prometheus.vector(f"histogram_quantile({q}, {buckets_expression})", at)
    assert bucket_quantile(q, buckets) == pytest.approx(float(expected["value"][1]), rel=1e-9)
