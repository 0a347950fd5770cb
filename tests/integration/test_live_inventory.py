"""The live inventory against a stand-in API server (see tests/kit/apiserver.py: 410s, dropped
streams and pagination on demand; restarts of the real one: test_cluster_restarts.py), through
the real `kubernetes` client and a generated kubeconfig."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers import AMD64, Clock, apply_patch, image, node_object, pod, review, validate_pod
from tests.kit.apiserver import FakeApiServer, eventually, running_fake
from webhook.core.admission import parse_review
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.inventory.kube import core_api
from webhook.inventory.live import LiveInventory, WatchSettings
from webhook.registry.catalog import StaticCatalog
from webhook.serving.metrics import Metrics
from webhook.serving.mutate import Mutator, Outcome

BASE = image("registry.example.com/team/base:1", {AMD64: [("base", 200 * MiB)]})
APP = image("registry.example.com/team/app:1", {AMD64: [("base", 200 * MiB), ("app", 90 * MiB)]})
CATALOG = StaticCatalog([BASE, APP])




@pytest.fixture
async def apiserver() -> AsyncIterator[FakeApiServer]:
    async for server in running_fake():
        yield server


class Running:
    def __init__(self, inventory: LiveInventory, task: asyncio.Task[None], clock: Clock,
                 metrics: Metrics) -> None:
        self.inventory = inventory
        self.task = task
        self.clock = clock
        self.metrics = metrics
        # Weighed by share: these tests read which nodes hold what, not how steeply.
        self.mutator = Mutator([CATALOG], inventory, ScoringPolicy(lack_bytes=0))

    async def review(self, obj: dict[str, Any], dry_run: bool = False) -> Outcome:
        return await self.mutator.review(parse_review(orjson.dumps(review(obj, dry_run=dry_run))))

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels`."""
        return sum(sample.value for family in self.metrics.registry.collect()
                   for sample in family.samples
                   if sample.name == name and labels.items() <= sample.labels.items())


@pytest.fixture
async def live(apiserver: FakeApiServer, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    started: list[Running] = []

    async def start(inflight_seconds: float = 60, stale_seconds: float = 60) -> Running:
        api = core_api(str(apiserver.kubeconfig(tmp_path / "kubeconfig")), in_cluster=False)
        clock = Clock(1000.0)
        metrics = Metrics()
        inventory = LiveInventory(api, [CATALOG], WatchSettings(
            page_size=2, backoff_initial=0.05, backoff_max=0.2,
            inflight_seconds=inflight_seconds, stale_seconds=stale_seconds),
            metrics=metrics.live_inventory(), clock=clock)
        task = asyncio.create_task(inventory.run())
        running = Running(inventory, task, clock, metrics)
        started.append(running)
        return running

    yield start
    for running in started:
        running.task.cancel()
        await asyncio.gather(running.task, return_exceptions=True)


def preferred(outcome: Outcome) -> dict[str, int]:
    return {nb.node.name: nb.bytes_present for nb in outcome.nodes}


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
