"""The Helm chart and the kustomize manifests cannot drift: with the defaults (plus the node
agent and monitoring switched on) the chart renders the same objects as manifests/base with
both components, compared field by field after removing only what each tool adds of its own
(its labels, kustomize's name hashes, Helm's checksum annotation and generated certificate).
The checks of test_manifests_*.py on the kustomize output therefore hold for the chart too;
the cert-manager mode renders the overlay's objects.
(Split from test_chart.py: helm, rendering and the modes are in chart_fixture.py.)"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import yaml

from tests.integration.chart_fixture import (
    MODES,
    NAMESPACE,
    RELEASE,
    REPO,
    Obj,
    kinds,
    template,
)
from webhook.devcluster.install import render as kustomize_render

# Labels only one of the two tools writes.
TOOL_LABELS = frozenset({"app.kubernetes.io/managed-by", "app.kubernetes.io/part-of",
                         "app.kubernetes.io/instance", "app.kubernetes.io/version",
                         "helm.sh/chart"})
CONFIG_HASH = re.compile(r"(layer-locality-config)-[a-z0-9]{10}\b")


# ---- the chart and the kustomize manifests render the same objects -------------------------

def normalised(obj: Obj) -> Obj:
    """What both tools must agree on: without the labels and annotations one of them adds,
    kustomize's ConfigMap name hash, and the caBundle (Helm's is generated)."""
    out: Obj = json.loads(CONFIG_HASH.sub(r"\1", json.dumps(obj)))
    for meta in _metadata(out):
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in TOOL_LABELS}
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                       if not k.startswith("checksum/") and k != "helm.sh/resource-policy"}
        meta.pop("labels", None)
        meta.pop("annotations", None)
        if labels:
            meta["labels"] = labels
        if annotations:
            meta["annotations"] = annotations
    for hook in out.get("webhooks", []):
        hook["clientConfig"].pop("caBundle", None)
    data = out.get("data") or {}
    if out["kind"] == "ConfigMap":
        for key, text in data.items():
            data[key] = json.loads(text) if key.endswith(".json") else yaml.safe_load(text)
    return out


def _metadata(obj: Obj) -> Iterator[Obj]:
    yield obj.setdefault("metadata", {})
    template = (obj.get("spec") or {}).get("template")
    if isinstance(template, dict) and "metadata" in template:
        yield template["metadata"]


def keyed(objects: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    out = {}
    for obj in objects:
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace", ""), CONFIG_HASH.sub(r"\1", meta["name"]))
        assert key not in out, f"rendered twice: {key}"
        out[key] = normalised(obj)
    return out


def test_chart_renders_what_the_kustomize_manifests_render(helm: Path, kube_bin: Path) -> None:
    chart = keyed(template(helm, *MODES["agent-monitoring"]))
    manifests = keyed([d for d in yaml.safe_load_all(kustomize_render(
        kube_bin / "kubectl", REPO / "manifests", ("node-agent", "monitoring"))) if d])
    # Each tool's own: the release namespace is Helm's (`--create-namespace`, or made by the
    # operator), while the kustomize base creates it; the chart generates the TLS Secrets
    # that the kustomize overlays add.
    only_manifests = {("Namespace", "", NAMESPACE)}
    only_chart = {("Secret", NAMESPACE, "layer-locality-ca"),
                  ("Secret", NAMESPACE, "layer-locality-tls")}
    assert set(manifests) - set(chart) == only_manifests
    assert set(chart) - set(manifests) == only_chart
    for key in sorted(set(chart) & set(manifests)):
        assert chart[key] == manifests[key], f"{key} differs between the chart and manifests/"


def test_cert_manager_mode_renders_the_overlay_objects(helm: Path, kube_bin: Path) -> None:
    rendered = subprocess.run([str(kube_bin / "kubectl"), "kustomize",
                               str(REPO / "manifests" / "overlays" / "cert-manager")],
                              capture_output=True, text=True, check=True).stdout
    overlay = keyed([d for d in yaml.safe_load_all(rendered) if d])
    chart = keyed(template(helm, *MODES["cert-manager"]))
    cert_manager = {k for k in overlay if k[0] in ("Issuer", "Certificate")}
    assert len(cert_manager) == 4
    for key in cert_manager:
        assert chart[key] == overlay[key], key
    hooks_key = ("MutatingWebhookConfiguration", "", RELEASE)
    assert chart[hooks_key] == overlay[hooks_key]  # the inject-ca-from annotation included
    assert not any(k[0] == "Secret" for k in chart)


def test_cert_manager_with_an_issuer_of_the_operators(helm: Path) -> None:
    objects = template(helm, *MODES["cert-manager-issuer"])
    (certificate,) = [o for o in objects if o["kind"] == "Certificate"]
    assert certificate["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}
    assert "Issuer" not in kinds(objects)
