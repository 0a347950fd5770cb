"""Real nodes: kubelets and containerd v2 on this machine, real pulls from the cluster's
registry, and the webhook's decisions on what those nodes report (realnodes_fixture).

The seed scenario of the design, with bytes counted at the registry: Img1 = L1,L2,L3 runs on
node-1, Img2 = L1,L2,L4 on node-2, node-3 is empty; a new Img1 pod is steered to node-1, and a
pod of Img3 = L1,L2,L5 prefers node-2 (and node-1) over node-3; the node it runs on fetches L5
and nothing it already holds. L1 is busybox (the process), L2 a 32 MiB layer (over the 23 MiB
below which the webhook gives no credit), L3..L5 8 MiB each: sizes and sharing chosen, contents
generated (oci.filler_layer)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests.integration.realnodes_fixture import (
    DECISION,
    RealCluster,
    app_image,
    pod_manifest,
    wait_for,
)
from webhook.devcluster.realnodes import oci
from webhook.devcluster.realnodes.network import registry_host
from webhook.devcluster.realnodes.registry import digests_by_node
from webhook.devcluster.realnodes.seed import SEED_NAMESPACE, seed, seed_images
from webhook.telemetry.pulls import PRESENT, PULLED, parse_message

pytestmark = pytest.mark.realnodes

MiB = 1 << 20
L1 = oci.busybox_layer()
L2 = oci.filler_layer("seed-L2", 32 * MiB)
L3 = oci.filler_layer("seed-L3", 8 * MiB)
L4 = oci.filler_layer("seed-L4", 8 * MiB)
L5 = oci.filler_layer("seed-L5", 8 * MiB)
IMG1 = app_image("seed/img1", L1, L2, L3)
IMG2 = app_image("seed/img2", L1, L2, L4)
IMG3 = app_image("seed/img3", L1, L2, L5)
STATUS_TIMEOUT = 90  # the kubelet lists images every 30 s and reports status every 10 s


def create(cluster: RealCluster, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    created: dict[str, Any] = json.loads(cluster.kubectl(
        "-n", namespace, "create", "-o", "json", "-f", "-", stdin=json.dumps(manifest)))
    return created


def preferred_weights(pod: dict[str, Any], nodes: list[str]) -> dict[str, int]:
    """The summed weight of the pod's preferred node-affinity terms each node matches (by its
    kubernetes.io/hostname label, which here is the node name), as NodeAffinity adds them."""
    terms = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
             .get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    weights = dict.fromkeys(nodes, 0)
    for term in terms:
        for node in nodes:
            if all(_matches(e, node) for e in term["preference"].get("matchExpressions", [])):
                weights[node] += term["weight"]
    return weights


def _matches(expression: dict[str, Any], node: str) -> bool:
    assert expression["key"] == "kubernetes.io/hostname", expression
    if expression["operator"] == "In":
        return node in expression["values"]
    if expression["operator"] == "Exists":
        return True
    raise AssertionError(f"unexpected operator in {expression}")


def holds(cluster: RealCluster, node: str, image: oci.Image) -> bool:
    # An entry can have no names at all (names: null): see test_an_image_removed_...
    return any(cluster.ref(image) in (entry.get("names") or [])
               for entry in cluster.node_images(node))


def test_nodes_are_real_and_ready_by_their_own_heartbeats(real_cluster: RealCluster) -> None:
    cluster = real_cluster
    nodes = cluster.kubectl_json("get", "nodes")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["node-1", "node-2", "node-3"]
    for node in nodes:
        info = node["status"]["nodeInfo"]
        assert info["kubeletVersion"] == "v1.37.2"
        assert info["containerRuntimeVersion"] == "containerd://2.4.2"
        addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
        assert addresses["InternalIP"] == cluster.node(node["metadata"]["name"]).ip
        assert not [t for t in node["spec"].get("taints") or []
                    if t["key"] == "node.kubernetes.io/not-ready"]
    def leases() -> dict[str, str]:
        items = cluster.kubectl_json("-n", "kube-node-lease", "get", "leases")["items"]
        return {lease["metadata"]["name"]: lease["spec"]["renewTime"] for lease in items}
    # Each kubelet makes its Lease once its Node exists (it retries with a backoff).
    wait_for(lambda: set(leases()) == {"node-1", "node-2", "node-3"}, 60, "three node Leases")
    renewed = leases()
    # The heartbeat moves: a lease renewed again (the kubelet renews every 10 s).
    wait_for(lambda: cluster.kubectl_json("-n", "kube-node-lease", "get", "lease", "node-1")[
        "spec"]["renewTime"] != renewed["node-1"], 30, "node-1's lease renewed")


def test_seed_scenario_with_real_pulls(real_cluster: RealCluster) -> None:
    cluster = real_cluster
    for image in (IMG1, IMG2, IMG3):
        cluster.push(image, mount_from="seed/img1")
    plain = cluster.new_namespace(opted_in=False)
    create(cluster, plain, pod_manifest("img1-on-1", cluster.ref(IMG1), node="node-1"))
    create(cluster, plain, pod_manifest("img2-on-2", cluster.ref(IMG2), node="node-2"))
    cluster.wait_running(plain, "img1-on-1")
    cluster.wait_running(plain, "img2-on-2")
    ips = cluster.node_ips()
    fetched = digests_by_node(cluster.fetches(), ips)
    assert {L1.digest, L2.digest, L3.digest} <= fetched["node-1"]
    assert {L1.digest, L2.digest, L4.digest} <= fetched["node-2"]
    assert not {L1.digest, L2.digest} & fetched.get("node-3", set())
    wait_for(lambda: holds(cluster, "node-1", IMG1) and holds(cluster, "node-2", IMG2),
             STATUS_TIMEOUT, "node status listing the images")

    steered = cluster.new_namespace(opted_in=True)
    # The webhook has read the nodes' images and resolved their layers (a dry run creates
    # nothing); the real creations below then find everything cached.
    wait_for(lambda: top_node(cluster, steered, IMG1) == "node-1", STATUS_TIMEOUT,
             "a decision preferring node-1 for Img1")
    wait_for(lambda: decision_of(cluster, steered, IMG3) is not None, STATUS_TIMEOUT,
             "a decision for Img3")
    again = create(cluster, steered, pod_manifest("img1-again", cluster.ref(IMG1)))
    decision = json.loads(again["metadata"]["annotations"][DECISION])
    assert decision["top"][0]["node"] == "node-1"
    assert cluster.wait_running(steered, "img1-again")["spec"]["nodeName"] == "node-1"
    events = cluster.events(steered, "img1-again")
    pulls = [parse_message(e["message"]) for e in events if e["reason"] == "Pulled"]
    assert [p.result for p in pulls if p is not None] == [PRESENT]

    before = cluster.fetches()
    sharing = create(cluster, steered, pod_manifest("img3", cluster.ref(IMG3)))
    weights = preferred_weights(sharing, ["node-1", "node-2", "node-3"])
    assert weights["node-2"] > weights["node-3"]
    assert weights["node-1"] > weights["node-3"]
    ran_on = cluster.wait_running(steered, "img3")["spec"]["nodeName"]
    assert ran_on in ("node-1", "node-2")
    new = digests_by_node(cluster.fetches()[len(before):], ips)
    # The node fetched the one layer it lacked and the config: not L1 or L2, which it held.
    assert new[ran_on] == {L5.digest, IMG3.config_digest}
    assert set(new) == {ran_on}


def test_what_the_kubelet_reports(real_cluster: RealCluster) -> None:
    """status.images names and sizes, and the Pulling/Pulled events, as kubelet 1.37 with
    containerd 2.4 writes them: what the webhook and its telemetry parse."""
    cluster = real_cluster
    image = app_image("facts/one", L1, oci.filler_layer("facts-one", 2 * MiB))
    namespace = cluster.hold(image, "node-3", name="facts")
    wait_for(lambda: holds(cluster, "node-3", image), STATUS_TIMEOUT, "node-3 listing it")
    entry = next(e for e in cluster.node_images("node-3")
                 if cluster.ref(image) in (e.get("names") or []))
    assert sorted(entry["names"]) == sorted([cluster.ref(image), image.pinned(registry_host())])
    # containerd 2 reports manifest + config + compressed layers: what a pull downloads, a few
    # hundred bytes more than the layers the webhook scores.
    assert entry["sizeBytes"] == image.pull_bytes
    events = {e["reason"]: e["message"] for e in cluster.events(namespace, "facts")}
    assert events["Pulling"] == f'Pulling image "{cluster.ref(image)}"'
    pulled = parse_message(events["Pulled"])
    assert pulled is not None and pulled.result == PULLED
    assert pulled.image == cluster.ref(image)
    assert pulled.size == image.pull_bytes
    # The pod goes; the image stays (image GC is off below 100 % disk use).
    cluster.kubectl("-n", namespace, "delete", "pod", "facts", "--wait=true")
    assert holds(cluster, "node-3", image)


def decision_of(cluster: RealCluster, namespace: str, image: oci.Image) -> dict[str, Any] | None:
    """The decision a server-side dry-run create of a pod running `image` gets (None: not
    patched): the webhook asked through the real API server; nothing is created."""
    out = json.loads(cluster.kubectl(
        "-n", namespace, "create", "--dry-run=server", "-o", "json", "-f", "-",
        stdin=json.dumps(pod_manifest("probe", cluster.ref(image)))))
    annotation = (out["metadata"].get("annotations") or {}).get(DECISION)
    return json.loads(annotation) if annotation else None


def top_node(cluster: RealCluster, namespace: str, image: oci.Image) -> str | None:
    decision = decision_of(cluster, namespace, image)
    top = (decision or {}).get("top") or []
    return str(top[0]["node"]) if top else None


def test_a_stopped_kubelet_is_not_preferred_and_nothing_fails(
        real_cluster: RealCluster) -> None:
    cluster = real_cluster
    image = app_image("fault/stopped", L1, oci.filler_layer("fault-stopped", 24 * MiB))
    cluster.hold(image, "node-3")
    steered = cluster.new_namespace(opted_in=True)
    wait_for(lambda: top_node(cluster, steered, image) == "node-3", STATUS_TIMEOUT,
             "node-3 preferred for the image it holds")

    cluster.stop_kubelet("node-3")
    try:
        def unreachable() -> bool:
            node = cluster.kubectl_json("get", "node", "node-3")
            ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
            taints = {(t["key"], t["effect"]) for t in node["spec"].get("taints") or []}
            return ready != "True" and (
                "node.kubernetes.io/unreachable", "NoSchedule") in taints
        wait_for(unreachable, 90, "node-3 NotReady and tainted unreachable")
        pod = create(cluster, steered, pod_manifest("after-stop", cluster.ref(image)))
        weights = preferred_weights(pod, ["node-1", "node-2", "node-3"])
        # node-3 gets nothing more than a node without the image (the baseline term, if any).
        assert weights["node-3"] <= min(weights["node-1"], weights["node-2"])
        assert cluster.wait_running(steered, "after-stop")["spec"]["nodeName"] != "node-3"
    finally:
        cluster.start_kubelet("node-3")
        wait_for(lambda: not [t for t in cluster.kubectl_json("get", "node", "node-3")[
            "spec"].get("taints") or [] if t["key"].startswith("node.kubernetes.io/")],
            90, "node-3 Ready and untainted again")


def test_an_image_removed_from_a_node_stops_drawing_pods(real_cluster: RealCluster) -> None:
    cluster = real_cluster
    image = app_image("fault/removed", L1, oci.filler_layer("fault-removed", 24 * MiB))
    plain = cluster.hold(image, "node-2", name="gone")
    steered = cluster.new_namespace(opted_in=True)
    cluster.kubectl("-n", plain, "delete", "pod", "gone", "--wait=true")
    wait_for(lambda: top_node(cluster, steered, image) == "node-2", STATUS_TIMEOUT,
             "node-2 preferred for the image it holds")

    # Removing the two names a pull made leaves the CRI's own reference (the image ID, the
    # config digest): the kubelet then lists the image with `names: null`, bytes still held.
    cluster.ctr("node-2", "images", "rm", cluster.ref(image),
                image.pinned(registry_host()))
    wait_for(lambda: not holds(cluster, "node-2", image), STATUS_TIMEOUT,
             "node-2's status without the image's names")
    assert {"names": None, "sizeBytes": image.pull_bytes} in cluster.node_images("node-2")
    # Removing that reference too (what `crictl rmi` does) removes the image.
    cluster.ctr("node-2", "images", "rm", image.config_digest)
    wait_for(lambda: all(e["sizeBytes"] != image.pull_bytes
                         for e in cluster.node_images("node-2")), STATUS_TIMEOUT,
             "node-2's status without the image at all")
    wait_for(lambda: top_node(cluster, steered, image) != "node-2", 30,
             "the webhook no longer preferring node-2")


def test_the_seeded_demo_shows_the_layer_aware_preference(real_cluster: RealCluster,
                                                          tmp_path: Path) -> None:
    """What `make cluster NODES=3` seeds (realnodes/seed.py) and the dry run it prints: img1
    warmed on node-1, img2 (img1's base) on node-2; the printed pod, in an opted-in
    namespace, prefers node-1, then node-2 by the bytes of img1 it holds (L1 + L2), then
    node-3, and the dry run created nothing."""
    cluster = real_cluster
    nodes = ["node-1", "node-2", "node-3"]
    path = cluster.call(lambda api: seed(client.CoreV1Api(api), nodes, tmp_path), timeout=300)
    images = seed_images()
    wait_for(lambda: not cluster.kubectl_json("-n", SEED_NAMESPACE, "get", "pods")["items"],
             60, "the warming pods gone")
    wait_for(lambda: holds(cluster, "node-1", images.img1) and holds(cluster, "node-2",
                                                                      images.img2),
             STATUS_TIMEOUT, "node status listing the seeded images")
    manifest = yaml.safe_load(path.read_text())
    assert manifest["spec"]["containers"][0]["image"] == cluster.ref(images.img1)
    steered = cluster.new_namespace(opted_in=True)
    manifest["metadata"]["namespace"] = steered

    def dry_run() -> dict[str, Any]:
        shown: dict[str, Any] = json.loads(cluster.kubectl(
            "-n", steered, "create", "--dry-run=server", "-o", "json", "-f", "-",
            stdin=json.dumps(manifest)))
        return shown

    def top() -> list[dict[str, Any]]:
        annotation = (dry_run()["metadata"].get("annotations") or {}).get(DECISION)
        return list(json.loads(annotation)["top"]) if annotation else []

    wait_for(lambda: [entry["node"] for entry in top()][:2] == ["node-1", "node-2"],
             STATUS_TIMEOUT, "the dry run preferring node-1, then node-2")
    shown = dry_run()
    weights = preferred_weights(shown, nodes)
    assert weights["node-1"] > weights["node-2"] > weights["node-3"]
    first, second = json.loads(shown["metadata"]["annotations"][DECISION])["top"][:2]
    assert first["bytes"] == sum(layer.size for layer in images.img1.layers)
    shared = images.img1.layers[:2]
    assert shared == images.img2.layers[:2]
    assert second["bytes"] == sum(layer.size for layer in shared)
    assert cluster.kubectl_json("-n", steered, "get", "pods")["items"] == []
