"""The live inventory's compact per-pod and per-node state loses nothing: driven through its
event callbacks (no API server: `LiveInventory(None, ...)`, no reflector runs)."""

from __future__ import annotations

from typing import Any

from tests.helpers import AMD64, digest, image, node_object, pod
from webhook.core.index import LayerIndex
from webhook.core.scoring import MiB
from webhook.inventory.live import LiveInventory
from webhook.inventory.static import node_layers
from webhook.registry.catalog import StaticCatalog

BASE = image("registry.example.com/base:1", {AMD64: [("base", 200 * MiB)]})
APP = image("registry.example.com/app:1", {AMD64: [("base", 200 * MiB), ("app", 90 * MiB)]})
TOOL = image("registry.example.com/tool:1", {AMD64: [("tool", 30 * MiB)]})
CATALOG = StaticCatalog([BASE, APP, TOOL])
OWNER = "0a0b0c0d-0000-4000-8000-000000000001"


def bound(name: str, node: str, images: list[str], phase: str = "Running") -> dict[str, Any]:
    obj = pod(images, name=name)
    obj["metadata"].update(uid=f"uid-{name}", ownerReferences=[
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": OWNER,
         "controller": True}])
    obj["spec"]["nodeName"] = node
    obj["status"] = {"phase": phase}
    return obj


def test_a_bind_adds_exactly_the_layers_a_full_reindex_would() -> None:
    live = LiveInventory(None, [CATALOG])
    for name, images in (("n1", [BASE]), ("n2", [])):
        live._apply_nodes("ADDED", node_object(name, images))
    live._pod_event("ADDED", "uid-a", bound("a", "n1", [APP.ref, TOOL.ref]))
    live._pod_event("ADDED", "uid-b", bound("b", "n2", [TOOL.ref]))
    live._pod_event("ADDED", "uid-c", bound("c", "n2", [APP.ref]))
    expected = {"n1": {digest(x) for x in ("base", "app", "tool")},
                "n2": {digest(x) for x in ("base", "app", "tool")}}
    assert {n: set(live.index.layers_of(n)) for n in expected} == expected
    incremental = {n: live.index.layers_of(n) for n in expected}
    for name in expected:  # what recomputing each node from scratch gives
        live._reindex(name)
    assert {n: live.index.layers_of(n) for n in expected} == incremental


def test_pods_sharing_a_node_keep_their_own_state() -> None:
    live = LiveInventory(None, [CATALOG])
    live._apply_nodes("ADDED", node_object("n1", [BASE]))
    live._pod_event("ADDED", "uid-a", bound("a", "n1", [APP.ref]))
    live._pod_event("ADDED", "uid-b", bound("b", "n1", [APP.ref]))
    assert dict(live.siblings.counts(OWNER)) == {"n1": 2}
    live._pod_event("MODIFIED", "uid-a", bound("a", "n1", [APP.ref], phase="Succeeded"))
    assert live._pods["uid-a"].finished and not live._pods["uid-b"].finished
    assert dict(live.siblings.counts(OWNER)) == {"n1": 1}
    live._pod_event("DELETED", "uid-b", None)
    assert "uid-b" not in live._pods and live._pods["uid-a"].node == "n1"
    assert dict(live.siblings.counts(OWNER)) == {}


def test_index_layers_round_trip_through_updates() -> None:
    """Stored compactly, a node's layers read back as given, through add, change, remove."""
    index = LayerIndex()
    live = LiveInventory(None, [CATALOG])
    live._apply_nodes("ADDED", node_object("n1", [APP]))
    node = live.index.node("n1")
    assert node is not None
    first = node_layers(node, CATALOG).layers
    assert index.upsert(node, first) and index.layers_of("n1") == first
    assert not index.upsert(node, set(first))  # the same set again: no change
    second = {digest("tool"), digest("base")}
    assert index.upsert(node, second) and index.layers_of("n1") == second
    assert index.overlap_groups({AMD64: {digest("app"): 1, digest("tool"): 2}},
                                index.bit("n1"))[0].bytes_present == 2
    assert index.remove("n1") and index.layers_of("n1") == frozenset()


def test_layer_ids_stay_bounded_under_image_churn() -> None:
    """The index keeps layers as ids; layers no node holds any more lose theirs, so a
    long-running inventory whose nodes keep pulling new images does not grow without
    bound, and every node still reads back exactly its layers."""
    import webhook.core.index_updates as index_updates

    live = LiveInventory(None, [CATALOG])
    live._apply_nodes("ADDED", node_object("n1", [BASE]))
    live._apply_nodes("ADDED", node_object("n2", [BASE]))
    n1, n2 = live.index.node("n1"), live.index.node("n2")
    assert n1 is not None and n2 is not None
    index = LayerIndex()
    spare = index_updates._SPARE_IDS
    index.upsert(n2, {digest("kept")})
    for round_ in range(3 * spare // 100):  # n1 pulls 100 new layers each time
        index.upsert(n1, {digest(f"churn {round_} {k}") for k in range(100)})
    assert len(index._digest) <= 2 * index.layer_count + spare
    assert index.layers_of("n2") == {digest("kept")}
    last = 3 * spare // 100 - 1
    assert index.layers_of("n1") == {digest(f"churn {last} {k}") for k in range(100)}
    assert index.overlap_groups({AMD64: {digest("kept"): 5}}, index.bit("n2"))[0].bytes_present == 5


def test_bound_pod_states_are_shared_per_node_and_phase_and_bounded() -> None:
    from webhook.inventory.podstate import BoundPods

    def pod(node: str, phase: str = "Running") -> dict[str, object]:
        return {"spec": {"nodeName": node}, "status": {"phase": phase}}

    states = BoundPods(limit=2)
    first = states.of(pod("a"))
    assert first is not None and first.node == "a" and not first.finished
    assert states.of(pod("a")) is first  # shared, not one object per pod
    done = states.of(pod("a", "Succeeded"))
    assert done is not None and done.finished and done is not first
    assert states.of({"spec": {}, "status": {}}) is None  # not bound
    other = states.of(pod("b"))  # the limit was reached: the cache starts over
    assert other is not None and other.node == "b"
    again = states.of(pod("a"))
    assert again == first and again is not first
