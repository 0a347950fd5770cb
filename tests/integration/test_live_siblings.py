"""Spread awareness in live mode: the pod watch counts each workload's pods per node, reviews
add pending placements, binds release them. Against the stand-in API server (see
tests/kit/apiserver.py: binds at chosen moments; the same on real binds by kube-scheduler:
test_cluster_chain.py), through the real
`kubernetes` client."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers import AMD64, apply_patch, image, node_object, pod, review, validate_pod
from tests.kit.apiserver import FakeApiServer, eventually, running_fake
from webhook.core.admission import parse_review
from webhook.core.pods import DECISION_ANNOTATION
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.inventory.kube import core_api
from webhook.inventory.live import LiveInventory, WatchSettings
from webhook.registry.catalog import StaticCatalog
from webhook.serving.mutate import Mutator, Outcome

APP = image("registry.example.com/team/app:1", {AMD64: [("base", 200 * MiB), ("app", 90 * MiB)]})
CATALOG = StaticCatalog([APP])
HOLDERS = ["holder-a", "holder-b", "holder-c"]
OWNER = "6c1f9e0a-0000-4000-8000-00000000beef"


def replica() -> dict[str, Any]:
    """A ReplicaSet's pod at admission: generateName and the owner, no name, no uid."""
    obj = pod([APP.ref], namespace="shop")
    del obj["metadata"]["name"]
    obj["metadata"].update(generateName="web-5d8f-", labels={"app": "web"}, ownerReferences=[
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d8f", "uid": OWNER,
         "controller": True}])
    return obj


class Cluster:
    def __init__(self, server: FakeApiServer, inventory: LiveInventory) -> None:
        self.server = server
        self.inventory = inventory
        self.mutator = Mutator([CATALOG], inventory, ScoringPolicy(),
                               siblings=inventory.siblings)
        self.reviews = 0

    async def review(self, obj: dict[str, Any], dry_run: bool = False) -> Outcome:
        self.reviews += 1
        uid = f"00000000-0000-4000-8000-{self.reviews:012d}"
        body = orjson.dumps(review(obj, uid=uid, dry_run=dry_run))
        return await self.mutator.review(parse_review(body))

    def bind(self, obj: dict[str, Any], outcome: Outcome, name: str, node: str) -> None:
        """What the API server and the scheduler do next: name the pod, bind it."""
        bound = apply_patch(obj, list(outcome.patch))
        validate_pod(bound)
        bound["metadata"].update(name=name, uid=f"uid-{name}")
        bound["spec"]["nodeName"] = node
        bound["status"] = {"phase": "Pending"}
        self.server.put("pods", bound)

    def counts(self) -> dict[str, int]:
        return dict(self.inventory.siblings.counts(OWNER))


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async for server in running_fake():
        for name in HOLDERS:
            server.put("nodes", node_object(name, [APP]))
        for i in range(3):
            server.put("nodes", node_object(f"empty-{i}"))
        api = core_api(str(server.kubeconfig(tmp_path / "kubeconfig")), in_cluster=False)
        inventory = LiveInventory(api, [CATALOG], WatchSettings(
            backoff_initial=0.05, backoff_max=0.2, pending_seconds=60))
        task = asyncio.create_task(inventory.run())
        try:
            await asyncio.wait_for(inventory.wait_ready(), timeout=10)
            yield Cluster(server, inventory)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def top_node(obj: dict[str, Any], outcome: Outcome) -> str:
    patched = apply_patch(obj, list(outcome.patch))
    node: str = orjson.loads(patched["metadata"]["annotations"][DECISION_ANNOTATION])["top"][0][
        "node"]
    return node


async def test_a_burst_spreads_then_binds_release_the_pending_entries(cluster: Cluster) -> None:
    burst = [replica() for _ in HOLDERS]
    outcomes = [await cluster.review(obj) for obj in burst]  # all before any bind
    tops = [top_node(obj, outcome) for obj, outcome in zip(burst, outcomes, strict=True)]
    assert sorted(tops) == HOLDERS
    assert cluster.counts() == dict.fromkeys(HOLDERS, 1)
    assert cluster.inventory.siblings.pending == 3

    # The scheduler follows two preferences and overrides one (empty-0): once the watch shows
    # the binds, the pending entries are gone and the counts are where the pods really are.
    landed = [tops[0], tops[1], "empty-0"]
    for i, (obj, outcome, node) in enumerate(zip(burst, outcomes, landed, strict=True)):
        cluster.bind(obj, outcome, f"web-5d8f-{i}", node)
    await eventually(lambda: cluster.inventory.siblings.pending == 0, "binds seen")
    assert cluster.counts() == {tops[0]: 1, tops[1]: 1, "empty-0": 1}

    # A deleted pod no longer counts.
    cluster.server.delete("pods", "shop/web-5d8f-0")
    await eventually(lambda: tops[0] not in cluster.counts(), "deletion seen")


async def test_dry_run_reviews_hold_no_place(cluster: Cluster) -> None:
    for _ in range(3):
        outcome = await cluster.review(replica(), dry_run=True)
        assert outcome.result == "patched"
    assert cluster.inventory.siblings.pending == 0 and cluster.counts() == {}


async def test_a_holder_full_of_siblings_is_left_out(cluster: Cluster) -> None:
    for i in range(3):  # three bound on holder-a: a fourth would make skew 4 > 3
        obj = replica()
        cluster.bind(obj, await cluster.review(obj, dry_run=True), f"web-5d8f-{i}", "holder-a")
    await eventually(lambda: cluster.counts() == {"holder-a": 3}, "binds seen")
    obj = replica()
    outcome = await cluster.review(obj)
    named = {score.node.name for score in outcome.nodes}
    assert "holder-a" not in named and {"holder-b", "holder-c"} <= named


async def test_a_relist_rebuilds_the_counts(cluster: Cluster) -> None:
    for i, node in enumerate(["holder-a", "holder-b"]):
        obj = replica()
        cluster.bind(obj, await cluster.review(obj, dry_run=True), f"web-5d8f-{i}", node)
    await eventually(lambda: cluster.counts() == {"holder-a": 1, "holder-b": 1}, "binds seen")
    # A deletion the watch never delivered (missed while disconnected), then history expires:
    # the relist must drop the pod from the counts.
    cluster.server.objects["pods"].pop("shop/web-5d8f-0")
    cluster.server.compact()
    cluster.server.send_gone("pods")
    await eventually(lambda: cluster.counts() == {"holder-b": 1}, "relist rebuilt the counts")


async def test_a_pod_first_seen_finished_releases_its_pending_entry(cluster: Cluster) -> None:
    """A fast Job-like pod the watch first sees already finished (or a pod back from a watch
    gap through a relist) never counts, and its review's pending entry goes at once rather
    than after --pending-seconds."""
    obj = replica()
    outcome = await cluster.review(obj)
    assert cluster.inventory.siblings.pending == 1
    done = apply_patch(obj, list(outcome.patch))
    done["metadata"].update(name="web-5d8f-0", uid="uid-web-5d8f-0")
    done["spec"]["nodeName"] = "holder-b"
    done["status"] = {"phase": "Succeeded"}
    cluster.server.put("pods", done)
    await eventually(lambda: cluster.inventory.siblings.pending == 0, "pending released")
    assert cluster.counts() == {}
