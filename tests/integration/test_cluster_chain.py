"""The real chain: Deployment -> ReplicaSet -> pods that reach the webhook with only
`generateName` and an ownerReference -> the real kube-scheduler binds them -> the webhook's pod
watch sees the binds, and later replicas are decided with them.

The image is one that stock ImageLocality cannot match by name: two of the six nodes hold
python:3.11, the pods run an image built FROM it that no node holds (its layers are known from
the catalog). Stock, the scheduler has no reason to prefer the python nodes; opted in, it
should, while keeping the default spreading (maxSkew 3 over hostnames).

Why the margins cannot flake: REPLICAS = 6 over 6 nodes, 2 of them warm.
- Stock: all scores but PodTopologySpread are equal across the nodes (same capacity, the image
  is on none of them by name), and the scheduler counts a pod on its node as soon as it
  assumes it, so the default spreading places one replica per node: 2 on the warm nodes. We
  allow up to 3.
- Opted in: the webhook prefers the warm nodes while the spread guard leaves them open
  (webhook/core/spread.py: a node's siblings, bound or pending, plus this one within maxSkew
  3), then co-locates the rest on one cold node (decide.py). How many reach the warm nodes
  depends on how many binds the pod watch has shown when each replica is reviewed (the
  ReplicaSet creates them in batches of 1, 2 and 3): all six reviewed before any bind, the
  guard counts each pending replica on every warm node the scheduler may bind it to
  (pods.counted_nodes; alike ones spread as inventory/counting.py `spread_alike` says), so it closes
  both warm nodes after 3 replicas (CI, under load: 2 + 1 warm, 3 co-located); with the binds
  seen, up to 3 per warm node. So: at least 3 on the warm nodes in every interleaving, more
  than stock's, and no replica on a cold node its decision did not weigh highest (CI once
  saw a cold node weighed 100 against a warm one's 90: its first co-located replica was
  pulling the image, so it held as many bytes, in flight, with fewer siblings).
  A warm node outscores a cold one by max_weight x NodeAffinity's plugin weight 2 (up to 200
  points) against PodTopologySpread's at most 2 x 100.
Repeat figures: docs/deploy.md "Tested against".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import orjson
import pytest

from tests.integration.cluster_fixture import COLD, DECISION, WARM, new_namespace, wait_for
from tests.integration.test_cluster_admission import deployment_manifest
from webhook.devcluster.cluster import LocalCluster

pytestmark = pytest.mark.controlplane
REPLICAS = 6
MAX_SKEW = 3  # the scheduler's default PodTopologySpread constraint on kubernetes.io/hostname


def run_deployment(cluster: LocalCluster, namespace: str) -> list[dict[str, Any]]:
    """Create the Deployment, wait for every replica to be bound; its pods as read back."""
    from kubernetes import client

    with cluster.api_client() as api:
        apps: Any = client.AppsV1Api(api)
        core: Any = client.CoreV1Api(api)
        apps.create_namespaced_deployment(namespace,
                                          deployment_manifest("app", namespace, REPLICAS,
                                                              bind=True))

        def pods() -> list[dict[str, Any]]:
            listed = core.list_namespaced_pod(namespace, label_selector="app=app")
            return [api.sanitize_for_serialization(p) for p in listed.items]

        wait_for(lambda: len(pods()) == REPLICAS
                 and all(p["spec"].get("nodeName") for p in pods()),
                 90, f"{REPLICAS} replicas bound")
        return pods()


def reasons(cluster: LocalCluster) -> list[str]:
    from tests.integration.test_cluster_admission import metrics_text

    return [line for line in metrics_text(cluster).splitlines()
            if line.startswith("layer_locality_reviews_total{")]


def binds_seen(cluster: LocalCluster) -> float:
    """layer_locality_binds_total over its outcomes: binds of patched pods the watch saw."""
    from tests.integration.test_cluster_admission import metrics_text

    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics_text(cluster).splitlines()
               if line.startswith("layer_locality_binds_total{"))


def remove(cluster: LocalCluster, namespaces: list[str]) -> None:
    """Delete the namespaces and, since no kubelet confirms a bound pod's end, force-delete
    their pods; then restart the webhook so that its inventory forgets their layers (they
    count on their nodes for --inflight-seconds, as pulled images would) and later tests start
    from the nodes' status alone."""
    from kubernetes import client

    with cluster.api_client() as api:
        apps: Any = client.AppsV1Api(api)
        core: Any = client.CoreV1Api(api)
        for namespace in namespaces:
            apps.delete_collection_namespaced_deployment(namespace)

        def force_deleted() -> bool:
            replica_sets = [rs for ns in namespaces
                            for rs in apps.list_namespaced_replica_set(ns).items]
            left = [(p.metadata.namespace, p.metadata.name) for ns in namespaces
                    for p in core.list_namespaced_pod(ns).items]
            for namespace, name in left:
                core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            return not left and not replica_sets

        # A ReplicaSet recreates a deleted pod until the garbage collector has removed it:
        # done only once neither ReplicaSets nor pods are left.
        wait_for(force_deleted, 60, "the Deployments' ReplicaSets and pods to be gone")
        for namespace in namespaces:
            core.delete_namespace(namespace)
    cluster.start_webhook()  # stops the running one first


