"""The local cluster's pure parts: fake Node bodies and status, and the manifests adapted for
a webhook on the host (the rest runs on the real control plane: tests/integration)."""

from __future__ import annotations

import base64
import datetime as dt
import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.devcluster.cluster import load_node_items
from webhook.devcluster.install import LEFT_OUT_KINDS, for_host_webhook
from webhook.devcluster.nodes import (
    NOT_READY_TAINT,
    REQUIRED_LABELS,
    node_body,
    node_status,
    parse_node_list,
    without_not_ready,
)
from webhook.devcluster.processes import ClusterError


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


def test_a_node_list_reads_the_same_from_json_and_yaml(tmp_path: Path) -> None:
    document = {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": demo_nodes()}
    as_json = tmp_path / "nodes.json"
    as_json.write_text(json.dumps(document, indent=1))
    as_yaml = tmp_path / "nodes.yaml"
    as_yaml.write_text(yaml.safe_dump(document))
    assert load_node_items(as_json) == load_node_items(as_yaml) == demo_nodes()
    # kubectl get nodes -o yaml writes kind List; a list with no kind is taken as well.
    for kind in ("List", None):
        listed = {"kind": kind, "items": demo_nodes()[:1]} if kind else {"items": []}
        assert parse_node_list(yaml.safe_dump(listed).encode(), "x") == listed["items"]


def test_yaml_is_read_without_libyaml_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delattr(yaml, "CSafeLoader", raising=False)
    text = "kind: NodeList\nitems:\n- metadata: {name: n1}\n"
    assert parse_node_list(text.encode(), "x") == [{"metadata": {"name": "n1"}}]


@pytest.mark.parametrize(("text", "message"), [
    ("", "nodes.yaml: empty; expected a NodeList (kind NodeList or List, with items)"),
    ("- a\n- b\n", "nodes.yaml: not a NodeList but a list; expected a NodeList"),
    ("kind: Pod\nmetadata: {name: p}\n", "nodes.yaml: not a NodeList (kind Pod); expected"),
    ("kind: Node\nmetadata: {name: n}\n", "nodes.yaml: one Node, not a NodeList; expected"),
    ("kind: NodeList\n", "nodes.yaml: a NodeList with no list of items; expected"),
    ("apiVersion: v1\n", "nodes.yaml: an object with no list of items; expected"),
    ("kind: List\nitems: [{kind: Pod, metadata: {name: p}}]\n",
     "nodes.yaml: items[0] is a Pod, not a Node"),
    ("kind: NodeList\nitems: [{metadata: {name: a}}, 3]\n",
     "nodes.yaml: items[1] is a number, not a Node"),
    ("kind: NodeList\nitems: [{metadata: {labels: {}}}]\n",
     "nodes.yaml: items[0] has no metadata.name"),
    ("kind: NodeList\nitems: [{metadata: {name: a}}, {metadata: {name: b}}, "
     "{metadata: {name: a}}]\n", "nodes.yaml: node a twice (items[0] and items[2])"),
    ("kind: NodeList\nitems: [\n  {metadata: {name: a}\n", "nodes.yaml: not YAML/JSON (line "),
    ('{"kind": "NodeList", "items": [}', "nodes.yaml: not YAML/JSON (line 1, column 32)"),
    ("kind: NodeList\nitems: []\n---\nkind: Pod\n",
     "nodes.yaml: 2 YAML documents (NodeList, Pod); expected one NodeList"),
])
def test_what_is_not_a_node_list_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text(text)
    with pytest.raises(ClusterError) as caught:
        load_node_items(path)
    assert str(caught.value).startswith(f"{tmp_path}/{message}"), str(caught.value)


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


def test_the_scheduler_gets_a_config_only_when_a_percentage_is_set(tmp_path: Path) -> None:
    from webhook.devcluster.controlplane import SCORE_PERCENTAGE, ControlPlane, choose_ports

    (tmp_path / "kube-scheduler").touch()
    plane = ControlPlane(tmp_path, tmp_path, choose_ports(None))
    argv, _, _ = plane._command("kube-scheduler")
    assert not any(a.startswith("--config=") for a in argv)
    plane.extra[SCORE_PERCENTAGE] = "100"
    argv, _, _ = plane._command("kube-scheduler")
    config = [a.removeprefix("--config=") for a in argv if a.startswith("--config=")]
    assert len(config) == 1
    document = yaml.safe_load(Path(config[0]).read_text())
    assert document["kind"] == "KubeSchedulerConfiguration"
    assert document["percentageOfNodesToScore"] == 100
    # With --config the scheduler ignores --kubeconfig: the file must name it.
    assert document["clientConnection"]["kubeconfig"] == str(plane.kubeconfig)


def test_a_client_qps_lifts_the_controller_managers_and_the_schedulers_limits(
        tmp_path: Path) -> None:
    from webhook.devcluster.controlplane import CLIENT_QPS, ControlPlane, choose_ports

    for name in ("kube-scheduler", "kube-controller-manager"):
        (tmp_path / name).touch()
    plane = ControlPlane(tmp_path, tmp_path, choose_ports(None))
    argv, _, _ = plane._command("kube-controller-manager")
    assert not any(a.startswith("--kube-api-") for a in argv)
    plane.extra[CLIENT_QPS] = "100"
    argv, _, _ = plane._command("kube-controller-manager")
    assert {"--kube-api-qps=100", "--kube-api-burst=200"} <= set(argv)
    argv, _, _ = plane._command("kube-scheduler")
    config = [a.removeprefix("--config=") for a in argv if a.startswith("--config=")]
    document = yaml.safe_load(Path(config[0]).read_text())
    assert document["clientConnection"] == {"kubeconfig": str(plane.kubeconfig), "qps": 100.0,
                                            "burst": 200}
    assert "percentageOfNodesToScore" not in document  # the scheduler's own default


def test_fake_nodes_only_leave_taint_nodes_by_condition_out(tmp_path: Path) -> None:
    from webhook.devcluster.controlplane import REAL_NODES, ControlPlane, choose_ports

    (tmp_path / "kube-apiserver").touch()
    plane = ControlPlane(tmp_path, tmp_path, choose_ports(None))
    argv, _, _ = plane._command("kube-apiserver")
    assert "--disable-admission-plugins=TaintNodesByCondition" in argv
    plane.extra[REAL_NODES] = "[]x"  # any non-empty value marks real nodes
    argv, _, _ = plane._command("kube-apiserver")
    assert not any(a.startswith("--disable-admission-plugins") for a in argv)
