"""The review pipeline on in-memory inventories: the seed scenario, platforms, skips, bounds."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from tests.helpers import (
    AMD64,
    ARM64,
    apply_patch,
    image,
    inventory,
    node_object,
    normalised_scores,
    pod,
    preferred_terms,
    review,
    validate_pod,
    weight_by_hostname,
)
from webhook.core.admission import parse_review
from webhook.core.annotation import DECISION_VERSION
from webhook.core.images import ImageRef, parse_image
from webhook.core.layers import ImageLayers
from webhook.core.pods import DECISION_ANNOTATION
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.registry.catalog import StaticCatalog
from webhook.serving.mutate import Mutator, Outcome
from webhook.serving.wiring import build_parts, demo_catalog

POLICY = ScoringPolicy()
# By share, as a static inventory serves (no lack_bytes): every node above the floor weighs,
# so the nodes the patch names show every node's count.
SHARE = ScoringPolicy(lack_bytes=0)
SIZES = {"L1": 60 * MiB, "L2": 40 * MiB, "L3": 200 * MiB, "L4": 30 * MiB}
IMG1 = image("registry.example.com/seed/img1:v1",
             {AMD64: [(x, SIZES[x]) for x in ("L1", "L2", "L3")]})
IMG2 = image("registry.example.com/seed/img2:v1",
             {AMD64: [(x, SIZES[x]) for x in ("L1", "L2", "L4")]})


async def run(mutator: Mutator, obj: dict[str, Any], **kw: Any) -> Outcome:
    return await mutator.review(parse_review(orjson.dumps(review(obj, **kw))))


def seed_mutator(policy: ScoringPolicy = POLICY) -> Mutator:
    # P1 (Img1) runs on N1; P2 (Img2) ran on N2; N3 is empty.
    catalog = StaticCatalog([IMG1, IMG2])
    inv, _ = inventory(
        [node_object("n1", [IMG1]), node_object("n2", [IMG2]), node_object("n3")], catalog
    )
    return Mutator([catalog], inv, policy)


async def test_seed_scenario() -> None:
    """Weighed by share (a static inventory: examples/seed) N2 is preferred over N3 in
    proportion to L1+L2; weighed from what a node lacks beyond the best (live mode), N2 lacks
    L3, more than lack_bytes beyond N1, and weighs nothing, as N3."""
    outcome = await run(seed_mutator(SHARE), pod([IMG1.ref]))
    assert outcome.result == "patched"
    patched = apply_patch(pod([IMG1.ref]), list(outcome.patch))
    validate_pod(patched)
    raw = weight_by_hostname(patched, ["n1", "n2", "n3"])
    scores = normalised_scores(raw)
    assert scores["n1"] == 100 and scores["n1"] > scores["n2"] > scores["n3"]
    # The weight is the share of the pod's pull a node saves: N2 holds L1+L2 of L1+L2+L3.
    shared = SIZES["L1"] + SIZES["L2"]
    whole = shared + SIZES["L3"]
    # By hand: 300 of 300 MiB -> 100 points; 100 of 300 MiB -> ceil(33.3) = 34 points; the
    # best node already weighs 100, so no baseline term.
    assert (shared, whole) == (100 * MiB, 300 * MiB)
    assert raw == {"n1": 100, "n2": 34, "n3": 0}
    decision = orjson.loads(patched["metadata"]["annotations"][DECISION_ANNOTATION])
    assert decision["v"] == DECISION_VERSION and decision["podBytes"] == whole
    # The candidates' mean bytes present, by hand: (300 + 100 + 0) MiB / 3 nodes.
    assert decision["meanBytes"] == (whole + shared) // 3
    assert decision["preferredNodes"] == 2
    assert decision["top"][0] == {"node": "n1", "bytes": whole}

    outcome = await run(seed_mutator(), pod([IMG1.ref]))
    patched = apply_patch(pod([IMG1.ref]), list(outcome.patch))
    validate_pod(patched)
    assert SIZES["L3"] >= POLICY.lack_bytes
    assert weight_by_hostname(patched, ["n1", "n2", "n3"]) == {"n1": 100, "n2": 0, "n3": 0}
    decision = orjson.loads(patched["metadata"]["annotations"][DECISION_ANNOTATION])
    assert decision["preferredNodes"] == 1 and decision["meanBytes"] == (whole + shared) // 3


async def test_reinvocation_and_dry_run() -> None:
    mutator = seed_mutator()
    real = await run(mutator, pod([IMG1.ref]))
    dry = await run(mutator, pod([IMG1.ref]), dry_run=True)
    assert dry.patch == real.patch
    patched = apply_patch(pod([IMG1.ref]), list(real.patch))
    again = await run(mutator, patched)
    assert (again.result, again.reason, again.patch) == ("skipped", "already_decided", ())


async def test_each_node_counts_its_own_platform() -> None:
    multi = image("ghcr.io/org/multi:1", {
        AMD64: [("base-amd64", 100 * MiB), ("app", 50 * MiB)],
        ARM64: [("base-arm64", 300 * MiB), ("app", 50 * MiB)],
    })
    catalog = StaticCatalog([multi])
    inv, _ = inventory([
        node_object("amd", [multi], platform=AMD64),
        node_object("arm", [multi], platform=ARM64),
        node_object("amd-empty", platform=AMD64),
        node_object("arm-empty", platform=ARM64),
    ], catalog)
    outcome = await run(Mutator([catalog], inv, SHARE), pod([multi.ref]))
    got = {nb.node.name: nb.bytes_present for nb in outcome.nodes}
    assert got == {"amd": 150 * MiB, "arm": 350 * MiB}


async def test_layers_shared_across_containers_count_once() -> None:
    slim = image("docker.io/library/app:slim", {AMD64: [("base", 80 * MiB), ("py", 20 * MiB)]})
    side = image("docker.io/library/side:1", {AMD64: [("base", 80 * MiB), ("side", 40 * MiB)]})
    catalog = StaticCatalog([slim, side])
    inv, _ = inventory([node_object("full", [slim, side]), node_object("none")], catalog)
    outcome = await run(Mutator([catalog], inv, POLICY), pod(["app:slim"], init_images=["side:1"]))
    assert outcome.pod_bytes == 140 * MiB
    assert [(nb.node.name, nb.bytes_present) for nb in outcome.nodes] == [("full", 140 * MiB)]


async def test_skips_cordoned_and_untolerated_nodes() -> None:
    catalog = StaticCatalog([IMG1])
    taint = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}
    inv, _ = inventory([
        node_object("cordoned", [IMG1], unschedulable=True),
        node_object("tainted", [IMG1], taints=[taint]),
        node_object("soft", [IMG1], taints=[{**taint, "effect": "PreferNoSchedule"}]),
        node_object("empty"),
    ], catalog)
    mutator = Mutator([catalog], inv, POLICY)
    outcome = await run(mutator, pod([IMG1.ref]))
    assert {nb.node.name for nb in outcome.nodes} == {"soft"}
    tolerating = pod([IMG1.ref], spec={"tolerations": [{"key": "gpu", "operator": "Exists"}]})
    outcome = await run(mutator, tolerating)
    assert {nb.node.name for nb in outcome.nodes} == {"soft", "tainted"}


def many_nodes(count: int) -> Mutator:
    images = [image(f"docker.io/library/i{k}:1", {AMD64: [(f"l{k}", (k + 1) * 30 * MiB)]})
              for k in range(count)]
    catalog = StaticCatalog(images)
    # Node k holds images 0..k: overlap for a pod using all of them grows with k.
    inv, _ = inventory([node_object(f"n{k}", images[: k + 1]) for k in range(count)]
                       + [node_object("empty")], catalog)
    return Mutator([catalog], inv, ScoringPolicy(max_terms=3, max_nodes=4))


async def test_terms_and_hostnames_are_bounded() -> None:
    obj = pod([f"i{k}:1" for k in range(12)])
    outcome = await run(many_nodes(12), obj)
    weighted = [t for t in outcome.terms if t.hostnames]
    assert len(weighted) <= 3
    assert sum(len(t.hostnames) for t in weighted) <= 4
    weights = [t.weight for t in weighted]
    assert weights == sorted(weights, reverse=True)
    assert {nb.node.name for nb in outcome.nodes} <= {f"n{k}" for k in range(8, 12)}
    validate_pod(apply_patch(obj, list(outcome.patch)))


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"spec": {"nodeName": "n1"}}, "node_name_set"),
        ({"metadata": {"ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "1"}]}},
         "daemonset"),
        ({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}}, "mirror_pod"),
        ({"metadata": {"labels": {"layer-locality.io/skip": "true"}}}, "skip_label"),
        ({"metadata": {"annotations": {DECISION_ANNOTATION: "{}"}}}, "already_decided"),
    ],
)
async def test_skip_rules(change: dict[str, Any], reason: str) -> None:
    outcome = await run(seed_mutator(), pod([IMG1.ref], **change))
    assert (outcome.result, outcome.reason, outcome.patch) == ("skipped", reason, ())


@pytest.mark.parametrize(
    ("images", "reason"),
    [
        (["Nginx:1"], "no_images"),
        (["registry.example.com/unknown:1"], "unresolved"),
        (["registry.example.com/tiny:1"], "below_threshold"),
    ],
)
async def test_nothing_to_prefer(images: list[str], reason: str) -> None:
    tiny = image("registry.example.com/tiny:1", {AMD64: [("t", 1 * MiB)]})
    catalog = StaticCatalog([tiny])
    inv, _ = inventory([node_object("a", [tiny]), node_object("b")], catalog)
    outcome = await run(Mutator([catalog], inv, POLICY), pod(images))
    assert (outcome.result, outcome.reason, outcome.patch) == ("skipped", reason, ())


async def test_all_nodes_equal_gives_no_patch() -> None:
    catalog = StaticCatalog([IMG1])
    inv, _ = inventory([node_object("a", [IMG1]), node_object("b", [IMG1])], catalog)
    outcome = await run(Mutator([catalog], inv, POLICY), pod([IMG1.ref]))
    assert (outcome.reason, outcome.patch) == ("no_preference", ())


async def test_demo_inventory_matches_a_direct_count() -> None:
    """On the real layer data: the bytes per node equal a naive count over the catalog (by
    share, every node above the floor is named)."""
    from webhook.config import Settings

    parts = build_parts(Settings(demo=True))
    mutator = Mutator(parts.sources, parts.inventory, SHARE)
    catalog = demo_catalog()
    for ref in ("python:3.11-slim", "node:18", "golang:1.19", "nginx:1.23-alpine"):
        pod_image = catalog.cached(parse_image(ref))
        assert pod_image is not None
        pod_layers = {x.digest: x.size for x in pod_image.platforms[AMD64].layers}
        expected = {}
        for node in parts.inventory.index.nodes():
            if node.unschedulable or node.taints:
                continue
            held = set()
            for names in node.images:
                entry = catalog.cached(parse_image(names[-1]))
                assert entry is not None
                held |= {x.digest for x in entry.platforms[AMD64].layers}
            present = sum(s for d, s in pod_layers.items() if d in held)
            if present >= SHARE.min_bytes:  # the floor: no weight below it
                expected[node.name] = present
        outcome = await run(mutator, pod([ref]))
        got = {nb.node.name: nb.bytes_present for nb in outcome.nodes}
        assert got == expected, ref
        if outcome.patch:
            patched = apply_patch(pod([ref]), list(outcome.patch))
            validate_pod(patched)
            assert preferred_terms(patched)


class SlowRegistry:
    """A layer source that knows `images` but answers only after `delay` seconds."""

    def __init__(self, images: list[ImageLayers], delay: float) -> None:
        self.catalog = StaticCatalog(images)
        self.delay = delay

    def cached(self, ref: ImageRef) -> ImageLayers | None:
        return None

    async def resolve(self, ref: ImageRef) -> ImageLayers | None:
        await asyncio.sleep(self.delay)
        return self.catalog.cached(ref)


async def test_a_new_tag_missing_the_budget_is_scored_with_its_repositorys_last_image() -> None:
    v1 = image("registry.example.com/shop/web:v1", {AMD64: [("L1", 60 * MiB), ("L3", 200 * MiB)]})
    v2 = image("registry.example.com/shop/web:v2", {AMD64: [("L1", 60 * MiB), ("L5", 5 * MiB)]})
    other = image("registry.example.com/shop/api:v1", {AMD64: [("L4", 90 * MiB)]})
    catalog = StaticCatalog([v1])
    inv, _ = inventory([node_object("n1", [v1]), node_object("n2")], catalog)
    mutator = Mutator([catalog, SlowRegistry([v2, other], delay=5.0)], inv, POLICY,
                      budget_seconds=0.01)
    first = await run(mutator, pod([v1.ref]))  # v1 known: remembered for its repository
    assert first.result == "patched" and first.stand_ins == 0
    second = await run(mutator, pod([v2.ref]), uid="0f8c5a2e-1111-4b3c-9d7e-000000000002")
    assert (second.result, second.budget_misses, second.stand_ins) == ("patched", 1, 1)
    patched = apply_patch(pod([v2.ref]), list(second.patch))
    validate_pod(patched)
    decision = orjson.loads(patched["metadata"]["annotations"][DECISION_ANNOTATION])
    assert decision["standIns"] == 1 and decision["top"][0]["node"] == "n1"
    # A repository never seen has nothing to stand in for it.
    third = await run(mutator, pod([other.ref]), uid="0f8c5a2e-1111-4b3c-9d7e-000000000003")
    assert (third.result, third.reason, third.stand_ins) == ("skipped", "unresolved", 0)
    await mutator.close()
