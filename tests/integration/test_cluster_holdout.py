"""The holdout end to end on the real control plane.

1. The shipped configuration's exempt webhook: a namespace labelled
   layer-locality.io/holdout=exempt is steered while another opted-in namespace is held out
   (a small cluster whose webhook holds out nearly every workload).

2. The measurement, on the real scheduler: the evaluation's cluster (etcd, kube-apiserver,
kube-scheduler, kube-controller-manager, the kubelet stand-in pulling on fake nodes), two
webhook replicas with `--holdout 0.3`, a real Prometheus scraping both, and `layer-locality
report --prometheus` reading it back.

Checked: every pod of a Deployment is in its Deployment's group (the webhook's annotation);
the groups are labelled in the metrics (starts and kubelet pulls of both groups); and the
report's measured effects point the way the evaluation's own stock-vs-opted-in comparison does
on the same scenario (bytes pulled, pull time), none significantly the other way, and the share
of starts that pulled nothing is significantly higher with steering (the steadiest figure at
this size).

Power: 60 Deployments of 1 to 10 replicas (mean 5) arrive one after another (the steady
scenario, 22 s); 0.3 of them held out is 15 workloads in 14 cohorts with 41 pods, above the
report's floor of 30 pods in 8 cohorts per group (asserted before the run: the split is a
pure function of the names; the first pod of an image the webhook has not resolved yet is in
neither group, so the report's own "not enough data" is asserted too).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers import validate_pod, weight_by_hostname
from tests.integration.cluster_fixture import (
    COLD,
    DECISION,
    WARM,
    as_dict,
    kube_binaries,
    new_namespace,
    pod_manifest,
    start_cluster,
)
from tests.integration.monitoring_component import (
    HOLDOUT_PANELS,
    dashboard,
    panels,
    rule_groups,
    write_rules,
)
from tests.integration.prometheus_fixture import PrometheusServer, require_tool, start_prometheus
from webhook.core.holdout import HOLDOUT_LABEL, Group, HoldoutPolicy, cohort, workload_hash
from webhook.devcluster.cluster import LocalCluster
from webhook.evaluation.measure import measure
from webhook.evaluation.pulls import PullSettings
from webhook.evaluation.run import NAMESPACE, RunRecord, RunSettings, run_once
from webhook.evaluation.scenario import ScenarioConfig, generate
from webhook.report.figures import EFFECT_SETTINGS
from webhook.serving.wiring import demo_catalog

pytestmark = pytest.mark.controlplane

CONFIG = ScenarioConfig(kind="steady", seed=7, nodes=15, deployments=60, mean_replicas=5.0,
                        max_replicas=10, pod_gap=0.1)
POLICY = HoldoutPolicy(0.3, "e2e")
ARGS = ("--holdout", "0.3", "--holdout-seed", "e2e")


class Scraper:
    """Starts Prometheus on the run's webhooks (RunSettings.on_webhooks); stopped by the
    fixture."""

    def __init__(self, binary: str, work: Path) -> None:
        self.binary, self.work = binary, work
        self.server: PrometheusServer | None = None

    def __call__(self, urls: Sequence[str], ca: Path) -> None:
        targets = [url.removeprefix("https://") for url in urls]
        self.work.mkdir(parents=True, exist_ok=True)
        self.server = start_prometheus(self.binary, self.work, {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s",
                       "evaluation_interval": "1s"},
            "rule_files": [str(write_rules(self.work / "rules.yaml"))],
            "scrape_configs": [{"job_name": "layer-locality", "scheme": "https",
                                "tls_config": {"ca_file": str(ca)},
                                "static_configs": [{"targets": targets}]}]})
        self.server.wait_for('count(up{job="layer-locality"} == 1) == 2', "both replicas")


@pytest.fixture
def scraper(tmp_path: Path) -> Iterator[Scraper]:
    scraper = Scraper(require_tool("prometheus"), tmp_path / "prometheus")
    try:
        yield scraper
    finally:
        if scraper.server is not None:
            scraper.server.stop()


def deployment_of(owner: str) -> str:
    """`ReplicaSet/web-7d4b9c` -> `web`."""
    return owner.removeprefix("ReplicaSet/").rsplit("-", 1)[0]


def test_the_report_measures_what_the_evaluation_compares(tmp_path: Path,
                                                          scraper: Scraper) -> None:
    bin_dir = kube_binaries()
    catalog = demo_catalog()
    scenario = generate(CONFIG, catalog.images())
    # Power, before anything runs: the groups follow from the Deployment names.
    replicas = Counter[str]()
    for action in scenario.actions:
        if action.op in ("create", "scale"):
            replicas[action.deployment] = max(replicas[action.deployment], action.replicas)
    for wanted in (Group.STEERED, Group.HOLDOUT):
        names = [name for name in replicas
                 if POLICY.group(f"{NAMESPACE}/Deployment/{name}") is wanted]
        cohorts = {cohort(workload_hash(f"{NAMESPACE}/Deployment/{name}")) for name in names}
        assert len(cohorts) >= EFFECT_SETTINGS.min_cohorts, wanted
        assert sum(replicas[n] for n in names) >= EFFECT_SETTINGS.min_units, wanted

    stock = asyncio.run(run_once(bin_dir, scenario, catalog, "stock", 0, RunSettings(
        pulls=PullSettings(), work_dir=tmp_path, settle_timeout=90.0)))
    opted = asyncio.run(run_once(bin_dir, scenario, catalog, "webhook", 0, RunSettings(
        pulls=PullSettings(), webhook_args=ARGS, work_dir=tmp_path, settle_timeout=90.0,
        on_webhooks=scraper, linger_seconds=4.0)))
    for record in (stock, opted):
        assert record.settled and record.unscheduled == 0 and record.write_errors == 0
    evaluation = {mode: measure(record, scenario) for mode, record in
                  (("stock", stock), ("webhook", opted))}
    print(evaluation)

    assert_groups_follow_deployments(opted)
    assert scraper.server is not None
    prometheus = scraper.server
    # The webhooks are gone (their series stale): read the last values within the run.
    for group in ("steered", "holdout"):
        starts = prometheus.vector(
            f'max(max_over_time(layer_locality_holdout_starts_total{{group="{group}"}}[15m]))'
            " > 0")
        pulls = prometheus.vector(
            "max(sum by (instance) (max_over_time("
            f'layer_locality_image_pulls_total{{group="{group}"}}[15m]))) > 0')
        assert starts, group
        assert pulls, group

    # The dashboard's holdout panels and the recording rules' expressions, on this run's data:
    # each returns data, and the relative effects point the way the evaluation's do.
    holdout_panels = [p for p in panels(dashboard()) if p["title"] in HOLDOUT_PANELS]
    assert len(holdout_panels) == len(HOLDOUT_PANELS)
    for panel in holdout_panels:
        for target in panel["targets"]:
            values = [float(r["value"][1]) for r in prometheus.vector(target["expr"])]
            assert values, panel["title"]
            if panel["type"] == "stat":  # a relative effect
                assert all(v < 0 for v in values), (panel["title"], values)
    rules = {r["record"]: r["expr"] for g in rule_groups() for r in g["rules"]
             if r.get("record", "").startswith("layer_locality:holdout_")}
    assert rules
    for name, expression in rules.items():
        if name.endswith(":ratio1d"):
            by_group = {r["metric"]["group"] for r in prometheus.vector(expression)}
            assert by_group == {"steered", "holdout"}, name
        else:  # an effect, from the recorded ratios (the rules are loaded: see Scraper)
            values = [float(r["value"][1]) for r in prometheus.wait_for(name, name)]
            assert all(v < 0 for v in values), (name, values)

    reports = {output: subprocess.run(
        [sys.executable, "-m", "webhook", "report", "--prometheus", prometheus.url,
         "--window", "15m", "--output", output], capture_output=True, text=True, timeout=120,
        check=False) for output in ("json", "table")}
    for report in reports.values():
        assert report.returncode == 0, report.stderr
    print(reports["table"].stdout)  # shown with -s, or when the test fails
    effects = {e["metric"]: e for e in orjson.loads(reports["json"].stdout)["holdout"]["effects"]}
    bytes_change = evaluation["webhook"].bytes_pulled - evaluation["stock"].bytes_pulled
    pull_change = evaluation["webhook"].pull_mean - evaluation["stock"].pull_mean
    assert bytes_change < 0 and pull_change < 0, evaluation  # what the report must agree with
    for metric, change in (("bytes pulled per start", bytes_change),
                           ("image pull seconds per start", pull_change)):
        found = effects[metric]
        # The same direction as the evaluation's; never a significant contradiction. Whether
        # the interval excludes 0 varies at this size: 14 held-out workloads, a few heavy
        # ones (bytes: [-165, -9] MiB in one run, [-176, +4] in another).
        assert found["verdict"] in ("lower", "no clear difference"), found
        assert found["difference"] is not None and (found["difference"] < 0) == (change < 0)
    # Starts that pulled nothing: the steadiest figure here (+44 and +46 points, intervals
    # from +21 and +27 in two runs): it must be significant, in the right direction.
    warm = effects["starts that pulled nothing"]
    assert warm["verdict"] == "higher", warm
    assert evaluation["webhook"].no_pull > evaluation["stock"].no_pull


def assert_groups_follow_deployments(record: RunRecord) -> None:
    """Every pod of one Deployment carries its Deployment's group (from its annotation, as
    the observer saw it), and both groups occur."""
    groups: dict[str, set[str]] = {}
    for pod in record.pods.values():
        if pod.owner:
            group = str((pod.decision or {}).get("group", ""))
            groups.setdefault(deployment_of(pod.owner), set()).add(group)
    seen: set[str] = set()
    for name, found in groups.items():
        assert len(found) == 1, (name, found)
        expected = POLICY.group(f"{NAMESPACE}/Deployment/{name}").value
        # A pod the webhook would not steer carries no group (below the floor): the rest agree.
        assert found <= {expected, ""}, (name, found, expected)
        seen |= found
    assert {"steered", "holdout"} <= seen


@pytest.fixture
def holdout_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """The session cluster's nodes and catalog, its webhook holding out nearly every
    workload; stopped by pid when the test ends, whatever happened."""
    cluster = start_cluster(tmp_path / "cluster",
                            ["--holdout", "0.999", "--holdout-seed", "exempt-test"])
    try:
        yield cluster
    finally:
        cluster.down()


def test_an_exempt_namespace_is_always_steered(holdout_cluster: LocalCluster) -> None:
    """The shipped configuration's two webhooks, as the real API server picks between them:
    an opted-in namespace goes to /mutate (held out here), one also labelled
    layer-locality.io/holdout=exempt to /mutate/holdout-exempt (steered, no group)."""
    from kubernetes import client

    plain = new_namespace(holdout_cluster, opted_in=True, prefix="held")
    exempt = new_namespace(holdout_cluster, opted_in=True, prefix="exempt")
    with holdout_cluster.api_client() as api:
        core: Any = client.CoreV1Api(api)
        core.patch_namespace(exempt, {"metadata": {"labels": {HOLDOUT_LABEL: "exempt"}}})
        pods = {}
        for namespace in (plain, exempt):
            created = core.create_namespaced_pod(namespace, pod_manifest("app"))
            pods[namespace] = as_dict(api, created)
    held, steered = pods[plain], pods[exempt]
    for pod in (held, steered):
        validate_pod(pod)
    held_decision = json.loads(held["metadata"]["annotations"][DECISION])
    assert held_decision["group"] == "holdout" and "affinity" not in held["spec"]
    assert held_decision["top"][0]["node"] in WARM  # what it would have preferred
    steered_decision = json.loads(steered["metadata"]["annotations"][DECISION])
    assert "group" not in steered_decision
    weights = weight_by_hostname(steered, (*WARM, *COLD))
    assert min(weights[n] for n in WARM) > max(weights[n] for n in COLD), weights
