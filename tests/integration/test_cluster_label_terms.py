"""Label terms on the real API server: nodes carrying the agent's layer labels with a live
agent Lease are preferred through `layer-locality.io/l.<id> Exists` terms, read back from the
pod the API server stored after the webhook's patch, weighted as the scheduler adds them up;
a node whose Lease ran out and that no longer holds what its labels say is left out of them
(`NotIn`); once every Lease has run out the webhook names hostnames again."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.helpers import validate_pod, weight_by_labels
from tests.integration.cluster_fixture import (
    BASE_IMAGE,
    DECISION,
    catalog_entries,
    new_namespace,
    pod_manifest,
    status_image,
    wait_for,
)
from webhook.core.layerlabels import LAYER_LABEL_PREFIX, node_layer_labels
from webhook.core.objects import HOSTNAME_LABEL
from webhook.devcluster.cluster import LocalCluster
from webhook.devcluster.nodes import create_nodes
from webhook.inventory.agentlease import AGENT_NAMESPACE, MIN_LEASE_SECONDS, lease_body

pytestmark = pytest.mark.controlplane
BATCH = "layer-locality.test/batch"
HOLDERS = [f"lbl-{i:02d}" for i in range(34)]  # at least --label-min-nodes (32) with Leases
STALE = ["lbl-stale-0", "lbl-stale-1"]  # labels, but their agent is gone and so is the image


def base_labels() -> dict[str, str]:
    layers = catalog_entries()[BASE_IMAGE]["platforms"]["linux/amd64"]["layers"]
    return node_layer_labels({layer["digest"]: layer["size"] for layer in layers})


def item(name: str, holds: bool) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {
                BATCH: "label-terms", HOSTNAME_LABEL: name, "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64", **base_labels()}},
            "status": {"images": [status_image(BASE_IMAGE)] if holds else []}}


@pytest.fixture
def labelled(local_cluster: LocalCluster) -> Iterator[tuple[Any, Leases]]:
    """The labelled nodes and their agents' Leases (the stale ones' already run out); all
    deleted afterwards."""
    from kubernetes import client

    with local_cluster.api_client() as api:
        core: Any = client.CoreV1Api(api)
        # Leases as raw objects (the client's Lease model re-writes a MicroTime without its
        # microseconds when they are 0, which the API server refuses): as the agent writes.
        leases = Leases(client.CustomObjectsApi(api))
        try:
            core.create_namespace({"metadata": {"name": AGENT_NAMESPACE}})
        except client.ApiException as exc:
            if exc.status != 409:
                raise
        create_nodes(core, [item(n, True) for n in HOLDERS] + [item(n, False) for n in STALE])
        now = datetime.now(UTC)
        for name in HOLDERS + STALE:
            # A long Lease for the holders; the stale ones renewed long ago.
            renewed = now if name in HOLDERS else datetime.fromtimestamp(0, UTC)
            leases.create(lease_body(
                name, AGENT_NAMESPACE, 3600 if name in HOLDERS else MIN_LEASE_SECONDS,
                renewed))
        try:
            yield core, leases
        finally:
            for name in HOLDERS + STALE:
                leases.delete(name)
            core.delete_collection_node(label_selector=f"{BATCH}=label-terms")


class Leases:
    """The agents' Leases in their namespace, as plain objects."""

    def __init__(self, custom: Any) -> None:
        self.custom = custom

    def create(self, body: dict[str, Any]) -> None:
        self.custom.create_namespaced_custom_object(
            "coordination.k8s.io", "v1", AGENT_NAMESPACE, "leases", body)

    def version(self, name: str) -> str:
        found: dict[str, Any] = self.custom.get_namespaced_custom_object(
            "coordination.k8s.io", "v1", AGENT_NAMESPACE, "leases", name)
        return str(found["metadata"]["resourceVersion"])

    def replace(self, name: str, body: dict[str, Any]) -> None:
        self.custom.replace_namespaced_custom_object(
            "coordination.k8s.io", "v1", AGENT_NAMESPACE, "leases", name, body)

    def delete(self, name: str) -> None:
        from kubernetes import client

        try:
            self.custom.delete_namespaced_custom_object(
                "coordination.k8s.io", "v1", AGENT_NAMESPACE, "leases", name)
        except client.ApiException as exc:
            if exc.status != 404:
                raise


def stored(cluster: LocalCluster, namespace: str) -> dict[str, Any]:
    """The pod as the API server stores it after admission (a dry-run create: nothing
    stays, nothing binds)."""
    out = cluster.kubectl_run(
        ["-n", namespace, "create", "--dry-run=server", "-o", "json", "-f", "-"],
        stdin=json.dumps(pod_manifest(f"lbl-{uuid.uuid4().hex[:6]}")))
    pod: dict[str, Any] = json.loads(out)
    return pod


def node_labels(core: Any) -> dict[str, dict[str, str]]:
    return {n.metadata.name: dict(n.metadata.labels or {}) for n in core.list_node().items}


def label_terms(pod: dict[str, Any]) -> list[dict[str, Any]]:
    affinity = pod["spec"].get("affinity") or {}
    terms = (affinity.get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution") or []
    return [t for t in terms if t["preference"]["matchExpressions"][0]["key"].startswith(
        LAYER_LABEL_PREFIX)]


def test_labelled_holders_are_preferred_by_label_and_stale_ones_left_out(
        local_cluster: LocalCluster, labelled: tuple[Any, Leases]) -> None:
    core, _ = labelled
    namespace = new_namespace(local_cluster, opted_in=True)
    wait_for(lambda: bool(label_terms(stored(local_cluster, namespace))), 30,
             "the webhook's decision to use label terms")
    pod = stored(local_cluster, namespace)
    validate_pod(pod)
    doc = json.loads(pod["metadata"]["annotations"][DECISION])
    assert doc["v"] == 4 and "top" not in doc
    for term in label_terms(pod):
        expressions = term["preference"]["matchExpressions"]
        assert expressions[0]["operator"] == "Exists"
        assert expressions[1:] == [{"key": HOSTNAME_LABEL, "operator": "NotIn",
                                    "values": sorted(STALE)}]
    weights = weight_by_labels(pod, node_labels(core))
    baseline = min(weights.values())
    # Every holder with a live agent at the top, by its labels; the session's two python:3.11
    # holders without an agent (warm-a, warm-b) named by hostname for the same weight.
    top = max(weights.values())
    assert {weights[n] for n in [*HOLDERS, "warm-a", "warm-b"]} == {top} and top > baseline
    assert {weights[n] for n in STALE} == {baseline}


def test_once_every_lease_runs_out_the_webhook_names_hostnames_again(
        local_cluster: LocalCluster, labelled: tuple[Any, Leases]) -> None:
    _, leases = labelled
    namespace = new_namespace(local_cluster, opted_in=True)
    # The agents' last renewal: a Lease of the shortest duration, then nothing more.
    for name in HOLDERS:
        leases.replace(name, lease_body(name, AGENT_NAMESPACE, MIN_LEASE_SECONDS,
                                        datetime.now(UTC), resource_version=leases.version(name)))
    assert label_terms(stored(local_cluster, namespace))
    # No event says a Lease ran out: the webhook notices on its own (every 15 s here).
    wait_for(lambda: not label_terms(stored(local_cluster, namespace)),
             MIN_LEASE_SECONDS + 45, "hostname terms once no live agent vouches for the labels",
             interval=1.0)
    pod = stored(local_cluster, namespace)
    assert json.loads(pod["metadata"]["annotations"][DECISION])["v"] == 3
