"""Outcome telemetry in live mode: pods created, bound and deleted, and kubelet `Pulled` Events with
the kubelet's real wordings, streamed by the stand-in API server (tests/kit/apiserver.py:
events with exact wordings and timings on demand, which a real server without kubelets would not
send) to the live inventory through the real `kubernetes` client. Every expected metric value is
worked out by hand below."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers import AMD64, apply_patch, image, node_object, pod, review
from tests.kit.apiserver import FakeApiServer, eventually, running_fake
from webhook.core.admission import parse_review
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.inventory.kube import core_api
from webhook.inventory.live import LiveInventory, WatchSettings
from webhook.registry.catalog import StaticCatalog
from webhook.serving.metrics import Metrics
from webhook.serving.mutate import Mutator
from webhook.telemetry.recorder import Telemetry, recorder_for

BASE = image("registry.example.com/team/base:1", {AMD64: [("base", 200 * MiB)]})
APP = image("registry.example.com/team/app:1", {AMD64: [("base", 200 * MiB), ("app", 90 * MiB)]})
CATALOG = StaticCatalog([BASE, APP])
# Candidates at every review: full-a, full-b hold APP (290 MiB), part BASE (200), empty none.
MEAN = (290 + 290 + 200 + 0) * MiB // 4  # 195 MiB
Q = f'"{APP.ref}"'
# The kubelet's wordings (pkg/kubelet/images/image_manager.go, old to new).
OLD_PULLED = f"Successfully pulled image {Q} in 1m2.5s"
WAITING = f"Successfully pulled image {Q} in 3.1s (3.2s including waiting)"
SIZED = (f"Successfully pulled image {Q} in 1.5s (2.25s including waiting). "
         "Image size: 94371840 bytes.")
PRESENT = f"Container image {Q} already present on machine"
ACCESSIBLE = f"Container image {Q} already present on machine and can be accessed by the pod"


class Cluster:
    def __init__(self, server: FakeApiServer, inventory: LiveInventory, metrics: Metrics) -> None:
        self.server = server
        self.inventory = inventory
        self.metrics = metrics
        # By share: a partial holder is named, so a bind there is `preferred`.
        self.mutator = Mutator([CATALOG], inventory, ScoringPolicy(lack_bytes=0))
        self.reviews = 0

    @property
    def telemetry(self) -> Telemetry:
        assert isinstance(self.inventory.telemetry, Telemetry)
        return self.inventory.telemetry

    async def patched(self, name: str) -> dict[str, Any]:
        """A pod as the API server stores it after the webhook: patched, named, with a uid."""
        self.reviews += 1
        obj = pod([APP.ref], name=name)
        uid = f"00000000-0000-4000-8000-{self.reviews:012d}"
        outcome = await self.mutator.review(parse_review(orjson.dumps(review(obj, uid=uid))))
        assert outcome.result == "patched"
        obj = apply_patch(obj, list(outcome.patch))
        obj["metadata"]["uid"] = f"uid-{name}"
        return obj

    def bind(self, obj: dict[str, Any], node: str) -> None:
        obj["spec"]["nodeName"] = node
        obj["status"] = {"phase": "Pending"}
        self.server.put("pods", obj)

    def pulled(self, name: str, pod_name: str, message: str, count: int = 1,
               reason: str = "Pulled") -> None:
        self.server.put("events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": "default", "uid": f"ev-{name}"},
            "involvedObject": {"kind": "Pod", "namespace": "default", "name": pod_name,
                               "uid": f"uid-{pod_name}", "fieldPath": "spec.containers{c0}"},
            "reason": reason, "message": message, "count": count, "type": "Normal",
            "source": {"component": "kubelet"}})

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples `name` whose labels include `labels` (others, such as the
        holdout's `group`, added up)."""
        return sum(sample.value for family in self.metrics.registry.collect()
                   for sample in family.samples if sample.name == name
                   and all(sample.labels.get(k) == v for k, v in labels.items()))


