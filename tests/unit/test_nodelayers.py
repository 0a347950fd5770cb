"""NodeLayers objects: contract validation (bad objects rejected with a reason), bounds,
freshness with clock skew, and the layer source their images feed."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers import AMD64, ARM64, digest, image
from tests.nodelayers_helpers import DELETE as _DELETE
from tests.nodelayers_helpers import nodelayers_object, rfc3339
from tests.nodelayers_helpers import set_path as _set
from webhook.core.images import parse_image
from webhook.core.layers import Layer
from webhook.inventory.nodeimages import NodeImagesSource
from webhook.inventory.nodelayers import (
    MAX_IMAGES,
    MAX_LAYERS,
    NodeLayersError,
    parse_heartbeat,
    parse_node_layers,
)

MiB = 1 << 20
T0 = 1_800_000_000.0
BASE = image("docker.io/library/debian:12", {AMD64: [("deb", 30 * MiB)],
                                             ARM64: [("deb-arm", 29 * MiB)]})
APP = image("registry.example.com/app:2", {AMD64: [("deb", 30 * MiB), ("app", 7 * MiB)],
                                           ARM64: [("deb-arm", 29 * MiB), ("app-arm", 6 * MiB)]})


def valid() -> dict[str, Any]:
    return nodelayers_object("node-a", [BASE, APP], AMD64, T0, 300)


def packed() -> dict[str, Any]:
    """valid() with its layer table packed, as the agent writes it."""
    return nodelayers_object("node-a", [BASE, APP], AMD64, T0, 300, packed=True)


def test_a_valid_object_parses_to_layers_with_sizes_and_images() -> None:
    info = parse_node_layers(valid())
    assert info.node == "node-a" and info.platform == AMD64 and info.runtime == "containerd"
    assert info.resync_seconds == 300 and info.heartbeat == T0
    assert info.layers == tuple(sorted({digest("deb"), digest("app")}))
    by_digest = {i.digest: i for i in info.images}
    assert by_digest[APP.digest].layers == (Layer(digest("deb"), 30 * MiB),
                                            Layer(digest("app"), 7 * MiB))
    assert by_digest[APP.digest].manifest == APP.platforms[AMD64].digest
    assert (info.truncated_images, info.truncated_layers) == (0, 0)




@pytest.mark.parametrize(("change", "reason", "start"), [
    (_set("kind", "Node"), "kind", valid),
    (_set("apiVersion", "layer-locality.io/v1"), "kind", valid),
    (_set("spec", []), "shape", valid),
    (_set("spec.nodeName", "node-b"), "node_name", valid),
    (_set("spec.runtime", "docker"), "runtime", valid),
    (_set("spec.platform", "amd64"), "platform", valid),
    (_set("spec.platform", 7), "platform", valid),
    (_set("spec.resyncSeconds", 0), "resync", valid),
    (_set("spec.resyncSeconds", True), "resync", valid),
    (_set("spec.resyncSeconds", "300"), "resync", valid),
    (_set("spec.heartbeat", "yesterday"), "heartbeat", valid),
    (_set("spec.heartbeat", "2027-01-15T08:00:00"), "heartbeat", valid),  # no offset
    (_set("spec.layers", {}), "layers", valid),
    (_set("spec.layers.0.size", -1), "layers", valid),
    (_set("spec.layers.0.size", 1.5), "layers", valid),
    (_set("spec.layers.0.digest", "sha256:short"), "layers", valid),
    (_set("spec.images.0.names", []), "images", valid),
    (_set("spec.images.0.names", ["x" * 513]), "images", valid),
    (_set("spec.images.0.digest", "latest"), "images", valid),
    (_set("spec.images.0.layers", [-1]), "images", valid),
    (_set("spec.images.0.layers", [2]), "images", valid),  # only two layers
    (_set("spec.images.0.layers", ["0"]), "images", valid),
    (_set("spec.truncated", _DELETE), "truncated", valid),
    (_set("spec.truncated.images", -3), "truncated", valid),
    # the packed table
    (_set("spec.layers", []), "layers", packed),  # both forms
    (_set("spec.packedLayers", 7), "layers", packed),
    (_set("spec.packedLayers", "not base64!"), "layers", packed),
    (_set("spec.packedLayers", "AAAA"), "layers", packed),  # 3 bytes: not a whole record
    (_set("spec.packedLayers", "A" * (4 * -(-(MAX_LAYERS + 1) * 40 // 3))), "bounds", packed),
    (_set("spec.images.0.layers", [2]), "images", packed),  # only two layers
])
def test_bad_objects_are_rejected_with_a_reason(
        change: Callable[[dict[str, Any]], None], reason: str,
        start: Callable[[], dict[str, Any]]) -> None:
    obj = start()
    change(obj)
    with pytest.raises(NodeLayersError) as caught:
        parse_node_layers(obj)
    assert caught.value.reason == reason, caught.value
    assert str(caught.value)


def test_duplicate_layers_are_rejected() -> None:
    obj = valid()
    obj["spec"]["layers"].append(copy.deepcopy(obj["spec"]["layers"][0]))
    with pytest.raises(NodeLayersError, match="distinct"):
        parse_node_layers(obj)


def test_bounds_are_enforced_at_the_limit_plus_one() -> None:
    obj = valid()
    obj["spec"]["layers"] = [{"digest": digest(f"l{i}"), "size": i} for i in range(MAX_LAYERS)]
    assert len(parse_node_layers(obj).layers) == MAX_LAYERS  # at the bound: accepted
    obj["spec"]["layers"].append({"digest": digest("one more"), "size": 1})
    with pytest.raises(NodeLayersError) as caught:
        parse_node_layers(obj)
    assert caught.value.reason == "bounds"

    obj = valid()
    one = obj["spec"]["images"][0]
    obj["spec"]["images"] = [one] * MAX_IMAGES
    assert len(parse_node_layers(obj).images) == MAX_IMAGES
    obj["spec"]["images"].append(one)
    with pytest.raises(NodeLayersError) as caught:
        parse_node_layers(obj)
    assert caught.value.reason == "bounds"


def test_heartbeats_in_rfc3339_forms() -> None:
    assert parse_heartbeat(rfc3339(T0)) == T0
    assert parse_heartbeat("2027-01-15T08:00:00.250Z") == parse_heartbeat(
        "2027-01-15T09:00:00.250+01:00")


@pytest.mark.parametrize(("now", "fresh"), [
    (T0, True),
    (T0 + 900, True),  # exactly 3 x resyncSeconds: still fresh
    (T0 + 901, False),
    (T0 - 3600, True),  # the node's clock is ahead: a future heartbeat counts as now
])
def test_freshness_is_three_resync_periods_and_tolerates_skew(now: float, fresh: bool) -> None:
    assert parse_node_layers(valid()).fresh(now) is fresh


def test_node_images_source_answers_by_tag_and_digest_and_merges_platforms() -> None:
    source = NodeImagesSource()
    amd = parse_node_layers(valid())
    arm = parse_node_layers(nodelayers_object("node-b", [APP], ARM64, T0))
    source.add(amd.platform, amd.images)
    source.add(arm.platform, arm.images)
    for text in (APP.ref, f"registry.example.com/app@{APP.digest}",
                 f"registry.example.com/app@{APP.platforms[AMD64].digest}",
                 f"elsewhere.example.com/copy@{APP.digest}"):  # content-addressed
        found = source.cached(parse_image(text))
        assert found is not None, text
        assert found.digest == APP.digest
        assert dict(found.platforms) == dict(APP.platforms), "both platforms, exact sizes"
    assert source.cached(parse_image("registry.example.com/app:3")) is None


def test_node_images_source_is_bounded() -> None:
    source = NodeImagesSource(max_images=4)
    for n in range(10):
        one = image(f"registry.example.com/img{n}:1", {AMD64: [(f"l{n}", 1)]})
        info = parse_node_layers(nodelayers_object("n", [one], AMD64, T0))
        source.add(AMD64, info.images)
    assert len(source) <= 4
    assert source.cached(parse_image("registry.example.com/img9:1")) is not None
    assert source.cached(parse_image("registry.example.com/img0:1")) is None


def test_serve_wiring_asks_node_images_last() -> None:
    """Live mode: the images the agents publish are a layer source the Mutator shares with the
    inventory that feeds it, after the catalog and the registry's cached answers (whose tag TTL
    follows moving tags; `cached` does no I/O, so no lookup happens for an image on a node)."""
    from webhook.config import Settings
    from webhook.registry import RegistryResolver
    from webhook.registry.catalog import StaticCatalog
    from webhook.serving.wiring import build_parts

    for offline in (True, False):
        parts = build_parts(Settings(offline=offline), kube_api=lambda: None)
        assert parts.live is not None
        kinds = [type(source) for source in parts.sources]
        assert kinds == [StaticCatalog, *([] if offline else [RegistryResolver]),
                         NodeImagesSource]
        assert parts.sources[-1] is parts.live.node_images


def test_the_packed_table_parses_as_the_list_does() -> None:
    assert "layers" not in packed()["spec"]
    assert parse_node_layers(packed()) == parse_node_layers(valid())


def test_a_packed_table_at_its_bound_and_with_a_duplicate() -> None:
    from webhook.core.packedlayers import pack_layers

    obj = packed()
    table = [(digest(f"l{i}"), i) for i in range(MAX_LAYERS)]
    obj["spec"]["packedLayers"] = pack_layers(table)
    assert len(parse_node_layers(obj).layers) == MAX_LAYERS
    obj["spec"]["packedLayers"] = pack_layers([*table[:2], table[0]])
    with pytest.raises(NodeLayersError, match="distinct"):
        parse_node_layers(obj)
    obj["spec"]["packedLayers"] = pack_layers([(digest("huge"), 2**63)])
    with pytest.raises(NodeLayersError, match="size above"):
        parse_node_layers(obj)
