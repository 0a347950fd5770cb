"""The local cluster's pure parts: fake Node bodies and status, and the manifests adapted for
a webhook on the host (the rest runs on the real control plane: tests/integration)."""

from __future__ import annotations

import base64
import datetime as dt
import json
from importlib import resources
from typing import Any

from webhook.devcluster.install import LEFT_OUT_KINDS, for_host_webhook
from webhook.devcluster.nodes import (
    NOT_READY_TAINT,
    REQUIRED_LABELS,
    node_body,
    node_status,
    without_not_ready,
)


def demo_nodes() -> list[dict[str, Any]]:
    text = (resources.files("webhook") / "data" / "demo-nodes.json").read_text()
    items: list[dict[str, Any]] = json.loads(text)["items"]
    return items


def test_demo_nodes_carry_what_the_scheduler_reads() -> None:
    for item in demo_nodes():
        labels = item["metadata"]["labels"]
        assert all(label in labels for label in REQUIRED_LABELS), item["metadata"]["name"]
        status = item["status"]
        assert {"cpu", "memory", "pods"} <= set(status["allocatable"])
        assert {"type": "Ready", "status": "True", "reason": "KubeletReady"} in status["conditions"]
    zones = {i["metadata"]["labels"]["topology.kubernetes.io/zone"] for i in demo_nodes()}
    assert len(zones) == 3


def test_node_body_keeps_labels_and_scheduling_spec_and_fills_the_rest() -> None:
    item = {"metadata": {"name": "n1", "labels": {"team": "a"}},
            "spec": {"unschedulable": True, "providerID": "x",
                     "taints": [{"key": "gpu", "effect": "NoSchedule"}]},
            "status": {"nodeInfo": {"operatingSystem": "linux", "architecture": "arm64"}}}
    body = node_body(item)
    assert body["metadata"]["labels"] == {
        "team": "a", "kubernetes.io/hostname": "n1", "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "arm64", "topology.kubernetes.io/zone": "local-a"}
    assert body["spec"] == {"unschedulable": True,
                            "taints": [{"key": "gpu", "effect": "NoSchedule"}]}


def test_node_status_is_ready_with_resources_and_images() -> None:
    now = dt.datetime(2026, 11, 25, tzinfo=dt.UTC)
    image = {"names": ["docker.io/library/redis:7.0"], "sizeBytes": 42}
    item = {"metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "host-1"}},
            "status": {"allocatable": {"cpu": "2"}, "images": [image]}}
    status = node_status(item, now)
    ready = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready == [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                      "message": ready[0]["message"],
                      "lastHeartbeatTime": "2026-11-25T00:00:00Z",
                      "lastTransitionTime": "2026-11-25T00:00:00Z"}]
    assert status["allocatable"]["cpu"] == "2"
    assert status["capacity"]["cpu"] == "8"  # the default; allocatable never above it here
    assert status["allocatable"]["pods"] == status["capacity"]["pods"]
    assert status["images"] == [image]
    assert status["addresses"] == [{"type": "Hostname", "address": "host-1"}]


def test_only_the_not_ready_taint_is_removed() -> None:
    taints = [{"key": NOT_READY_TAINT, "effect": "NoSchedule"},
              {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    assert without_not_ready(taints) == [taints[1]]
    assert without_not_ready(None) == []


def test_for_host_webhook_swaps_only_the_client_config() -> None:
    hook = {"name": "pods.layer-locality.io", "failurePolicy": "Ignore", "timeoutSeconds": 2,
            "namespaceSelector": {"matchLabels": {"x": "y"}},
            "clientConfig": {"service": {"name": "layer-locality", "namespace": "n",
                                         "path": "/mutate"}}}
    exempt = {**hook, "name": "exempt.pods.layer-locality.io",
              "clientConfig": {"service": {"name": "layer-locality", "namespace": "n",
                                           "path": "/mutate/holdout-exempt"}}}
    documents = [
        {"kind": "Namespace", "metadata": {"name": "n"}},
        {"kind": "Deployment", "metadata": {"name": "layer-locality"}},
        {"kind": "DaemonSet", "metadata": {"name": "agent"}},
        {"kind": "MutatingWebhookConfiguration", "metadata": {"name": "w"},
         "webhooks": [hook, exempt]},
        None,
    ]
    out = for_host_webhook(documents, "https://127.0.0.1:9443", b"PEM")  # type: ignore[arg-type]
    assert [d["kind"] for d in out] == ["Namespace", "MutatingWebhookConfiguration"]
    assert not LEFT_OUT_KINDS & {d["kind"] for d in out}
    swapped, swapped_exempt = out[1]["webhooks"]
    bundle = base64.b64encode(b"PEM").decode()
    assert swapped == {**hook, "clientConfig": {"url": "https://127.0.0.1:9443/mutate",
                                                "caBundle": bundle}}
    assert swapped_exempt == {**exempt, "clientConfig": {
        "url": "https://127.0.0.1:9443/mutate/holdout-exempt", "caBundle": bundle}}
    assert documents[3]["webhooks"][0]["clientConfig"]["service"]  # type: ignore[index]
