"""The Helm chart (charts/layer-locality) under test, rendered by the pinned helm
(hack/helm/build.sh): the session's `helm` and `kube_bin` fixtures (registered in conftest.py),
`helm template` with values, and the modes the chart is checked in. Shared by test_chart_*.py.

Without helm (no Go toolchain, a failed build) these tests skip with the reason, or fail under
CI.
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.cluster_fixture import helm_binary, kube_binaries

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "layer-locality"
RELEASE = NAMESPACE = "layer-locality"

Obj = dict[str, Any]


@pytest.fixture(scope="session")
def helm() -> Path:
    return helm_binary()


@pytest.fixture(scope="session")
def kube_bin() -> Path:
    return kube_binaries()


def run_helm(helm: Path, args: Sequence[str],
             check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(helm), *args], capture_output=True, text=True, check=False)
    if check:
        assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"
    return result


def template(helm: Path, *sets: str, files: Sequence[str] = ()) -> list[Obj]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for value in sets:
        args += ["--set", value]
    for value in files:
        args += ["--set-file", value]
    return [d for d in yaml.safe_load_all(run_helm(helm, args).stdout) if d]


def template_error(helm: Path, *sets: str) -> str:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for value in sets:
        args += ["--set", value]
    result = run_helm(helm, args, check=False)
    assert result.returncode != 0, f"helm template {' '.join(sets)} was accepted"
    return result.stderr


def only(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objects
             if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def kinds(objects: list[Obj]) -> set[str]:
    return {o["kind"] for o in objects}


# The chart's modes: linted, validated, and compared with the kustomize manifests.
MODES = {
    "defaults": [],
    "cert-manager": ["certificates.mode=cert-manager"],
    "cert-manager-issuer": ["certificates.mode=cert-manager",
                            "certificates.certManager.issuerRef.kind=ClusterIssuer",
                            "certificates.certManager.issuerRef.name=corp-ca"],
    "agent-monitoring": ["agent.enabled=true", "monitoring.serviceMonitor.enabled=true",
                         "monitoring.prometheusRule.enabled=true",
                         "monitoring.dashboard.enabled=true"],
}
