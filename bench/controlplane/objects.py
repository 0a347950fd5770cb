"""The objects bench.controlplane creates (pure): its nodes as a NodeList's items, the running
pods bound to them, the rounds' Deployments (and their baked form), and the flow schemas that
make APF count the product's requests by identity."""

from __future__ import annotations

import random
from typing import Any

from tests.kit import workload


def node_items(world: workload.World, nodes: int) -> list[dict[str, Any]]:
    """The bench's nodes as a NodeList's items, addresses moved to the benchmark range
    (198.18.0.0/15): fake nodes receive no traffic, but no object here names a private
    address."""
    items: list[dict[str, Any]] = []
    for item in workload.node_objects(world, nodes):
        i = len(items)
        item["spec"].pop("podCIDR", None)
        item["status"]["addresses"] = [
            {"type": "InternalIP", "address": f"198.18.{i >> 8 & 255}.{i & 255}"},
            {"type": "Hostname", "address": item["metadata"]["name"]}]
        for key in ("uid", "resourceVersion"):
            item["metadata"].pop(key, None)
        items.append(item)
    return items


def running_pod(k: int, node: dict[str, Any]) -> dict[str, Any]:
    """Pod k bound to `node`, running two of the images the node holds (no owner: the garbage
    collector would delete pods of a ReplicaSet that does not exist)."""
    images = [image["names"][1] for image in node["status"]["images"][k % 7: k % 7 + 2]]
    body = workload.pod(f"run-{k}", images)
    body["metadata"]["namespace"] = "running"
    body["metadata"]["labels"] = {"app": f"run-{k % 500}"}
    body["spec"]["nodeName"] = node["metadata"]["name"]
    for c in body["spec"]["containers"]:
        c["resources"]["requests"] = {"cpu": "10m", "memory": "16Mi"}
    return body


def deployment(world: workload.World, k: int, replicas: int) -> dict[str, Any]:
    """Deployment k: an application image plus a real base as a sidecar (as users write)."""
    rng = random.Random(k)
    app = world.apps[rng.randrange(len(world.apps))].ref
    sidecar = workload.short_ref(world.bases[rng.randrange(len(world.bases))].ref)
    labels = {"app": f"app-{k:03d}"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": f"app-{k:03d}", "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                     {"name": "app", "image": app,
                      "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
                     {"name": "sidecar", "image": sidecar,
                      "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}]}}}}


def bake(body: dict[str, Any], terms: list[Any], decision: str) -> None:
    """The Deployment `body` (changed in place) with `terms` and `decision` in its template."""
    template = body["spec"]["template"]
    if terms:
        template["spec"]["affinity"] = {"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": terms}}
    if decision:
        template["metadata"]["annotations"] = {"layer-locality.io/decision": decision}


def flow_schema(name: str, namespace: str, service_account: str) -> dict[str, Any]:
    """A FlowSchema matching one ServiceAccount, before the catch-all ones: APF's metrics then
    count its requests under `name`; the priority level is the one it had (workload-low)."""
    return {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {"priorityLevelConfiguration": {"name": "workload-low"},
                     "matchingPrecedence": 500,
                     "distinguisherMethod": {"type": "ByUser"},
                     "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {
                         "name": service_account, "namespace": namespace}}],
                         "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                                            "resources": ["*"], "clusterScope": True,
                                            "namespaces": ["*"]}],
                         "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}