def listening(telemetry: Telemetry) -> Callable[[], bool]:
    """Whether the first pod and event lists are in: what follows is counted."""
    return lambda: telemetry.counting_binds and telemetry.counting_pulls


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async for server in running_fake():
        server.put("nodes", node_object("full-a", [APP]))
        server.put("nodes", node_object("full-b", [APP]))
        server.put("nodes", node_object("part", [BASE]))
        server.put("nodes", node_object("empty"))
        # Before the webhook watched: a patched pod bound, its pull event recorded.
        earlier = pod([APP.ref], name="earlier", metadata={"uid": "uid-earlier", "annotations": {
            "layer-locality.io/decision": '{"v":2,"podBytes":1,"meanBytes":0,"terms":1}'}})
        earlier["spec"].update(nodeName="full-b")
        server.put("pods", earlier)
        metrics = Metrics()
        inventory_metrics = metrics.live_inventory()
        api = core_api(str(server.kubeconfig(tmp_path / "kubeconfig")), in_cluster=False)
        inventory = LiveInventory(api, [CATALOG], WatchSettings(
            backoff_initial=0.05, backoff_max=0.2), metrics=inventory_metrics,
            telemetry=recorder_for(inventory_metrics.telemetry))
        running = Cluster(server, inventory, metrics)
        running.pulled("earlier", "earlier", PRESENT)
        task = asyncio.create_task(inventory.run())
        try:
            await asyncio.wait_for(inventory.wait_ready(), timeout=10)
            await eventually(listening(running.telemetry), "first lists")
            yield running
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_binds_and_pulls_from_the_watches(cluster: Cluster) -> None:
    # Every review before any bind: each decision's meanBytes is MEAN.
    a, b, c, e = [await cluster.patched(name) for name in ("a", "b", "c", "e")]
    cluster.bind(a, "full-a")  # top: holds the whole pod (290 of 290 MiB)
    cluster.bind(b, "part")  # preferred: 200 of 290 MiB
    cluster.bind(c, "empty")  # other: nothing
    plain = pod([APP.ref], name="d", metadata={"uid": "uid-d"})  # not patched (not opted in)
    cluster.bind(plain, "empty")
    await eventually(lambda: cluster.telemetry.tracked[0] == 5, "binds seen")

    # The event arrives before its pod is seen bound: it waits for the pod.
    cluster.pulled("e", "e", PRESENT)
    await eventually(lambda: cluster.telemetry.tracked[2] == 1, "orphan held")
    cluster.bind(e, "full-b")  # top
    cluster.pulled("a", "a", ACCESSIBLE)
    cluster.pulled("b", "b", SIZED)
    cluster.pulled("c", "c", WAITING)
    cluster.pulled("d", "d", OLD_PULLED)
    cluster.pulled("d2", "d", PRESENT)
    cluster.pulled("garbage", "d", f"Successfully pulled image {Q} quickly")
    cluster.pulled("pulling", "d", f"Pulling image {Q}", reason="Pulling")  # not selected
    cluster.pulled("a", "a", ACCESSIBLE)  # an update with the same count: no new pull
    cluster.pulled("a", "a", ACCESSIBLE, count=2)  # the container restarted: one more
    cluster.pulled("earlier", "earlier", PRESENT, count=2)  # listed at 1: one more
    await eventually(lambda: cluster.value("layer_locality_pull_events_unparsed_total") == 1
                     and cluster.value("layer_locality_image_pulls_total", patched="true",
                                       result="present") == 4, "events seen")

    binds = {o: cluster.value("layer_locality_binds_total", outcome=o)
             for o in ("top", "preferred", "other")}
    assert binds == {"top": 2, "preferred": 1, "other": 1}  # a, e; b; c (d has no decision)
    ratio = "layer_locality_bind_present_ratio"
    assert cluster.value(f"{ratio}_count") == 4
    assert cluster.value(f"{ratio}_sum") == pytest.approx(1 + 200 / 290 + 0 + 1)
    assert cluster.value(f"{ratio}_bucket", le="0.0") == 1  # c
    assert cluster.value(f"{ratio}_bucket", le="0.6") == 1
    assert cluster.value(f"{ratio}_bucket", le="0.7") == 2  # b: 0.69
    assert cluster.value(f"{ratio}_bucket", le="0.99") == 2
    assert cluster.value(f"{ratio}_bucket", le="1.0") == 4  # a, e
    # a, e: 290 - 195 MiB each; b: 200 - 195; c: 0 - 195 (missed).
    assert cluster.value("layer_locality_bytes_avoided_total") == 95 * MiB * 2 + 5 * MiB
    assert cluster.value("layer_locality_bytes_missed_total") == MEAN

    pulls = {(p, r): cluster.value("layer_locality_image_pulls_total", patched=p, result=r)
             for p in ("true", "false") for r in ("pulled", "present")}
    # true/present: e, a, a's restart, earlier's second occurrence; true/pulled: b, c;
    # false: d pulled (old wording), d2 present.
    assert pulls == {("true", "pulled"): 2, ("true", "present"): 4,
                     ("false", "pulled"): 1, ("false", "present"): 1}
    seconds = "layer_locality_image_pull_seconds"
    assert cluster.value(f"{seconds}_count", patched="true") == 6
    assert cluster.value(f"{seconds}_sum", patched="true") == pytest.approx(2.25 + 3.2)
    assert cluster.value(f"{seconds}_bucket", patched="true", le="0.0") == 4
    assert cluster.value(f"{seconds}_count", patched="false") == 2
    assert cluster.value(f"{seconds}_sum", patched="false") == pytest.approx(62.5)
    assert cluster.value("layer_locality_pull_events_unmatched_total") == 0
    assert cluster.server.queries["events"][0]["fieldSelector"] == "reason=Pulled"

    # A relist (history expired) replays every event: nothing is counted twice.
    before = cluster.metrics.render()
    lists = cluster.server.list_calls["events"]
    cluster.server.compact()
    cluster.server.send_gone("events")
    await eventually(lambda: cluster.server.list_calls["events"] > lists
                     and cluster.server.watchers("events") == 1, "events relisted")
    assert len(_samples(before)) > 40
    assert _samples(cluster.metrics.render()) == _samples(before)

    # Deleted pods and Events release their records.
    pods, events, _ = cluster.telemetry.tracked
    cluster.server.delete("pods", "default/a")
    cluster.server.delete("events", "default/d2")
    await eventually(lambda: cluster.telemetry.tracked[:2] == (pods - 1, events - 1),
                     "deletions seen")


TELEMETRY = (b"layer_locality_bind", b"layer_locality_bytes_", b"layer_locality_image_pull",
             b"layer_locality_pull_events")


def _samples(text: bytes) -> list[bytes]:
    """The telemetry's samples (not their `_created` timestamps)."""
    return [line for line in text.splitlines()
            if line.startswith(TELEMETRY) and b"_created" not in line]
