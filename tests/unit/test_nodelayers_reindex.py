"""A NodeLayers object for a node the live inventory already indexed re-indexes that node: when
it first arrives, and when an update reports more layers (the node pulled another image).
Driven through the inventory's event callbacks (no API server: `LiveInventory(None, ...)`, as
tests/unit/test_live_compact.py), then scored by a Mutator reading the node agents' images."""

from __future__ import annotations

import asyncio

import orjson

from tests.helpers import AMD64, node_object, pod, review
from tests.nodelayers_helpers import APP, LIB, SIZES, T0, nodelayers_object
from webhook.core.admission import parse_review
from webhook.core.layers import ImageLayers
from webhook.core.scoring import ScoringPolicy
from webhook.inventory.live import LiveInventory
from webhook.serving.mutate import Mutator


def layers(*images: ImageLayers) -> set[str]:
    return {layer.digest for i in images for layer in i.platforms[AMD64].layers}


def started() -> tuple[LiveInventory, Mutator]:
    """Nodes n0, n1 and n2 indexed from their status (which lists no image), no object yet:
    n2 never gets one, so some candidate always holds nothing of the pod (were every
    candidate equal, there would be no preference to express)."""
    live = LiveInventory(None, [], wall_clock=lambda: T0)
    for name in ("n0", "n1", "n2"):
        live._apply_nodes("ADDED", node_object(name))
    live.listed_by_hand()  # no reflector runs: the nodes above are the whole picture
    assert live.index.layers_of("n1") == frozenset()
    # What `serve --offline` builds (webhook/serving/wiring.py): the images the node agents publish.
    # Weighed by share (no lack_bytes), so every node above the floor is named and `present`
    # reads its bytes, however much less than the best it holds.
    return live, Mutator([live.node_images], live, ScoringPolicy(lack_bytes=0))


def present(mutator: Mutator, image: ImageLayers) -> dict[str, int]:
    outcome = asyncio.run(mutator.review(parse_review(orjson.dumps(review(pod([image.ref]))))))
    return {nb.node.name: nb.bytes_present for nb in outcome.nodes}


def test_more_layers_in_an_updated_object_are_indexed() -> None:
    """Kills the mutant that does not re-index a node whose NodeLayers object, already in use
    for it, is updated with more layers (previous.layers != info.layers left out).

    n1's first object holds LIB (os, python); the update adds APP, whose only other layer is
    `app`. By the rule (a fresh object of the node's platform adds all its layers to the
    node), n1 then holds os + python + app, which is all of APP: its bytes present for an APP
    pod rise from os + python to os + python + app. Without the re-index the index keeps
    the first object's layers and n1 stays at os + python."""
    live, mutator = started()
    live.nodelayers.event("ADDED", "n1", nodelayers_object("n1", [LIB], AMD64, T0))
    assert live.index.layers_of("n1") == layers(LIB)

    live.nodelayers.event("MODIFIED", "n1", nodelayers_object("n1", [LIB, APP], AMD64, T0))
    assert live.index.layers_of("n1") == layers(LIB, APP)
    assert present(mutator, APP) == {"n1": SIZES["os"] + SIZES["python"] + SIZES["app"]}


def test_more_layers_raise_bytes_present_after_a_review_of_the_old_ones() -> None:
    """Kills the same mutant through the decisions alone (and through the memo: a re-index is
    a new index generation, so a cached preparation cannot hide a missed one either way).

    APP is known to the source from n0's object (n0 holds APP entirely). n1's first object
    holds LIB: an APP pod finds all of APP on n0 and os + python on n1. n1's update reports
    APP too: by the rule n1 now holds all of APP, the same bytes as n0 (n2 holds nothing
    throughout). Without the re-index n1 would stay at os + python."""
    live, mutator = started()
    live.nodelayers.event("ADDED", "n0", nodelayers_object("n0", [APP], AMD64, T0))
    live.nodelayers.event("ADDED", "n1", nodelayers_object("n1", [LIB], AMD64, T0))
    everything = SIZES["os"] + SIZES["python"] + SIZES["app"]
    assert present(mutator, APP) == {"n0": everything, "n1": SIZES["os"] + SIZES["python"]}

    live.nodelayers.event("MODIFIED", "n1", nodelayers_object("n1", [LIB, APP], AMD64, T0 + 1))
    assert present(mutator, APP) == {"n0": everything, "n1": everything}


def test_a_first_object_for_an_indexed_node_is_indexed() -> None:
    """Kills a mutant that re-indexes only nodes not yet in the index (or only objects seen
    before): n1 was indexed from its status (no image) before its first object arrived. By
    the rule the object's layers are added to the node: an APP pod finds all of APP on n1."""
    live, mutator = started()
    live.nodelayers.event("ADDED", "n1", nodelayers_object("n1", [APP], AMD64, T0))
    assert present(mutator, APP) == {"n1": SIZES["os"] + SIZES["python"] + SIZES["app"]}
