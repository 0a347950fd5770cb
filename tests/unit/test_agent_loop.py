"""The agent loop with its three writers (webhook/agent/loop.py): a fake runtime source, the
real Publisher, NodeLabeler and LeaseRenewer over fake APIs with the API server's rules. A burst
of image events makes one pass, one object write and one label patch; an unchanged pass writes
nothing; a failed label patch is retried with backoff, a refused one waits for the next pass;
the Lease is written only once the first publish succeeded."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.unit.test_agent_labels import OTHER, Nodes, digest, key
from tests.unit.test_agent_lease import NAMESPACE, Leases
from tests.unit.test_agent_nodelayers import FakeApi
from webhook.agent.labels import NodeLabeler
from webhook.agent.lease import LeaseRenewer, LeaseSettings
from webhook.agent.loop import Agent, AgentSettings
from webhook.agent.metrics import AgentMetrics
from webhook.agent.nodelayers import NodeRef, RuntimeImage
from webhook.agent.publish import Publisher, PublishError
from webhook.agent.source import Snapshot
from webhook.core.layerlabels import LabelRule
from webhook.core.layers import Layer, Platform

MiB = 1 << 20
AMD64 = Platform("linux", "amd64")
FAST = AgentSettings(resync_seconds=3600, debounce_seconds=0.05, min_publish_seconds=0.0,
                     backoff_initial=0.02, backoff_max=0.1)


def runtime_image(name: str, *layers: tuple[int, int]) -> RuntimeImage:
    parts = tuple(Layer(digest(n), size) for n, size in layers)
    return RuntimeImage(name, digest(1000 + len(name)), digest(2000 + len(name)), parts)


class Source:
    """A RuntimeSource whose images the test sets and whose events it sends."""

    runtime = "containerd"

    def __init__(self, *images: RuntimeImage) -> None:
        self.images = list(images)
        self.events: asyncio.Queue[str] = asyncio.Queue()
        self.passes = 0

    async def snapshot(self, platform: Platform) -> Snapshot:
        self.passes += 1
        return Snapshot(tuple(self.images), 0)

    async def changes(self) -> AsyncIterator[str]:
        while True:
            yield await self.events.get()

    async def close(self) -> None:
        pass


class World:
    def __init__(self, *images: RuntimeImage) -> None:
        self.source = Source(*images)
        self.objects, self.nodes, self.leases = FakeApi(), Nodes(OTHER), Leases()
        self.metrics = AgentMetrics()
        self.node = NodeRef("node-a", "uid-n")
        self.lease = LeaseRenewer(self.leases, self.node,
                                  LeaseSettings(NAMESPACE, 60), self.metrics)
        self.publisher = Publisher(self.objects, refresh=lambda: not self.lease.held)
        self.publish_failures = 0

        async def publish(body: dict[str, Any]) -> bool:
            if self.publish_failures:
                self.publish_failures -= 1
                raise PublishError("refused")
            return await asyncio.to_thread(self.publisher.publish, body)

        self.agent = Agent(self.source, self.node, AMD64, FAST, publish, self.metrics,
                           NodeLabeler(self.nodes, "node-a", LabelRule(), dict(OTHER),
                                       self.metrics), self.lease)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        task = asyncio.create_task(self.agent.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def layer_labels(self) -> dict[str, str]:
        return {k: v for k, v in self.nodes.labels.items() if k not in OTHER}


async def eventually(check: Callable[[], bool], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + 5
    while not check():
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


async def test_a_burst_is_one_pass_one_write_one_patch_and_no_change_writes_nothing() -> None:
    world = World(runtime_image("app:1", (1, 40 * MiB), (2, 1 * MiB)))
    async with world.running():
        await eventually(lambda: world.agent.ready.is_set() and world.leases.objects != {},
                         "the first publish and the Lease")
        assert world.nodes.patches == [{key(1): "40"}]
        assert world.objects.calls == ["get", "create"]
        passes = world.source.passes

        world.source.images.append(runtime_image("db:2", (1, 40 * MiB), (3, 64 * MiB)))
        for _ in range(5):  # a pull emits several events at once
            world.source.events.put_nowait("/images/create")
        await eventually(lambda: len(world.nodes.patches) == 2, "the new layer's label")
        await asyncio.sleep(0.2)  # anything more the burst would cause has happened by now
        assert world.source.passes == passes + 1
        assert world.objects.calls == ["get", "create", "replace"]
        assert world.nodes.patches[1] == {key(3): "64"}

        # Another name for content already there: the object changes, the labels do not.
        world.source.images.append(runtime_image("db:latest", (1, 40 * MiB), (3, 64 * MiB)))
        world.source.events.put_nowait("/images/update")
        await eventually(lambda: world.objects.calls[-1:] == ["replace"]
                         and len(world.objects.calls) == 4, "the object's write")
        # A pass with nothing changed: no call at all.
        world.source.events.put_nowait("/images/update")
        await eventually(lambda: world.source.passes == passes + 3, "the third pass")
        await asyncio.sleep(0.1)
    assert len(world.objects.calls) == 4
    assert len(world.nodes.patches) == 2
    assert world.layer_labels() == {key(1): "40", key(3): "64"}
    assert world.nodes.calls == ["patch", "patch"]  # never a read
    assert world.metrics.label_patches._value.get() == 2


async def test_a_failed_label_patch_is_retried_with_backoff() -> None:
    world = World(runtime_image("app:1", (1, 40 * MiB)))
    world.nodes.fail = [500, 503]
    async with world.running():
        await eventually(lambda: world.layer_labels() == {key(1): "40"}, "the label, at last")
    assert world.metrics.label_patch_failures._value.get() == 2
    # Each retry reads the Node first: the failed patch might have landed.
    assert world.nodes.calls == ["patch", "read", "patch", "read", "patch"]


async def test_a_refused_label_patch_waits_for_the_next_pass() -> None:
    world = World(runtime_image("app:1", (1, 40 * MiB)))
    world.nodes.fail = [403]
    assert await world.agent.label({digest(1): 40 * MiB})  # no quick retry
    world.nodes.fail = [500]
    assert not await world.agent.label({digest(1): 40 * MiB})  # retried soon
    assert await world.agent.label({digest(1): 40 * MiB})
    assert world.layer_labels() == {key(1): "40"}


async def test_the_lease_waits_for_the_first_publish() -> None:
    world = World(runtime_image("app:1", (1, 40 * MiB)))
    world.publish_failures = 3
    async with world.running():
        await eventually(lambda: world.metrics.publish_failures._value.get() == 3,
                         "three refused publishes")
        assert world.leases.calls == []
        await eventually(lambda: world.leases.objects != {}, "the Lease")
    lease = world.leases.objects["node-a"]
    assert lease["spec"]["holderIdentity"] == "node-a"
    assert world.metrics.lease_renewals._value.get() == 1
