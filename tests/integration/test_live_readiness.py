"""The live inventory's readiness against a stand-in API server: ready only once every first
list is in (the pods', the NodeLayers'), not while a relist after a 410 runs, and not once a
watch has been down too long; no decision meanwhile."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.helpers import AMD64, node_object, pod
from tests.integration.live_fixture import APP, BASE, Running, preferred
from tests.kit.apiserver import FakeApiServer, eventually
from webhook.core.scoring import MiB


async def test_ready_only_after_the_first_pod_list(
    apiserver: FakeApiServer, live: Callable[..., Any]
) -> None:
    """/readyz follows `ready`: with the nodes listed but the pod list failing, the spread
    guard would be blind (no sibling counted), so the inventory is not ready until a pod
    list completes; then the pods it held are counted."""
    owner = "0f0e0d0c-0000-4000-8000-000000000001"
    for i in range(3):
        apiserver.put("nodes", node_object(f"n{i}", [BASE]))
    bound = pod([APP.ref], name="web-1")
    bound["metadata"].update(uid="uid-web-1", ownerReferences=[
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web", "uid": owner,
         "controller": True}])
    bound["spec"]["nodeName"] = "n1"
    bound["status"] = {"phase": "Running"}
    apiserver.put("pods", bound)
    apiserver.fail("pods", "list", 503, times=1_000_000)
    running: Running = await live()
    await eventually(lambda: apiserver.watchers("nodes") == 1
                     and apiserver.list_calls["pods"] >= 2, "nodes synced, pod list failing")
    assert not running.inventory.ready
    assert running.inventory.not_ready() == ["pods: first list not complete"]
    assert dict(running.inventory.siblings.counts(owner)) == {}

    apiserver.heal("pods", "list")
    await eventually(lambda: running.inventory.ready, "ready after the pod list")
    assert dict(running.inventory.siblings.counts(owner)) == {"n1": 1}
    assert len(running.inventory.index) == 3  # built before readiness was let through


async def test_not_ready_and_no_decision_until_the_nodelayers_list_is_in(
    apiserver: FakeApiServer, live: Callable[..., Any]
) -> None:
    """Ready means synced: with Nodes and pods listed but the NodeLayers list failing (as a
    slow one would, for as long), the inventory is not ready, says which list it waits for,
    and a review is answered unpatched (`not_synced`) rather than from half a picture: the
    layers only NodeLayers holds are missing. Once the list is in, the same pod is steered
    there."""
    from tests.nodelayers_helpers import nodelayers_object

    apiserver.put("nodes", node_object("n0"))
    apiserver.put("nodes", node_object("n1"))
    apiserver.put("nodelayers", nodelayers_object("n1", [APP], AMD64, time.time(), 300))
    apiserver.fail("nodelayers", "list", 503, times=1_000_000)
    running: Running = await live()
    await eventually(lambda: apiserver.watchers("nodes") == 1 and apiserver.watchers("pods") == 1
                     and apiserver.list_calls["nodelayers"] >= 2, "nodes in, NodeLayers failing")
    assert not running.inventory.ready
    assert running.inventory.not_ready() == ["nodelayers: first list not complete"]
    outcome = await running.review(pod([APP.ref]))
    assert (outcome.reason, outcome.patch) == ("not_synced", ())

    apiserver.heal("nodelayers", "list")
    await eventually(lambda: running.inventory.ready, "ready once NodeLayers are listed")
    assert running.inventory.not_ready() == []
    assert preferred(await running.review(pod([APP.ref]))) == {"n1": 290 * MiB}


async def test_a_relist_after_410_is_not_ready_until_it_completes(
    apiserver: FakeApiServer, live: Callable[..., Any]
) -> None:
    """A lost watch (410 Gone) relists the pods; until the relist is whole the replica is
    not ready and decides nothing (a half-applied relist is not a picture); a replica once
    ready is not ready for ever."""
    apiserver.put("nodes", node_object("n0", [BASE]))
    apiserver.put("nodes", node_object("n1"))
    running: Running = await live()
    await eventually(lambda: running.inventory.ready and apiserver.watchers("pods") == 1,
                     "watching")
    apiserver.fail("pods", "list", 503, times=1_000_000)
    apiserver.send_gone("pods")
    await eventually(lambda: not running.inventory.ready, "not ready while relisting")
    assert running.inventory.not_ready() == ["pods: listing again"]
    assert (await running.review(pod([APP.ref]))).reason == "not_synced"
    apiserver.heal("pods", "list")
    await eventually(lambda: running.inventory.ready, "ready once the relist is whole")
    outcome = await running.review(pod([APP.ref]))
    assert preferred(outcome) == {"n0": 200 * MiB}, outcome


async def test_a_watch_down_too_long_makes_the_picture_stale(
    apiserver: FakeApiServer, live: Callable[..., Any]
) -> None:
    """A watch that keeps failing leaves the last picture in place; past `stale_seconds` it
    is stale (events it should show are missing): not ready until the watch answers."""
    apiserver.put("nodes", node_object("n0", [BASE]))
    running: Running = await live(stale_seconds=30)
    await eventually(lambda: running.inventory.ready and apiserver.watchers("nodes") == 1,
                     "watching")
    apiserver.fail("nodes", "watch", 503, times=1_000_000)
    apiserver.drop_streams()
    await eventually(lambda: apiserver.watch_calls["nodes"] >= 3, "the watch failing")
    assert running.inventory.ready  # failing, but not for long: the picture stands
    running.clock.now += 31
    assert not running.inventory.ready
    assert running.inventory.not_ready()[0].startswith("nodes: watch failing for ")
    apiserver.heal("nodes", "watch")
    await eventually(lambda: running.inventory.ready, "ready once the watch answers")
