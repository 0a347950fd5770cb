"""Fake nodes on the real API server (devcluster/nodes.py): made concurrently, each read back
with its status from the one POST (images, capacity, Ready), without the not-ready taint the
TaintNodesByCondition admission plugin adds, and with its own taints kept; a node the API
server refuses is named with the server's message."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.cluster_fixture import as_dict, status_image
from webhook.devcluster import nodes
from webhook.devcluster.cluster import LocalCluster
from webhook.devcluster.nodes import NOT_READY_TAINT, create_nodes
from webhook.devcluster.processes import ClusterError

pytestmark = pytest.mark.controlplane
COUNT = 60  # more than nodes.CONCURRENCY: requests overlap and the workers take turns
BATCH = "layer-locality.test/batch"
GPU = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
# Images sharing no layer with the app image of the session's other tests (cluster_fixture).
IMAGES = ("docker.io/library/nginx:1.23", "docker.io/library/node:18-slim")


def item(i: int) -> dict[str, Any]:
    name = f"fake-{i:03d}"
    spec: dict[str, Any] = {"taints": [GPU]} if i % 3 == 0 else {}
    if i % 10 == 4:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {BATCH: "fake-nodes",
                                                  "topology.kubernetes.io/zone": f"z-{i % 3}"}},
            "spec": spec,
            "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "50"},
                       "images": [status_image(IMAGES[i % 2])]}}


@pytest.fixture
def core(local_cluster: LocalCluster) -> Iterator[Any]:
    """A CoreV1Api; every node of the batch deleted afterwards (the session's cluster goes on)."""
    from kubernetes import client

    with local_cluster.api_client() as api:
        core: Any = client.CoreV1Api(api)
        yield core
        core.delete_collection_node(label_selector=f"{BATCH}=fake-nodes")


def test_nodes_are_ready_with_their_status_and_own_taints(
        core: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    items = [item(i) for i in range(COUNT)]
    lines: list[str] = []
    monkeypatch.setattr(nodes, "BIG_LIST", 10)
    names = create_nodes(core, reversed(items), report=lines.append)
    assert names == [i["metadata"]["name"] for i in reversed(items)]  # the order given
    assert lines[-1].startswith(f"fake nodes: {COUNT}/{COUNT} created in ")

    listed = as_dict(core.api_client, core.list_node(label_selector=f"{BATCH}=fake-nodes"))
    read = {node["metadata"]["name"]: node for node in listed["items"]}
    assert sorted(read) == sorted(names)
    for i, given in enumerate(items):
        node = read[given["metadata"]["name"]]
        status = node["status"]
        assert status["images"] == given["status"]["images"]
        assert status["capacity"] == {"cpu": "4", "memory": "8Gi", "pods": "50",
                                      "ephemeral-storage": "100Gi"}
        assert {c["type"]: c["status"] for c in status["conditions"]} == {
            "Ready": "True", "MemoryPressure": "False", "DiskPressure": "False",
            "PIDPressure": "False"}
        assert status["nodeInfo"]["kubeletVersion"] == nodes.KUBELET_VERSION
        taints = node["spec"].get("taints") or []
        assert NOT_READY_TAINT not in {t["key"] for t in taints}
        assert taints == given["spec"].get("taints", [])
        assert bool(node["spec"].get("unschedulable")) == (i % 10 == 4)
        assert node["metadata"]["labels"]["topology.kubernetes.io/zone"] == f"z-{i % 3}"


def test_a_refused_node_is_named_with_the_api_servers_message(core: Any) -> None:
    create_nodes(core, [item(0)])
    with pytest.raises(ClusterError, match=r"could not create node fake-000: HTTP 409: "
                                           r'nodes "fake-000" already exists'):
        create_nodes(core, [item(1), item(0), item(2)])
    bad = item(7)
    bad["metadata"]["name"] = "Not_A_DNS_Name"
    with pytest.raises(ClusterError, match=r"could not create node Not_A_DNS_Name: HTTP 422: "
                                           r".*Invalid value"):
        create_nodes(core, [bad])
