"""The live inventory with NodeLayers objects (what `layer-locality agent` publishes), through the
real `kubernetes` client against the stand-in API server (tests/kit/apiserver.py: an absent
CRD and exact timings on demand; the CRD schema, the agent's policy and real tokens are tested on
the real control plane in test_cluster_nodelayers.py). The nodes' status lists no images, no
catalog, no registry (--offline): everything the webhook knows about layers comes from the
objects."""

from __future__ import annotations

import asyncio
import logging
import signal
import ssl
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from tests.helpers import (
    AMD64,
    ARM64,
    Clock,
    apply_patch,
    decode_patch,
    image,
    node_object,
    pod,
    review,
    validate_pod,
)
from tests.kit.apiserver import FakeApiServer, eventually
from tests.nodelayers_helpers import APP, LIB, SIZES, T0, nodelayers_object
from webhook.core.admission import parse_review
from webhook.core.images import parse_image
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.devcluster.processes import free_port
from webhook.inventory.kube import core_api
from webhook.inventory.live import LiveInventory, WatchSettings
from webhook.serving.certs import CertificateFiles
from webhook.serving.metrics import Metrics
from webhook.serving.mutate import Mutator, Outcome

RESYNC = 300




class Running:
    def __init__(self, inventory: LiveInventory, wall: Clock, metrics: Metrics) -> None:
        self.inventory = inventory
        self.wall = wall
        self.metrics = metrics
        # What `serve --offline` builds (webhook/serving/wiring.py): an empty catalog, then the
        # images the node agents publish.
        # Weighed by share: these tests read which nodes hold what, not how steeply.
        self.mutator = Mutator([inventory.node_images], inventory,
                               ScoringPolicy(lack_bytes=0))

    async def review(self, obj: dict[str, Any]) -> Outcome:
        return await self.mutator.review(parse_review(orjson.dumps(review(obj))))

    async def preferred(self) -> dict[str, int]:
        outcome = await self.review(pod([APP.ref]))
        if outcome.patch:
            validate_pod(apply_patch(pod([APP.ref]), list(outcome.patch)))
        return {nb.node.name: nb.bytes_present for nb in outcome.nodes}

    def metric(self, name: str, **labels: str) -> float | None:
        return self.metrics.registry.get_sample_value(name, labels)


