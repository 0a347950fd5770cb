"""The node agent against Debian's real containerd (started as root by the fixture, socket under a
temp dir) holding images pulled from the real docker-registry on 127.0.0.1. Publishing goes
through the real kubernetes client to the stand-in API server (tests/kit/apiserver.py: no
real API server can run here)."""


from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.integration.containerd_fixture import (
    push_image,
    push_node_images,
    require_containerd,
    tar_layer,
)
from tests.integration.registry_fixture import (
    RegistryServer,
    require_registry_binary,
    start_registry,
)
from tests.integration.registry_images_fixture import (
    PushedImage,
    Pusher,
)
from tests.kit.apiserver import FakeApiServer, eventually
from tests.kit.containerd import Containerd
from tests.nodelayers_helpers import spec_layer_pairs
from webhook.agent.containerd import ContainerdSource
from webhook.agent.loop import Agent, AgentSettings
from webhook.agent.nodelayers import NodeRef
from webhook.agent.publish import Publisher
from webhook.core.layers import Platform
from webhook.inventory.nodelayers import GROUP, PLURAL, VERSION

AMD64 = Platform("linux", "amd64")
FAST = AgentSettings(resync_seconds=300, debounce_seconds=0.2, backoff_initial=0.05,
                     backoff_max=0.5)

@dataclass
class Node:
    registry: RegistryServer
    containerd: Containerd
    images: dict[str, PushedImage]
    pusher: Pusher

@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Node]:
    daemon, ctr = require_containerd()
    binary = require_registry_binary()
    root = tmp_path_factory.mktemp("agent")
    registry = start_registry(binary, root / "registry", root / "storage")
    containerd = Containerd(daemon, ctr, root / "containerd")
    try:
        pusher = Pusher(registry.url)
        images = push_node_images(pusher)
        containerd.start()
        containerd.pull(*(image.ref(registry.host) for image in images.values()))
        yield Node(registry, containerd, images, pusher)
    finally:
        containerd.stop()
        registry.stop()

def expected(node: Node) -> dict[str, tuple[str, str, list[tuple[str, int]]]]:
    """name -> (digest, amd64 manifest, layers), from what was pushed."""
    return {image.ref(node.registry.host): (image.digest, image.platform("linux/amd64").digest,
                                            list(image.platform("linux/amd64").layers))
            for image in node.images.values()}

def published_images(obj: dict[str, Any]) -> dict[str, tuple[str, str, list[tuple[str, int]]]]:
    layers = spec_layer_pairs(obj["spec"])
    return {name: (image["digest"], image["manifest"], [layers[i] for i in image["layers"]])
            for image in obj["spec"]["images"] for name in image["names"]}

def run_print(socket: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "webhook", "agent", "--once", "--print", "--node-name", "node-a",
         "--containerd-socket", str(socket)], capture_output=True, timeout=120, check=True)
    result: dict[str, Any] = orjson.loads(done.stdout)
    return result

def test_print_lists_every_image_with_its_layers(node: Node) -> None:
    obj = run_print(node.containerd.socket)
    assert len(node.images) > 50
    assert published_images(obj) == expected(node)
    spec = obj["spec"]
    assert (spec["nodeName"], spec["runtime"], spec["platform"]) == ("node-a", "containerd",
                                                                       "linux/amd64")
    # Layers appear once: the shared base and the layer common to the many small images.
    assert "layers" not in spec  # the packed table: every digest is sha256
    digests = [digest for digest, _ in spec_layer_pairs(spec)]
    assert digests == sorted(set(digests))
    every = {layer for _, _, layers in expected(node).values() for layer in layers}
    assert set(spec_layer_pairs(spec)) == every
    assert spec["truncated"] == {"images": 0, "layers": 0}
    assert obj["metadata"] == {"name": "node-a"}  # --print reads no Node: no ownerReference

async def test_missing_manifest_blob_is_skipped_and_counted(node: Node) -> None:
    victim = node.images["app1"]
    node.containerd.ctr("content", "rm", victim.digest)
    try:
        source = ContainerdSource(str(node.containerd.socket))
        agent = Agent(source, NodeRef("node-a"), AMD64, FAST)
        obj = await agent.build()
        await source.close()
        assert agent.skipped == 1
        assert agent.metrics.skipped._value.get() == 1
        want = expected(node)
        del want[victim.ref(node.registry.host)]
        assert published_images(obj) == want
    finally:
        node.containerd.pull(victim.ref(node.registry.host))  # content back for other tests

@contextlib.asynccontextmanager
async def running(agent: Agent) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(agent.run())
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await agent.source.close()

async def test_restart_mid_run_reconnects_and_sees_a_new_pull(node: Node) -> None:
    seen: list[dict[str, Any]] = []

    async def publish(body: dict[str, Any]) -> bool:
        seen.append(body)
        return True

    agent = Agent(ContainerdSource(str(node.containerd.socket)), NodeRef("node-a"), AMD64, FAST,
                  publish)
    async with running(agent):
        await eventually(lambda: bool(seen), "a first publish")
        node.containerd.stop()
        await eventually(lambda: agent.metrics.outages._value.get() == 1, "the outage noticed")
        await asyncio.to_thread(node.containerd.start)
        new = push_image(node.pusher, "late/arrival", [tar_layer("late", 700)], "linux/amd64",
                         oci=True, tag="1")
        ref = f"{node.registry.host}/late/arrival:1"
        await asyncio.to_thread(node.containerd.pull, ref)
        await eventually(lambda: ref in published_images(seen[-1]), "the new image published")
    assert published_images(seen[-1])[ref] == (new.digest, new.digest, list(new.layers))
    node.images["late"] = PushedImage("late/arrival", "1", new.digest, (new,))  # now on the node
    assert agent.metrics.outages._value.get() == 1

