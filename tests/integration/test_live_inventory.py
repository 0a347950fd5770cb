"""The live inventory against a stand-in API server (see tests/kit/apiserver.py: 410s, dropped
streams and pagination on demand; restarts of the real one: test_cluster_restarts.py), through
the real `kubernetes` client and a generated kubeconfig: what it lists and watches, and how it
keeps watching (its readiness: test_live_readiness.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import apply_patch, node_object, pod, validate_pod
from tests.integration.live_fixture import APP, BASE, CATALOG, Running, preferred
from tests.kit.apiserver import FakeApiServer, eventually
from webhook.core.scoring import MiB
from webhook.inventory.kube import core_api
from webhook.inventory.live import LiveInventory
from webhook.registry.catalog import StaticCatalog


async def test_sync_pagination_readiness_and_updates(
    apiserver: FakeApiServer, live: Callable[..., Any]
) -> None:
    for i in range(5):
        apiserver.put("nodes", node_object(f"n{i}", [BASE] if i == 0 else []))
    running: Running = await live()
    assert not running.inventory.ready or len(running.inventory.index) == 5
    await eventually(lambda: running.inventory.ready, "ready after the first list")
    assert len(running.inventory.index) == 5
    assert apiserver.list_calls["nodes"] >= 3  # 5 nodes in pages of 2
    assert apiserver.unauthorised == 0  # the client sent the kubeconfig's token

    outcome = await running.review(pod([APP.ref]))
    assert preferred(outcome) == {"n0": 200 * MiB}

    # An update arrives within one event and changes the next review's patch.
    apiserver.put("nodes", node_object("n3", [APP]))
    await eventually(lambda: bool(running.inventory.index.layers_of("n3")), "n3 update")
    outcome = await running.review(pod([APP.ref]))
    assert preferred(outcome) == {"n3": 290 * MiB, "n0": 200 * MiB}
    validate_pod(apply_patch(pod([APP.ref]), list(outcome.patch)))

    apiserver.delete("nodes", "n3")
    await eventually(lambda: running.inventory.index.node("n3") is None, "n3 deleted")
    outcome = await running.review(pod([APP.ref]))
    assert preferred(outcome) == {"n0": 200 * MiB}, outcome

    # A cordon is an update like any other: the node stops receiving preferences.
    apiserver.put("nodes", node_object("n0", [BASE], unschedulable=True))
    await eventually(lambda: running.inventory.index.candidates([]).bit_count() == 3, "cordon")
    assert (await running.review(pod([APP.ref]))).reason == "below_threshold"


async def test_relist_after_410_keeps_every_node(
    apiserver: FakeApiServer, live: Callable[..., Any]
) -> None:
    for i in range(3):
        apiserver.put("nodes", node_object(f"n{i}"))
    running: Running = await live()
    await eventually(lambda: running.inventory.ready and apiserver.watchers("nodes") == 1,
                     "watching")
    lists_before = apiserver.list_calls["nodes"]
    # History is compacted while the watch breaks: resuming must relist, and what changed in
    # the gap (a new node, a deleted node) must show up.
    apiserver.compact()
    apiserver.drop_streams()
    apiserver.put("nodes", node_object("n9", [APP]))
    apiserver.delete("nodes", "n1")
    apiserver.compact()
    await eventually(lambda: running.inventory.index.node("n9") is not None, "n9 after relist")
    await eventually(lambda: running.inventory.index.node("n1") is None, "n1 gone after relist")
    assert apiserver.list_calls["nodes"] > lists_before
    assert {n.name for n in running.inventory.index.nodes()} == {"n0", "n2", "n9"}
    assert running.metric("layer_locality_relists_total", resource="nodes") >= 2
    assert running.metric("layer_locality_relists_total", resource="nodes",
                          reason="expired") >= 1

    # A 410 delivered as an ERROR event on a live stream also relists.
    await eventually(lambda: apiserver.watchers("nodes") == 1, "watching again")
    lists_before = apiserver.list_calls["nodes"]
    apiserver.send_gone("nodes")
    await eventually(lambda: apiserver.list_calls["nodes"] > lists_before, "relist on ERROR 410")
    assert len(running.inventory.index) == 3


async def test_every_410_logs_one_line_and_counts_a_relist(
    apiserver: FakeApiServer, live: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """410 Gone arrives three ways (an ERROR event, the HTTP status of a continued list page,
    the HTTP status of a watch request): each relists, logs one line and counts a relist."""
    for i in range(3):  # pages of 2: every list has a continued page
        apiserver.put("nodes", node_object(f"n{i}"))
    caplog.set_level(logging.INFO, logger="webhook.inventory")
    running: Running = await live()
    await eventually(lambda: running.inventory.ready and apiserver.watchers("nodes") == 1,
                     "watching")

    pages = 2  # per full list
    assert apiserver.list_calls["nodes"] == pages

    def relisted(lists: int) -> Callable[[], bool]:
        return lambda: (apiserver.list_calls["nodes"] == lists * pages
                        and apiserver.watchers("nodes") == 1)

    apiserver.fail("nodes", "continue", 410)
    apiserver.send_gone("nodes")  # relist, whose second page is 410: relist again
    await eventually(relisted(3), "relisted twice")
    apiserver.fail("nodes", "watch", 410)
    apiserver.drop_streams()
    await eventually(relisted(4), "relisted after the watch request's 410")
    lines = [r.getMessage() for r in caplog.records if "410" in r.getMessage()]
    assert len(lines) == 3, lines
    assert running.metric("layer_locality_relists_total", resource="nodes",
                          reason="expired") == 3
    assert {n.name for n in running.inventory.index.nodes()} == {"n0", "n1", "n2"}


async def test_a_broken_stream_resumes_from_the_last_bookmark(
    apiserver: FakeApiServer, live: Callable[..., Any]
) -> None:
    """History older than the last bookmark is compacted, then the stream breaks: resuming
    from the bookmark needs no relist (resuming from the list's version would get a 410)."""
    apiserver.put("nodes", node_object("n0"))
    running: Running = await live()
    await eventually(lambda: apiserver.watchers("nodes") == 1, "watching")
    lists = apiserver.list_calls["nodes"]
    apiserver.bookmark("nodes")
    await eventually(lambda: running.metric("layer_locality_watch_event_lag_seconds_count") >= 1,
                     "bookmark read")
    apiserver.compact()
    apiserver.drop_streams()
    apiserver.put("nodes", node_object("n1", [APP]))
    await eventually(lambda: running.inventory.index.node("n1") is not None, "n1 after resume")
    assert apiserver.list_calls["nodes"] == lists, "resumed from the bookmark without relisting"


async def test_dropped_stream_resumes_without_relisting(
    apiserver: FakeApiServer, live: Callable[..., Any]
) -> None:
    apiserver.put("nodes", node_object("n0"))
    running: Running = await live()
    await eventually(lambda: apiserver.watchers("nodes") == 1, "watching")
    lists = apiserver.list_calls["nodes"]
    watches = apiserver.watch_calls["nodes"]
    apiserver.bookmark("nodes")
    apiserver.drop_streams()
    apiserver.put("nodes", node_object("n1", [APP]))  # happens while disconnected
    await eventually(lambda: running.inventory.index.node("n1") is not None, "n1 after resume")
    assert apiserver.watch_calls["nodes"] > watches
    assert apiserver.list_calls["nodes"] == lists, "a resumable watch must not relist"


async def test_bound_pods_count_in_flight_until_reported_or_expired(
    apiserver: FakeApiServer, live: Callable[..., Any]
) -> None:
    for name in ("n1", "n2", "n3"):
        apiserver.put("nodes", node_object(name))
    running: Running = await live()
    await eventually(lambda: running.inventory.ready, "ready")
    index = running.inventory.index
    assert (await running.review(pod([APP.ref]))).reason == "below_threshold"

    # A dry-run review reserves nothing.
    dry = await running.review(pod([APP.ref]), dry_run=True)
    assert dry.reason == "below_threshold"
    assert all(not index.layers_of(n) for n in ("n1", "n2", "n3"))

    # The scheduler binds P1 to n1: before any kubelet report, n1 is warm for the next pod.
    bound = pod([APP.ref], name="p1", spec={"nodeName": "n1"})
    bound["metadata"]["uid"] = "uid-p1"
    apiserver.put("pods", bound)
    await eventually(lambda: bool(index.layers_of("n1")), "in-flight layers on n1")
    assert preferred(await running.review(pod([APP.ref]))) == {"n1": 290 * MiB}

    # Entries expire after inflight_seconds when nothing reports the image.
    running.clock.now += 61
    assert running.inventory.expire_inflight() == 1
    assert not index.layers_of("n1")

    # ...and are dropped as soon as the node reports the image itself.
    bound2 = pod([APP.ref], name="p2", spec={"nodeName": "n2"})
    bound2["metadata"]["uid"] = "uid-p2"
    apiserver.put("pods", bound2)
    await eventually(lambda: bool(index.layers_of("n2")), "in-flight layers on n2")
    apiserver.put("nodes", node_object("n2", [APP]))
    await eventually(lambda: bool(getattr(index.node("n2"), "images", ())),
                     "n2 reports the image")
    running.clock.now += 3600
    assert running.inventory.expire_inflight() == 0, "reported images are not in flight"
    assert index.layers_of("n2")


async def test_unknown_node_images_resolve_in_the_background(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """An image no source knows at first is re-resolved and indexed once a source learns it."""

    class LateSource:
        def __init__(self) -> None:
            self.known: StaticCatalog = StaticCatalog()
            self.learned = asyncio.Event()

        def cached(self, ref: Any) -> Any:
            return self.known.cached(ref)

        async def resolve(self, ref: Any) -> Any:
            await self.learned.wait()
            self.known = CATALOG
            return CATALOG.cached(ref)

    source = LateSource()
    apiserver.put("nodes", node_object("n1", [APP]))
    api = core_api(str(apiserver.kubeconfig(tmp_path / "kubeconfig")), in_cluster=False)
    inventory = LiveInventory(api, [source])
    task = asyncio.create_task(inventory.run())
    try:
        await eventually(lambda: inventory.ready, "ready")
        assert not inventory.index.layers_of("n1")
        source.learned.set()
        await eventually(lambda: bool(inventory.index.layers_of("n1")), "resolved later")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_streams_that_close_at_once_back_off(
    apiserver: FakeApiServer, live: Callable[..., Any]
) -> None:
    """A proxy that ends every watch immediately must not turn into a reconnect storm: each
    empty stream counts as a restart and waits a backoff before the next watch."""
    apiserver.put("nodes", node_object("n0"))
    apiserver.close_watches_at_once = True
    running: Running = await live()
    await eventually(lambda: running.metric("layer_locality_watch_restarts_total",
                                            resource="nodes") >= 3, "restarts counted")
    restarts = running.metric("layer_locality_watch_restarts_total", resource="nodes")
    # every watch but the one in progress ended empty and was followed by a backoff
    assert apiserver.watch_calls["nodes"] <= restarts + 1
    apiserver.close_watches_at_once = False
    apiserver.put("nodes", node_object("n1"))
    await eventually(lambda: running.inventory.index.node("n1") is not None, "recovered")


async def test_a_crashing_loop_is_restarted_not_fatal(
    apiserver: FakeApiServer, live: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    running: Running = await live(inflight_seconds=0.4)  # the expiry loop ticks every 0.1 s
    await eventually(lambda: running.inventory.ready, "ready")
    calls = []

    def broken() -> int:
        calls.append(1)
        raise RuntimeError("bug in expiry")

    monkeypatch.setattr(running.inventory, "expire_inflight", broken)
    await eventually(lambda: len(calls) >= 2, "expiry loop restarted after crashing")
    apiserver.put("nodes", node_object("n5", [APP]))
    await eventually(lambda: running.inventory.index.node("n5") is not None,
                     "the watches kept running")
