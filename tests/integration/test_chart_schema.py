"""The Helm chart is clean and valid: `helm lint --strict` in every mode, values.schema.json
generated from the webhook's settings and refusing bad values, the chart's version and copied
files those of the project, and every mode's objects accepted by the Kubernetes schema.
(Split from test_chart.py: helm, rendering and the modes are in chart_fixture.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, latest_version

from tests.integration.chart_fixture import (
    CHART,
    MODES,
    NAMESPACE,
    REPO,
    run_helm,
    template,
    template_error,
)
from webhook import options

K8S_VERSION = latest_version()


@pytest.mark.parametrize("mode", MODES)
def test_helm_lint_is_clean(helm: Path, mode: str) -> None:
    args = ["lint", str(CHART), "--strict", "--namespace", NAMESPACE]
    for value in MODES[mode]:
        args += ["--set", value]
    result = run_helm(helm, args)
    assert "0 chart(s) failed" in result.stdout, result.stdout


def test_schema_is_generated_from_the_webhook_settings() -> None:
    result = subprocess.run([sys.executable, str(REPO / "hack" / "chart_schema.py"), "--check"],
                            capture_output=True, text=True, check=False, cwd=REPO)
    assert result.returncode == 0, result.stderr
    schema = json.loads((CHART / "values.schema.json").read_text())
    settings = schema["properties"]["settings"]["properties"]
    owned = {"listen", "tls_cert", "tls_key", "demo", "nodes", "kubeconfig", "replicas",
             "holdout", "holdout_seed", "registry_auth", "metrics_listen", "metrics_auth",
             "client_ca", "client_names"}
    assert set(settings) == {o.name for o in options.OPTIONS} - owned


def test_chart_version_and_files_follow_the_project() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert (chart["version"], chart["appVersion"]) == (version, version)
    copies = {"crd-nodelayers.yaml": "manifests/base/crd-nodelayers.yaml",
              "dashboard.json": "manifests/components/monitoring/dashboard.json",
              "prometheusrule.yaml": "manifests/components/monitoring/prometheusrule.yaml"}
    for name, source in copies.items():
        assert (CHART / "files" / name).read_bytes() == (REPO / source).read_bytes(), (
            f"charts/layer-locality/files/{name} differs from {source}: copy it again")


@pytest.mark.parametrize(("value", "why"), [
    ("settings.max_wieght=50", "max_wieght"),
    ("settings.log_level=verbose", "log_level"),
    ("settings.min_bytes=lots", "min_bytes"),
    ("settings.listen=0.0.0.0:9000", "listen"),
    ("webhook.failurePolicy=Fail", "failurePolicy"),
    ("webhook.timeoutSeconds=31", "timeoutSeconds"),
    ("webhook.url=https://127.0.0.1:8443/mutate", "url"),
    ("webhook.url=http://127.0.0.1:8443", "url"),
    ("holdout.fraction=1", "fraction"),
    ("certificates.mode=none", "mode"),
    ("replicas=0", "replicas"),
    ("clientAuth.enabled=true", "caBundle"),
    ("metrics.port=8443", "port"),
    ("metrics.authorization=open", "authorization"),
])
def test_schema_refuses_bad_values(helm: Path, value: str, why: str) -> None:
    assert why in template_error(helm, value)


def test_every_mode_renders_objects_the_kubernetes_schema_accepts(helm: Path) -> None:
    seen: set[str] = set()
    for sets in MODES.values():
        for obj in template(helm, *sets):
            seen.add(obj["kind"])
            try:
                kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
            except SchemaNotFoundError:
                # Custom resources: cert-manager's and the Prometheus Operator's kinds.
                assert obj["apiVersion"] in ("cert-manager.io/v1", "monitoring.coreos.com/v1")
            except kubernetes_validate.ValidationError as exc:  # pragma: no cover - on failure
                pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message} "
                            f"at {list(exc.path)}")
    assert {"Deployment", "MutatingWebhookConfiguration", "DaemonSet", "Certificate",
            "ServiceMonitor", "PrometheusRule", "ValidatingAdmissionPolicy"} <= seen