async def test_socket_absent_at_start_backs_off_then_succeeds(
        node: Node, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    late = Containerd(node.containerd.binary, node.containerd.ctr_binary, tmp_path / "late")
    agent = Agent(ContainerdSource(str(late.socket)), NodeRef("node-b"), AMD64, FAST)
    caplog.set_level(logging.INFO, "webhook.agent")
    building = asyncio.create_task(agent.build_when_available())
    try:
        await eventually(lambda: agent.metrics.outages._value.get() == 1, "the outage counted")
        await asyncio.sleep(1.0)  # several backoff rounds while the socket is absent
        await asyncio.to_thread(late.start)
        obj = await asyncio.wait_for(building, 30)
    finally:
        late.stop()
        await agent.source.close()
    assert obj["spec"]["images"] == []  # a fresh containerd holds no image
    unreachable = [r for r in caplog.records if "unreachable" in r.getMessage()]
    assert len(unreachable) == 1, [r.getMessage() for r in unreachable]
    assert agent.metrics.outages._value.get() == 1

@contextlib.asynccontextmanager
async def stand_in_with_nodelayers() -> AsyncIterator[FakeApiServer]:
    server = FakeApiServer()
    server.serve_custom(GROUP, VERSION, PLURAL)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def publishing_agent(node: Node, kubeconfig: Path) -> tuple[Agent, Publisher]:
    """node-a's agent on the fixture's containerd, publishing through the real client."""
    from kubernetes import client

    from webhook.agent.command import _api_client

    publisher = Publisher(client.CustomObjectsApi(_api_client(str(kubeconfig), {})))

    async def publish(body: dict[str, Any]) -> bool:
        return await asyncio.to_thread(publisher.publish, body)

    agent = Agent(ContainerdSource(str(node.containerd.socket)), NodeRef("node-a"), AMD64,
                  FAST, publish)
    return agent, publisher


async def test_rejected_publish_is_retried_and_counted(node: Node, tmp_path: Path) -> None:
    async with stand_in_with_nodelayers() as apiserver:
        apiserver.fail(PLURAL, "create", 500, times=2)
        agent, publisher = publishing_agent(node, apiserver.kubeconfig(tmp_path / "kubeconfig"))
        async with running(agent):
            await asyncio.wait_for(agent.ready.wait(), 30)
        stored = apiserver.custom[PLURAL]["node-a"]
    assert agent.metrics.publish_failures._value.get() == 2
    assert publisher.written == 1
    assert published_images(stored) == expected(node)
    assert tuple(stored["apiVersion"].split("/")) == (GROUP, VERSION)


async def test_the_webhook_prefers_the_node_whose_agent_saw_the_image(
    node: Node, tmp_path: Path
) -> None:
    """End to end: the agent reads the real containerd of node-a and publishes through the real
    kubernetes client; the webhook's live inventory (no catalog, no registry: --offline) reads
    the NodeLayers object and prefers node-a for a pod running app1, which node status does not
    list (it lists nothing), with the bytes that were pushed."""
    from tests.helpers import apply_patch, node_object, pod, review, validate_pod
    from webhook.core.admission import parse_review
    from webhook.core.scoring import ScoringPolicy
    from webhook.inventory.kube import core_api
    from webhook.inventory.live import LiveInventory, WatchSettings
    from webhook.serving.mutate import Mutator

    async with stand_in_with_nodelayers() as apiserver:
        for name in ("node-a", "node-b"):
            apiserver.put("nodes", node_object(name))  # node status: no images at all
        config = apiserver.kubeconfig(tmp_path / "kubeconfig")
        agent, _ = publishing_agent(node, config)
        async with running(agent):
            await asyncio.wait_for(agent.ready.wait(), 30)

        inventory = LiveInventory(core_api(str(config), in_cluster=False), [], WatchSettings(
            backoff_initial=0.05, backoff_max=0.2))
        task = asyncio.create_task(inventory.run())
        try:
            app = node.images["app1"]
            name = app.ref(node.registry.host)
            # Ready (every resource listed and watched), not only node-a indexed: a review
            # before that is answered not_synced, failing open.
            await eventually(
                lambda: inventory.ready and bool(inventory.index.layers_of("node-a")),
                "node-a indexed and the inventory synced")
            # The test images are small: no floor, so their bytes decide.
            mutator = Mutator([inventory.node_images], inventory, ScoringPolicy(min_bytes=0))
            obj = pod([name])
            outcome = await mutator.review(parse_review(orjson.dumps(review(obj))))
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert outcome.result == "patched", outcome.reason
    pushed = sum(size for _, size in app.platform("linux/amd64").layers)
    assert {score.node.name: score.bytes_present for score in outcome.nodes} == {
        "node-a": pushed}
    validate_pod(apply_patch(obj, list(outcome.patch)))
