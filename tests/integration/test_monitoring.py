"""The monitoring component (manifests/components/monitoring) against real parts (the live
Prometheus and `layer-locality report` are in test_monitoring_live.py):

* kustomize (`kubectl kustomize`) renders both overlays with the component added, as a user
  does (`components: [../../components/monitoring]`); the ServiceMonitor must reach the
  rendered Service, port and CA Secret (the self-signed one carries a hash suffix);
* `promtool check rules` on the PrometheusRule's groups, and `promtool test rules` with series
  written by hand: each alert fires on a failure and stays quiet on a healthy series;
* the Makefile installs Debian's prometheus like docker-registry and stops its services.

prometheus, promtool or kubectl missing: these tests fail under CI and skip elsewhere.
Loopback only.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
import yaml
from cryptography import x509

from tests.helpers import fail_or_skip, require_program
from tests.integration.manifests_fixture import MANIFESTS, REPO, only, selector_matches
from tests.integration.monitoring_component import (
    ALERT_CASES,
    COMPONENT,
    CONTRACT,
    REQUIRED_ALERTS,
    Obj,
    dashboard,
    panel_expressions,
    panels,
    rule_expressions,
    rule_groups,
    write_rules,
)
from tests.integration.prometheus_fixture import require_tool

JOB = "layer-locality"  # the Service name, the job label the ServiceMonitor gives the series


# --------------------------------------------------------------------------------------------
# rendering


@pytest.fixture(scope="module")
def kubectl() -> str:
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    path = os.environ.get("KUBECTL") or shutil.which("kubectl", path=search)
    if path is None:
        message = "kubectl (kustomize) is not installed; `make system-deps` installs it"
        fail_or_skip(message)
    return path


@pytest.fixture(scope="module")
def rendered(kubectl: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Obj]]:
    """Both overlays with and without the component, from a copy of manifests/ prepared as
    docs/deploy.md says (certificates, render-ca-patch.sh)."""
    root = tmp_path_factory.mktemp("monitoring-manifests")
    certs = root / "certs"
    subprocess.run([sys.executable, "-m", "webhook", "certs", "--out", str(certs)], check=True,
                   capture_output=True)
    shutil.copytree(MANIFESTS, root / "manifests", ignore=shutil.ignore_patterns("generated"))
    subprocess.run(["bash", str(REPO / "scripts" / "render-ca-patch.sh"), str(certs),
                    str(root / "manifests" / "overlays" / "self-signed")],
                   check=True, capture_output=True)
    out: dict[str, list[Obj]] = {}
    for overlay in ("self-signed", "cert-manager"):
        plain = root / "manifests" / "overlays" / overlay
        monitored = root / "manifests" / "overlays" / f"{overlay}-monitored"
        monitored.mkdir()
        (monitored / "kustomization.yaml").write_text(yaml.safe_dump({
            "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
            "resources": [f"../{overlay}"], "components": ["../../components/monitoring"]}))
        for name, path in ((overlay, plain), (f"{overlay}+monitoring", monitored)):
            result = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True,
                                    text=True, check=False)
            assert result.returncode == 0, f"kustomize {name}:\n{result.stderr}"
            out[name] = [d for d in yaml.safe_load_all(result.stdout) if d]
    return out


def test_component_is_a_kustomize_component() -> None:
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    assert kustomization["apiVersion"] == "kustomize.config.k8s.io/v1alpha1"
    assert kustomization["kind"] == "Component"


@pytest.mark.parametrize("overlay", ["self-signed", "cert-manager"])
def test_component_adds_monitoring_to_the_overlay(rendered: dict[str, list[Obj]],
                                                  overlay: str) -> None:
    plain, monitored = rendered[overlay], rendered[f"{overlay}+monitoring"]
    added = [o for o in monitored if o not in plain]
    assert sorted(o["kind"] for o in added) == ["ConfigMap", "PrometheusRule", "ServiceMonitor"]
    assert [o for o in plain if o not in monitored] == [], "the component changes nothing else"

    service = only(monitored, "Service", "layer-locality")
    monitor = only(monitored, "ServiceMonitor")
    spec = monitor["spec"]
    assert monitor["metadata"]["namespace"] == service["metadata"]["namespace"]
    assert service["metadata"]["namespace"] in spec["namespaceSelector"]["matchNames"]
    assert selector_matches(spec["selector"], service["metadata"]["labels"])
    assert service["metadata"]["labels"][spec["jobLabel"]] == JOB
    (endpoint,) = spec["endpoints"]
    assert endpoint["port"] in [p["name"] for p in service["spec"]["ports"]]
    assert (endpoint["scheme"], endpoint["path"]) == ("https", "/metrics")
    ca = endpoint["tlsConfig"]["ca"]["secret"]
    server_name = endpoint["tlsConfig"]["serverName"]
    if overlay == "self-signed":  # the generated Secret, hash suffix included
        secret = only(monitored, "Secret", ca["name"])
        assert ca["key"] in secret["data"]
        cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        assert server_name in names.value.get_values_for_type(x509.DNSName)
    else:  # cert-manager writes ca.crt into the Certificate's Secret
        certificate = only(monitored, "Certificate", "layer-locality-serving")
        assert ca == {"name": certificate["spec"]["secretName"], "key": "ca.crt"}
        assert server_name in certificate["spec"]["dnsNames"]
    deployment = only(monitored, "Deployment", "layer-locality")
    mounted = [v["secret"]["secretName"] for v in deployment["spec"]["template"]["spec"]["volumes"]
               if v["name"] == "tls"]
    assert mounted == [ca["name"]], "the CA comes from the Secret the pods serve with"

    config_map = only(monitored, "ConfigMap", "layer-locality-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    (data,) = config_map["data"].values()
    assert orjson.loads(data) == dashboard()
    rule = only(monitored, "PrometheusRule")
    assert rule["spec"]["groups"] == rule_groups()


def test_dashboard_panels() -> None:
    doc = dashboard()
    ids = [p["id"] for p in panels(doc)]
    assert len(ids) == len(set(ids))
    assert doc["uid"] and doc["templating"]["list"][0]["type"] == "datasource"
    for panel in panels(doc):
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["targets"] and panel["description"], panel["title"]
            assert panel["datasource"]["uid"] == "${datasource}"
    titles = " ".join(p["title"] for p in panels(doc)).lower()
    for needed in ("followed rate", "binds", "present", "pull time", "bytes avoided",
                   "reviews per second", "latency", "errors", "inventory nodes",
                   "budget misses", "connections"):
        assert needed in titles, needed


def test_expressions_name_only_contract_metrics() -> None:
    """A typo in a metric name would leave a panel or an alert silently empty."""
    recorded = {r["record"] for g in rule_groups() for r in g["rules"] if "record" in r}
    for name, expression in panel_expressions() + rule_expressions():
        for metric in re.findall(r"layer_locality[\w:]*", expression):
            assert metric in CONTRACT | recorded, f"{name}: {metric} is not a contract metric"


# --------------------------------------------------------------------------------------------
# promtool


def test_rules_pass_promtool_check(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    rules_file = write_rules(tmp_path / "rules.yaml")
    result = subprocess.run([promtool, "check", "rules", str(rules_file)], capture_output=True,
                            text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    alerts = {r["alert"] for g in rule_groups() for r in g["rules"] if "alert" in r}
    assert alerts >= REQUIRED_ALERTS


def test_alerts_fire_on_failures_only(tmp_path: Path) -> None:
    """`promtool test rules`: for each alert, a failing series fires it, a healthy one not.
    promtool compares annotations too; they are templates checked by `check rules`, so the
    copy under test drops them and the cases state labels only."""
    promtool = require_tool("promtool")
    groups = [{**g, "rules": [{k: v for k, v in r.items() if k != "annotations"}
                              for r in g["rules"]]} for g in rule_groups()]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    tested = {case["alert_rule_test"][0]["alertname"] for case in ALERT_CASES}
    assert tested == {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": ALERT_CASES}))
    result = subprocess.run([promtool, "test", "rules", "tests.yaml"], cwd=tmp_path,
                            capture_output=True, text=True, check=False, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_makefile_installs_prometheus_and_stops_its_services(tmp_path: Path) -> None:
    """Dry run with nothing on PATH: every package counts as missing."""
    make = require_program("make", "the Makefile's system-deps step is read with make -n")
    result = subprocess.run([make, "--no-print-directory", "-n", "system-deps"], cwd=REPO,
                            env={"PATH": str(tmp_path)}, capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    (install,) = [line for line in result.stdout.splitlines() if "apt-get install" in line]
    assert "--no-install-recommends" in install
    packages = ["docker-registry", "prometheus", "containerd", "mmdebstrap", "umoci", "skopeo",
                "runc", "iptables", "busybox-static"]
    assert install.split()[-len(packages):] == packages
    assert ("for service in docker-registry prometheus prometheus-node-exporter containerd "
            "mmdebstrap umoci skopeo runc iptables busybox-static;" in result.stdout)