@pytest.fixture
async def live(apiserver: FakeApiServer, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    tasks: list[asyncio.Task[None]] = []

    async def start() -> Running:
        api = core_api(str(apiserver.kubeconfig(tmp_path / "kubeconfig")), in_cluster=False)
        wall = Clock(T0)
        metrics = Metrics()
        inventory = LiveInventory(
            api, [], WatchSettings(
                page_size=2, backoff_initial=0.05, backoff_max=0.2,
                nodelayers_absent_retry_seconds=0.05),
            metrics=metrics.live_inventory(), wall_clock=wall)
        tasks.append(asyncio.create_task(inventory.run()))
        return Running(inventory, wall, metrics)

    yield start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def total(*labels: str) -> int:
    return sum(SIZES[label] for label in labels)


async def test_fresh_objects_score_stale_and_deleted_fall_back(
    apiserver: FakeApiServer, live: Callable[..., Any]
) -> None:
    for name in ("n0", "n1", "n2", "n3"):
        apiserver.put("nodes", node_object(name))  # status lists no image at all
    # n1 holds the pod's image (its name is in the object); n2 only the image it is built on.
    apiserver.put("nodelayers", nodelayers_object("n1", [APP], AMD64, T0 - 800, RESYNC))
    apiserver.put("nodelayers", nodelayers_object("n2", [LIB], AMD64, T0, RESYNC))
    running: Running = await live()
    index = running.inventory.index
    await eventually(lambda: running.inventory.ready and bool(index.layers_of("n1"))
                     and bool(index.layers_of("n2")), "objects indexed")

    assert await running.preferred() == {"n1": total("os", "python", "app"),
                                         "n2": total("os", "python")}
    outcome = await running.review(pod([APP.ref]))
    weights = {nb.node.name: nb.weight for nb in outcome.nodes}
    assert weights["n1"] > weights["n2"] > 0
    assert running.metric("layer_locality_nodelayers_objects", state="fresh") == 2
    assert running.metric("layer_locality_nodelayers_crd_present") == 1

    # 101 s later n1's heartbeat is 901 s old (> 3 x 300): no event says so, the expiry
    # check finds it; n1 falls back to node status (nothing), the pod still resolves.
    running.wall.now = T0 + 101
    assert running.inventory.nodelayers.expire() == 1
    assert not index.layers_of("n1")
    assert await running.preferred() == {"n2": total("os", "python")}
    assert running.metric("layer_locality_nodelayers_objects", state="stale") == 1

    # The agent comes back (a heartbeat): fresh again.
    apiserver.put("nodelayers", nodelayers_object("n1", [APP], AMD64, T0 + 100, RESYNC))
    await eventually(lambda: bool(index.layers_of("n1")), "n1 fresh again")
    assert (await running.preferred())["n1"] == total("os", "python", "app")

    # Deleting an object (its node went, or the agent was uninstalled) falls back too.
    apiserver.delete("nodelayers", "n2")
    await eventually(lambda: not index.layers_of("n2"), "n2 object deleted")
    assert await running.preferred() == {"n1": total("os", "python", "app")}


async def test_union_with_node_status_and_platform_mismatch(
    apiserver: FakeApiServer, live: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="webhook.inventory")
    extra = image("registry.example.com/team/extra:1", {AMD64: [("extra", 10 * MiB)]})
    apiserver.put("nodes", node_object("n1", [extra]))  # status: an image the object lacks
    apiserver.put("nodes", node_object("arm", platform=ARM64))
    apiserver.put("nodelayers", nodelayers_object("n1", [APP, extra], AMD64, T0, RESYNC,
                                                  names={extra.ref: ["other/name:9"]}))
    apiserver.put("nodelayers", nodelayers_object("arm", [APP], AMD64, T0, RESYNC))
    running: Running = await live()
    index = running.inventory.index
    await eventually(lambda: len(index.layers_of("n1")) == 4, "n1: object + status")
    # The status image resolved through the object's digest name (repo@digest), not its tag.
    assert index.layers_of("n1") == {layer.digest for i in (APP, extra)
                                     for layer in i.platforms[AMD64].layers}
    # An amd64 object for an arm64 node is ignored, with one line however often it is seen.
    apiserver.put("nodelayers", nodelayers_object("arm", [APP], AMD64, T0 + 1, RESYNC))
    await eventually(lambda: apiserver.watchers("nodelayers") == 1, "watching")
    assert not index.layers_of("arm")
    lines = [r for r in caplog.records if "platform linux/amd64" in r.getMessage()]
    assert len(lines) == 1


async def test_crd_absent_logs_once_stays_ready_and_is_found_later(
    apiserver: FakeApiServer, live: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="webhook.inventory")
    apiserver.crd_installed = False
    apiserver.put("nodes", node_object("n1"))
    running: Running = await live()
    await eventually(lambda: running.inventory.ready, "ready without the CRD")
    await eventually(lambda: apiserver.list_calls["nodelayers"] >= 3, "listed again")
    absent = [r for r in caplog.records if "not installed" in r.getMessage()]
    assert len(absent) == 1, [r.getMessage() for r in caplog.records]
    assert running.metric("layer_locality_nodelayers_crd_present") == 0
    assert running.metric("layer_locality_watch_restarts_total", resource="nodelayers") in (
        None, 0), "an absent CRD is not a failing watch"

    # Installed later: the next retry finds it, objects count from then on.
    apiserver.crd_installed = True
    apiserver.put("nodelayers", nodelayers_object("n1", [APP], AMD64, T0, RESYNC))
    await eventually(lambda: bool(running.inventory.index.layers_of("n1")), "found later")
    assert running.metric("layer_locality_nodelayers_crd_present") == 1


async def test_rejected_objects_are_counted_and_ignored(
    apiserver: FakeApiServer, live: Callable[..., Any]
) -> None:
    apiserver.put("nodes", node_object("n1"))
    bad = nodelayers_object("n1", [APP], AMD64, T0, RESYNC)
    bad["spec"]["images"][0]["layers"] = [99]  # an index past spec.layers
    apiserver.put("nodelayers", bad)
    running: Running = await live()
    await eventually(lambda: running.metric("layer_locality_nodelayers_rejected_total",
                                            reason="images") == 1, "rejected")
    assert not running.inventory.index.layers_of("n1")
    assert running.inventory.node_images.cached(parse_image(APP.ref)) is None


async def test_stand_in_serves_what_the_agent_writes(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """The stand-in's create/get/replace through the real client's CustomObjectsApi, as the
    agent publishes: a replace with an old resourceVersion conflicts (409); without the CRD
    every call is a 404."""
    from kubernetes.client import CustomObjectsApi
    from kubernetes.client.exceptions import ApiException

    api: Any = CustomObjectsApi(core_api(str(apiserver.kubeconfig(tmp_path / "kubeconfig")),
                                    in_cluster=False).api_client)
    args = ("layer-locality.io", "v1alpha1", "nodelayers")
    body = nodelayers_object("n1", [APP], AMD64, T0, RESYNC)

    def calls() -> None:
        created = api.create_cluster_custom_object(*args, body)
        with pytest.raises(ApiException) as exists:
            api.create_cluster_custom_object(*args, body)
        assert exists.value.status == 409
        current = api.get_cluster_custom_object(*args, "n1")
        assert current["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
        current["spec"]["heartbeat"] = "2027-01-15T08:00:00Z"
        replaced = api.replace_cluster_custom_object(*args, "n1", current)
        assert replaced["spec"]["heartbeat"] == "2027-01-15T08:00:00Z"
        with pytest.raises(ApiException) as stale:
            api.replace_cluster_custom_object(*args, "n1", current)  # the old version
        assert stale.value.status == 409
        apiserver.crd_installed = False
        with pytest.raises(ApiException) as absent:
            api.get_cluster_custom_object(*args, "n1")
        assert absent.value.status == 404

    await asyncio.to_thread(calls)
    assert apiserver.writes["nodelayers"] == [("create", "n1"), ("create", "n1"),
                                              ("replace", "n1"), ("replace", "n1")]


async def test_serve_process_offline_scores_from_nodelayers(
    apiserver: FakeApiServer, tls_files: CertificateFiles, tmp_path: Path
) -> None:
    """`serve --offline` as a real process, no catalog, no registry, node status empty: the
    pod's image is known only from a NodeLayers object, and so are the nodes' layers."""
    now = time.time()
    for name in ("n0", "n1", "n2"):
        apiserver.put("nodes", node_object(name))
    apiserver.put("nodelayers", nodelayers_object("n1", [APP], AMD64, now, RESYNC))
    apiserver.put("nodelayers", nodelayers_object("n2", [LIB], AMD64, now, RESYNC))
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "webhook", "serve", "--listen", f"127.0.0.1:{port}",
        "--kubeconfig", str(apiserver.kubeconfig(tmp_path / "kubeconfig")), "--offline",
        "--lack-bytes", "0",  # by share: the partial holder is named too
        "--tls-cert", str(tls_files.cert), "--tls-key", str(tls_files.key), stderr=log)
    context = ssl.create_default_context(cafile=str(tls_files.ca_cert))
    expected = {"n1": total("os", "python", "app"), "n2": total("os", "python")}
    seen: dict[str, int] = {}
    try:
        async with aiohttp.ClientSession() as session:
            for _ in range(600):  # bounded chances, not a timing assertion
                assert proc.returncode is None, "server exited"
                seen = await _decision_top(session, f"https://127.0.0.1:{port}", context)
                if seen == expected:
                    break
                await asyncio.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        exit_code = await asyncio.wait_for(proc.wait(), 30)
        log.close()
    assert seen == expected, (tmp_path / "serve.log").read_text()
    assert exit_code == 0
    assert apiserver.watch_calls["nodelayers"] >= 1


async def _decision_top(session: aiohttp.ClientSession, base: str,
                        context: ssl.SSLContext) -> dict[str, int]:
    try:
        async with session.post(base + "/mutate", data=orjson.dumps(review(pod([APP.ref]))),
                                ssl=context,
                                headers={"Content-Type": "application/json"}) as resp:
            answer = await resp.json()
    except aiohttp.ClientConnectionError:
        return {}
    for op in decode_patch(answer):
        if op["path"].startswith("/metadata"):
            decision = orjson.loads(op["value"]["layer-locality.io/decision"])
            return {t["node"]: t["bytes"] for t in decision["top"]}
    return {}


async def test_a_lying_or_future_object_teaches_nothing_and_cannot_stay_fresh(
    apiserver: FakeApiServer, live: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    """Review findings: an object whose platform is not its node's must not feed the shared
    image source (every review reads it); a heartbeat ahead of our clock counts from when it
    arrived, so a dead agent with a fast clock goes stale like any other."""
    caplog.set_level(logging.INFO, logger="webhook.inventory")
    lie = image("registry.example.com/team/lie:1", {AMD64: [("lie", 50 * MiB)]})
    apiserver.put("nodes", node_object("arm", platform=ARM64))
    apiserver.put("nodes", node_object("n1"))
    running: Running = await live()
    index = running.inventory.index
    await eventually(lambda: running.inventory.ready and len(index) == 2, "nodes listed")
    apiserver.put("nodelayers", nodelayers_object("arm", [lie], AMD64, T0, RESYNC))
    await eventually(lambda: any("platform linux/amd64" in r.getMessage()
                                 for r in caplog.records), "the mismatch seen")
    assert running.inventory.node_images.cached(parse_image(lie.ref)) is None

    # n1's agent writes a heartbeat 10,000 s ahead; 3 x 300 s after it arrived it is stale.
    apiserver.put("nodelayers", nodelayers_object("n1", [APP], AMD64, T0 + 10_000, RESYNC))
    await eventually(lambda: bool(index.layers_of("n1")), "n1 indexed")
    running.wall.now = T0 + 3 * RESYNC + 1
    assert running.inventory.nodelayers.expire() == 1
    assert not index.layers_of("n1")
