"""The decision memo's key names each image's platform manifests (webhook/core/memo.py), not only
the digest the image resolved to: what a source knows of one index can change while the index
digest and the layer index's generation stay the same, and the memo must then answer as a
decision without it does."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from tests.helpers import AMD64, ARM64, digest, image, node_object, pod, review
from webhook.core.admission import parse_review
from webhook.core.images import parse_image
from webhook.core.index import LayerIndex
from webhook.core.layers import ImageLayers, Layer, Platform, PlatformLayers
from webhook.core.memo import PrepareMemo
from webhook.core.nodes import node_from_object
from webhook.core.prepare import prepare
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.inventory.memory import StaticInventory
from webhook.inventory.nodeimages import NodeImagesSource
from webhook.inventory.nodelayers_known import NodeImage
from webhook.registry.catalog import StaticCatalog
from webhook.serving.mutate import Mutator, Outcome

# One multi-arch image: the index digest is the same whichever of its manifests is known.
APP = image("r.example.com/t/app:1", {AMD64: [("os", 80 * MiB), ("app", 40 * MiB)],
                                      ARM64: [("os-arm", 70 * MiB), ("app-arm", 30 * MiB)]})


def node_image(platform: Platform) -> NodeImage:
    """What a node agent of `platform` publishes for APP (its names, index, manifest)."""
    manifest = APP.platforms[platform]
    return NodeImage((APP.ref,), APP.digest, manifest.digest, manifest.layers)


def held(platform: Platform) -> set[str]:
    return {layer.digest for layer in APP.platforms[platform].layers}


def summary(outcome: Outcome) -> tuple[Any, ...]:
    return (outcome.result, outcome.reason, orjson.dumps(list(outcome.patch)),
            {nb.node.name: nb.bytes_present for nb in outcome.nodes})


def test_a_platform_manifest_learnt_later_is_not_answered_from_the_memo() -> None:
    """Kills the mutant that drops the platform manifests from the memo key.

    amd64 node `a0` holds nothing of APP; arm64 node `r0` holds all of APP's arm64 layers. The
    node-agent source first knows only APP's amd64 manifest (no node holds any of it: nobody
    is preferred), then learns the arm64 one under the same index digest, with no node change
    (same index generation). By the rule (bytes present = the sizes of the pod's layers for
    the node's platform that the node holds), the next review prefers r0 with 70 + 30 MiB,
    as a memo-less Mutator does. Keyed on the index digest alone, the memo would return the
    amd64-only preparation, in which r0 holds nothing, and prefer nobody."""
    index = LayerIndex()
    index.upsert(node_from_object(node_object("a0")), ())
    index.upsert(node_from_object(node_object("r0", platform=ARM64)), held(ARM64))
    source = NodeImagesSource()
    source.add(AMD64, [node_image(AMD64)])
    policy = ScoringPolicy()
    with_memo = Mutator([source], StaticInventory(index), policy)
    without = Mutator([source], StaticInventory(index), policy, memo_entries=0)

    def ask(mutator: Mutator, k: int) -> tuple[Any, ...]:
        body = orjson.dumps(review(pod([APP.ref]), uid=f"0f8c5a2e-1111-4b3c-9d7e-{k:012d}"))
        return summary(asyncio.run(mutator.review(parse_review(body))))

    first = ask(with_memo, 1)
    assert first == ask(without, 1)
    assert first[3] == {}  # only amd64 known: no node holds any of its layers
    generation = index.generation

    source.add(ARM64, [node_image(ARM64)])  # an arm64 agent publishes the same index
    learnt = source.cached(parse_image(APP.ref))
    assert learnt is not None and learnt.digest == APP.digest
    assert set(learnt.platforms) == {AMD64, ARM64}
    assert index.generation == generation  # the layer index did not move
    second = ask(with_memo, 2)
    assert second == ask(without, 2)
    assert second[3] == {"r0": 70 * MiB + 30 * MiB}
    assert (with_memo.memo.hits, with_memo.memo.misses) == (0, 2)


def test_a_swapped_platform_manifest_under_the_same_index_is_prepared_afresh() -> None:
    """Kills the mutant that drops the platform manifests from the memo key.

    A catalog entry is corrected: same ref and index digest, but its amd64 manifest now has
    layer `new` (50 MiB) instead of `old` (50 MiB). n-old holds `old`, n-new holds `new`; the
    layer index does not change. By the rule, the corrected image has 50 MiB present on
    n-new and nothing on n-old: the memo's answer must equal a fresh `prepare`, and a
    Mutator with the memo must prefer n-new alone, like one without it. Keyed on the index
    digest alone, the memo would reuse the old preparation (50 MiB on n-old)."""
    def version(label: str) -> ImageLayers:
        return ImageLayers(APP.ref, APP.digest, {AMD64: PlatformLayers(
            digest(f"manifest {label}"), (Layer(digest(label), 50 * MiB),))})

    old, new = version("old"), version("new")
    index = LayerIndex()
    index.upsert(node_from_object(node_object("n-old")), {digest("old")})
    index.upsert(node_from_object(node_object("n-new")), {digest("new")})
    policy = ScoringPolicy()

    memo = PrepareMemo()
    assert memo.prepare([old], [], index, policy) == prepare([old], [], index, policy)
    assert memo.prepare([new], [], index, policy) == prepare([new], [], index, policy)
    assert (memo.hits, memo.misses) == (0, 2)

    catalog = StaticCatalog([old])
    with_memo = Mutator([catalog], StaticInventory(index), policy)
    without = Mutator([catalog], StaticInventory(index), policy, memo_entries=0)

    def ask(mutator: Mutator) -> tuple[Any, ...]:
        return summary(asyncio.run(mutator.review(parse_review(orjson.dumps(
            review(pod([APP.ref])))))))

    assert ask(with_memo) == ask(without)
    assert ask(with_memo)[3] == {"n-old": 50 * MiB}
    catalog.add(new)  # the same ref and index digest now name another amd64 manifest
    assert ask(with_memo) == ask(without)
    assert ask(with_memo)[3] == {"n-new": 50 * MiB}

