"""Fake Nodes: Node objects that the real scheduler can place pods on, with no kubelet behind
them (as Kubernetes' scheduler_perf does).

A node is created from a NodeList item (the demo inventory or a test's), its status written
through the status subresource (Ready, capacity, allocatable, nodeInfo, images), and the
`node.kubernetes.io/not-ready:NoSchedule` taint that the TaintNodesByCondition admission plugin
puts on every new Node removed, since no node lifecycle controller will (it is disabled: with no
heartbeat it would taint every node unreachable)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
DEFAULT_CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
# The labels the scheduler and the default spreading read; a node that lacks one gets it.
REQUIRED_LABELS = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
                   "topology.kubernetes.io/zone")
KUBELET_VERSION = "v1.37.2"


def node_body(item: Mapping[str, Any]) -> dict[str, Any]:
    """What POST /api/v1/nodes takes: metadata (name, labels, annotations) and spec."""
    meta = item.get("metadata") or {}
    name = meta["name"]
    labels = dict(meta.get("labels") or {})
    info = (item.get("status") or {}).get("nodeInfo") or {}
    labels.setdefault("kubernetes.io/hostname", name)
    labels.setdefault("kubernetes.io/os", info.get("operatingSystem", "linux"))
    labels.setdefault("kubernetes.io/arch", info.get("architecture", "amd64"))
    labels.setdefault("topology.kubernetes.io/zone", "local-a")
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": labels}}
    if meta.get("annotations"):
        body["metadata"]["annotations"] = dict(meta["annotations"])
    spec = {k: v for k, v in (item.get("spec") or {}).items()
            if k in ("taints", "unschedulable", "podCIDR")}
    if spec:
        body["spec"] = spec
    return body


def node_status(item: Mapping[str, Any], now: dt.datetime | None = None) -> dict[str, Any]:
    """The status a kubelet would report: the item's own fields, defaults for what it lacks,
    and a fresh Ready condition."""
    now = now or dt.datetime.now(dt.UTC)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    given = dict(item.get("status") or {})
    labels = (item.get("metadata") or {}).get("labels") or {}
    capacity = {**DEFAULT_CAPACITY, **(given.get("capacity") or {})}
    allocatable = {**capacity, **(given.get("allocatable") or {})}
    info = {
        "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
        "osImage": "fake node (layer-locality devcluster)",
        "containerRuntimeVersion": "containerd://fake", "kubeletVersion": KUBELET_VERSION,
        "kubeProxyVersion": "",
        "operatingSystem": labels.get("kubernetes.io/os", "linux"),
        "architecture": labels.get("kubernetes.io/arch", "amd64"),
        **(given.get("nodeInfo") or {}),
    }
    conditions = [
        {"type": kind, "status": "False", "reason": f"KubeletHas{reason}",
         "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
        for kind, reason in (("MemoryPressure", "SufficientMemory"),
                             ("DiskPressure", "NoDiskPressure"), ("PIDPressure", "SufficientPID"))
    ]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                       "message": "fake node: no kubelet, status set by layer-locality",
                       "lastHeartbeatTime": stamp, "lastTransitionTime": stamp})
    status: dict[str, Any] = {
        "capacity": capacity, "allocatable": allocatable, "nodeInfo": info,
        "conditions": conditions,
        "addresses": [{"type": "Hostname",
                       "address": labels.get("kubernetes.io/hostname",
                                             (item.get("metadata") or {})["name"])}],
        "images": list(given.get("images") or []),
    }
    return status


def without_not_ready(taints: Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    return [dict(t) for t in taints or () if t.get("key") != NOT_READY_TAINT]


def create_nodes(core: Any, items: Iterable[Mapping[str, Any]]) -> list[str]:
    """Create each node, write its status, remove the not-ready taint; returns the names.
    `core` is a kubernetes.client.CoreV1Api."""
    names = []
    for item in items:
        body = node_body(item)
        name = body["metadata"]["name"]
        core.create_node(body)
        core.patch_node_status(name, {"status": node_status(item)})
        set_taints(core, name, without_not_ready(_taints(core, name)))
        names.append(name)
    return names


def set_taints(core: Any, name: str, taints: list[dict[str, Any]]) -> None:
    # Node.spec.taints has no merge key: a strategic merge patch replaces the whole list.
    core.patch_node(name, {"spec": {"taints": taints or None}})


def _taints(core: Any, name: str) -> list[dict[str, Any]]:
    node = core.api_client.sanitize_for_serialization(core.read_node(name))
    taints: list[dict[str, Any]] = node.get("spec", {}).get("taints") or []
    return taints