@pytest.fixture
def namespaces(local_cluster: LocalCluster) -> Iterator[tuple[str, str]]:
    steered = new_namespace(local_cluster, opted_in=True, prefix="chain")
    stock = new_namespace(local_cluster, opted_in=False, prefix="chain")
    yield steered, stock
    remove(local_cluster, [steered, stock])


def test_replicas_go_where_the_layers_are_and_stay_spread(
        local_cluster: LocalCluster, namespaces: tuple[str, str]) -> None:
    binds_before = binds_seen(local_cluster)
    steered = run_deployment(local_cluster, namespaces[0])
    stock = run_deployment(local_cluster, namespaces[1])

    for pod in steered:
        meta = pod["metadata"]
        # As the real server sends it: named by the server after admission, owned by the RS.
        assert meta["generateName"].startswith("app-")
        assert [o["kind"] for o in meta["ownerReferences"]] == ["ReplicaSet"]
    for pod in stock:
        assert DECISION not in (pod["metadata"].get("annotations") or {})
    # Replicas decided before the warm nodes reached the guard's limit carry the decision.
    patched = [p for p in steered if DECISION in (p["metadata"].get("annotations") or {})]
    assert len(patched) >= 4, reasons(local_cluster)
    # The webhook's pod watch saw the real binds of the pods it patched (outcome telemetry).
    wait_for(lambda: binds_seen(local_cluster) - binds_before >= len(patched), 30,
             "the webhook's pod watch to see the binds")

    def placement(pods: list[dict[str, Any]]) -> Counter[str]:
        return Counter(p["spec"]["nodeName"] for p in pods)

    steered_nodes, stock_nodes = placement(steered), placement(stock)
    print(f"placement: opted in {dict(steered_nodes)}, stock {dict(stock_nodes)}")
    on_warm = sum(steered_nodes[n] for n in WARM)
    stock_on_warm = sum(stock_nodes[n] for n in WARM)
    decisions = [(p["spec"]["nodeName"], (p["metadata"].get("annotations") or {}).get(DECISION))
                 for p in steered]
    assert on_warm >= MAX_SKEW, (steered_nodes, stock_nodes, decisions)
    assert stock_on_warm <= 3, stock_nodes
    assert on_warm > stock_on_warm, (steered_nodes, stock_nodes, decisions)
    # Off the warm nodes only where the decision sent it: a cold node it weighed highest
    # (co-located once the guard closed the warm nodes; or a seeded cold node already pulling
    # the image for an earlier replica, which then holds as many bytes as a warm one and
    # fewer siblings).
    for node, annotation in decisions:
        if node not in WARM:
            top = (orjson.loads(annotation) if annotation else {}).get("top") or []
            weights = {entry["node"]: entry["weight"] for entry in top}
            assert weights.get(node) == max(weights.values(), default=None), (node, annotation)
    # The default spreading is kept: no node more than MAX_SKEW above the emptiest node.
    for counts in (steered_nodes, stock_nodes):
        per_node = [counts.get(n, 0) for n in (*WARM, *COLD)]
        assert max(per_node) - min(per_node) <= MAX_SKEW, counts
