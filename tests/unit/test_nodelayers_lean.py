"""NodeLayers list pages and watch events decoded to the fields read (lean.nodelayers_list,
lean.nodelayers_event: the spec as nodelayers.Spec) give the same objects, the same
rejections and the same index as decoding them whole; a page or event whose object does not
fit the types is decoded whole, and the object then rejected as before."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from tests.helpers import AMD64, ARM64, digest, image, node_object
from tests.nodelayers_helpers import APP, LIB, T0, nodelayers_object
from tests.nodelayers_helpers import DELETE as _DELETE
from tests.nodelayers_helpers import set_path as _set
from webhook.core.images import parse_image
from webhook.inventory import lean
from webhook.inventory.live import LiveInventory
from webhook.inventory.nodelayers import (
    MAX_IMAGES,
    MAX_LAYERS,
    NodeLayersError,
    NodeLayersInfo,
    Spec,
    parse_node_layers,
)

MiB = 1 << 20
BASE = image("docker.io/library/debian:12", {AMD64: [("deb", 30 * MiB)],
                                             ARM64: [("deb-arm", 29 * MiB)]})
WEB = image("registry.example.com/web:2", {AMD64: [("deb", 30 * MiB), ("web", 7 * MiB)],
                                           ARM64: [("deb-arm", 29 * MiB), ("web-arm", 6 * MiB)]})


def valid(node: str = "node-a") -> dict[str, Any]:
    return nodelayers_object(node, [BASE, WEB], AMD64, T0, 300)


def page(*objects: dict[str, Any]) -> bytes:
    return orjson.dumps({"kind": "NodeLayersList", "apiVersion": "layer-locality.io/v1alpha1",
                         "metadata": {"resourceVersion": "12", "continue": "tok"},
                         "items": list(objects)})


def outcome(obj: Any) -> NodeLayersInfo | str:
    try:
        return parse_node_layers(obj)
    except NodeLayersError as exc:
        return exc.reason


def test_a_page_decodes_to_typed_specs_that_parse_the_same() -> None:
    objects = [valid("node-a"), nodelayers_object("node-b", [APP, LIB], AMD64, T0 + 5, 60),
               nodelayers_object("node-c", [WEB], ARM64, T0)]
    objects[0]["metadata"].update(uid="u-1", resourceVersion="7", managedFields=[{"x": 1}])
    data = page(*objects)
    whole, lean_page = orjson.loads(data), lean.nodelayers_list(data)
    assert lean_page["metadata"] == whole["metadata"]
    items = lean_page["items"]
    assert all(type(item["spec"]) is Spec for item in items), "decoded to the projection"
    assert items[0]["metadata"] == {"name": "node-a", "resourceVersion": "7"}
    for full, decoded in zip(whole["items"], items, strict=True):
        assert outcome(decoded) == outcome(full)
        assert isinstance(outcome(decoded), NodeLayersInfo)



# Bad objects: some break only a value (the typed path checks them), some a type or a
# required field (the page is decoded whole); either way the same reason as before.
BAD = [
    (_set("kind", "Node"), "kind"),
    (_set("apiVersion", _DELETE), "kind"),
    (_set("metadata", _DELETE), "shape"),
    (_set("metadata", ["x"]), "shape"),
    (_set("spec", _DELETE), "shape"),
    (_set("spec", []), "shape"),
    (_set("spec", None), "shape"),
    (_set("metadata.name", _DELETE), "node_name"),
    (_set("spec.nodeName", "node-b"), "node_name"),
    (_set("spec.runtime", "docker"), "runtime"),
    (_set("spec.platform", "amd64"), "platform"),
    (_set("spec.platform", 7), "platform"),
    (_set("spec.resyncSeconds", 0), "resync"),
    (_set("spec.resyncSeconds", True), "resync"),
    (_set("spec.resyncSeconds", "300"), "resync"),
    (_set("spec.heartbeat", "yesterday"), "heartbeat"),
    (_set("spec.heartbeat", "2027-01-15T08:00:00"), "heartbeat"),
    (_set("spec.layers", {}), "layers"),
    (_set("spec.layers", _DELETE), "layers"),
    (_set("spec.layers.0", "sha256:x"), "layers"),
    (_set("spec.layers.0.size", -1), "layers"),
    (_set("spec.layers.0.size", 1.5), "layers"),
    (_set("spec.layers.0.size", True), "layers"),
    (_set("spec.layers.0.size", _DELETE), "layers"),
    (_set("spec.layers.0.digest", "sha256:short"), "layers"),
    (_set("spec.layers.1.digest", 5), "layers"),
    (_set("spec.images", None), "images"),
    (_set("spec.images.0", "debian"), "images"),
    (_set("spec.images.0.names", []), "images"),
    (_set("spec.images.0.names", "debian"), "images"),
    (_set("spec.images.0.names", ["x" * 513]), "images"),
    (_set("spec.images.0.names", [""]), "images"),
    (_set("spec.images.0.names", [7]), "images"),
    (_set("spec.images.0.digest", "latest"), "images"),
    (_set("spec.images.0.manifest", None), "images"),
    (_set("spec.images.0.layers", [-1]), "images"),
    (_set("spec.images.0.layers", [2]), "images"),  # only two layers
    (_set("spec.images.0.layers", ["0"]), "images"),
    (_set("spec.images.0.layers", [False]), "images"),
    (_set("spec.truncated", _DELETE), "truncated"),
    (_set("spec.truncated.images", -3), "truncated"),
    (_set("spec.truncated.layers", "0"), "truncated"),
    # Sizes and counts past any real one: sums over a pod's layers must stay 64-bit.
    (_set("spec.layers.0.size", (1 << 44) + 1), "layers"),
    (_set("spec.truncated.layers", (1 << 31) + 1), "truncated"),
    # Two faults: the first in the contract's order wins, on either path.
    (lambda o: (_set("spec.truncated.images", -1)(o), _set("spec.runtime", "x")(o)), "runtime"),
    (lambda o: (_set("spec.layers.1.size", "1")(o), _set("spec.layers.0.size", -1)(o)),
     "layers"),
    (lambda o: (_set("spec.images.0.layers", [9])(o), _set("spec.truncated.images", "1")(o)),
     "images"),
]


@pytest.mark.parametrize(("change", "reason"), BAD)
def test_bad_objects_in_a_page_are_rejected_with_the_same_reason(
        change: Callable[[dict[str, Any]], None], reason: str) -> None:
    bad = valid("node-bad")
    change(bad)
    data = page(valid("node-a"), bad, valid("node-c"))
    whole, lean_page = orjson.loads(data), lean.nodelayers_list(data)
    answers = [outcome(item) for item in lean_page["items"]]
    assert answers == [outcome(item) for item in whole["items"]]
    assert answers[1] == reason
    assert isinstance(answers[0], NodeLayersInfo) and isinstance(answers[2], NodeLayersInfo)


def test_bounds_and_duplicates_on_the_typed_path() -> None:
    obj = valid()
    obj["spec"]["layers"] = [{"digest": digest(f"l{i}"), "size": i} for i in range(MAX_LAYERS)]
    obj["spec"]["images"][0]["layers"] = [0]
    obj["spec"]["images"][1]["layers"] = [1, 2]
    assert len(parse_node_layers(lean.nodelayers_list(page(obj))["items"][0]).layers) == MAX_LAYERS
    obj["spec"]["layers"].append({"digest": digest("one more"), "size": 1})
    assert outcome(lean.nodelayers_list(page(obj))["items"][0]) == "bounds"

    obj = valid()
    obj["spec"]["images"] = [obj["spec"]["images"][0]] * (MAX_IMAGES + 1)
    assert outcome(lean.nodelayers_list(page(obj))["items"][0]) == "bounds"

    obj = valid()
    obj["spec"]["layers"].append(copy.deepcopy(obj["spec"]["layers"][0]))
    item = lean.nodelayers_list(page(obj))["items"][0]
    assert type(item["spec"]) is Spec
    with pytest.raises(NodeLayersError, match="distinct"):
        parse_node_layers(item)


def test_watch_events_decode_added_and_modified_objects_to_the_projection() -> None:
    obj = valid()
    obj["metadata"]["resourceVersion"] = "44"
    for kind in ("ADDED", "MODIFIED"):
        line = orjson.dumps({"type": kind, "object": obj})
        event = lean.nodelayers_event(line)
        assert event["type"] == kind and type(event["object"]["spec"]) is Spec
        assert event["object"]["metadata"] == {"name": "node-a", "resourceVersion": "44"}
        assert outcome(event["object"]) == outcome(orjson.loads(line)["object"])
    # Everything else, and an object that does not fit, exactly as decoded whole.
    bad = valid()
    bad["spec"]["layers"][0]["size"] = "big"
    for line in (orjson.dumps({"type": "DELETED", "object": obj}),
                 orjson.dumps({"type": "BOOKMARK", "object": {
                     "kind": "NodeLayers", "metadata": {"resourceVersion": "50"}}}),
                 orjson.dumps({"type": "ERROR", "object": {
                     "kind": "Status", "code": 410, "message": "too old"}}),
                 orjson.dumps({"type": "MODIFIED", "object": bad}),
                 orjson.dumps({"type": "ADDED", "object": None})):
        assert lean.nodelayers_event(line) == orjson.loads(line)
    assert outcome(lean.nodelayers_event(orjson.dumps({"type": "MODIFIED",
                                                      "object": bad}))["object"]) == "layers"


def _inventory(objects: list[dict[str, Any]], decode: Callable[[bytes], Any]) -> LiveInventory:
    live = LiveInventory(None, [], wall_clock=lambda: T0)
    for name in ("node-a", "node-b", "node-c", "node-d"):
        live._apply_nodes("ADDED", node_object(name))
    for item in decode(page(*objects))["items"]:
        live.nodelayers.event("ADDED", item["metadata"]["name"], item)
    return live


def test_the_index_and_the_images_known_are_the_same_either_way() -> None:
    stale = nodelayers_object("node-c", [WEB], AMD64, T0 - 3600, 300)
    arm = nodelayers_object("node-d", [WEB], ARM64, T0)  # the node says amd64: not used
    bad = valid("node-b")
    bad["spec"]["images"][0]["digest"] = "latest"
    objects = [valid("node-a"), bad, stale, arm]
    lean_live, whole_live = _inventory(objects, lean.nodelayers_list), _inventory(
        objects, orjson.loads)
    for live in (lean_live, whole_live):
        assert live.index.layers_of("node-a") == {digest("deb"), digest("web")}
        assert live.index.layers_of("node-b") == frozenset()
    for name in ("node-a", "node-b", "node-c", "node-d"):
        assert lean_live.index.layers_of(name) == whole_live.index.layers_of(name)
    assert lean_live.nodelayers.objects == whole_live.nodelayers.objects == 3
    for ref in (WEB.ref, BASE.ref, f"registry.example.com/web@{WEB.digest}"):
        assert (lean_live.node_images.cached(parse_image(ref))
                == whole_live.node_images.cached(parse_image(ref)))
    assert lean_live.node_images.cached(parse_image(WEB.ref)) is not None


@pytest.mark.parametrize("field", ["spec.layers.0.size", "spec.truncated.layers"])
def test_integers_past_64_bits_are_rejected_on_both_paths(field: str) -> None:
    """msgspec decodes 2^64 as an exact int where orjson gave a float: the typed path must
    refuse it too (the annotation could not encode a pod size past 64 bits)."""
    import json

    bad = valid("node-bad")
    _set(field, 1 << 64)(bad)
    data = json.dumps({"kind": "NodeLayersList", "apiVersion": "layer-locality.io/v1alpha1",
                       "metadata": {"resourceVersion": "12"},
                       "items": [valid("node-a"), bad]}).encode()
    answers = [outcome(item) for item in lean.nodelayers_list(data)["items"]]
    assert answers[1] == field.split(".")[1]
    assert isinstance(answers[0], NodeLayersInfo)
    assert outcome(json.loads(data)["items"][1]) == answers[1]


def test_a_packed_table_decodes_typed_and_parses_the_same_either_way() -> None:
    obj = nodelayers_object("node-a", [BASE, WEB], AMD64, T0, 300, packed=True)
    item = lean.nodelayers_list(page(obj))["items"][0]
    assert type(item["spec"]) is Spec and item["spec"].layers is None
    assert outcome(item) == outcome(obj) == outcome(valid())
    both = copy.deepcopy(obj)
    both["spec"]["layers"] = valid()["spec"]["layers"]
    assert outcome(lean.nodelayers_list(page(both))["items"][0]) == outcome(both) == "layers"
    neither = copy.deepcopy(obj)
    del neither["spec"]["packedLayers"]
    assert outcome(lean.nodelayers_list(page(neither))["items"][0]) == outcome(neither) \
        == "layers"


def test_an_image_met_before_takes_this_objects_layers() -> None:
    """An image already seen in another object is found again by its names and digests, but
    its layers are this object's indices, read anew: another layer list gives that list."""
    first, second = valid("node-a"), valid("node-b")
    table = [layer["digest"] for layer in second["spec"]["layers"]]
    second["spec"]["images"][1]["layers"] = [table.index(digest("web"))]  # only its own layer
    items = lean.nodelayers_list(page(first, second))["items"]
    a, b = (parse_node_layers(item) for item in items)
    web_a = next(i for i in a.images if i.digest == WEB.digest)
    web_b = next(i for i in b.images if i.digest == WEB.digest)
    assert [layer.digest for layer in web_a.layers] == [digest("deb"), digest("web")]
    assert [layer.digest for layer in web_b.layers] == [digest("web")]
    again = parse_node_layers(lean.nodelayers_list(page(valid("node-c")))["items"][0])
    assert next(i for i in again.images if i.digest == WEB.digest) == web_a


def test_an_image_met_before_with_an_index_past_this_objects_table_is_rejected() -> None:
    """The image is known, so only its indices are read again; one past this object's
    layers rejects the object as the whole decoding does."""
    first, second = valid("node-a"), valid("node-b")
    second["spec"]["images"][1]["layers"] = [0, len(second["spec"]["layers"])]
    items = lean.nodelayers_list(page(first, second))["items"]
    assert isinstance(outcome(items[0]), NodeLayersInfo)
    assert outcome(items[1]) == outcome(second) == "images"


@pytest.mark.parametrize("indices", [[], [1], [1, 0], [0, 1, 0]])
def test_an_image_met_before_takes_any_number_of_this_objects_indices(
        indices: list[int]) -> None:
    first, second = valid("node-a"), valid("node-b")
    second["spec"]["images"][1]["layers"] = indices
    items = lean.nodelayers_list(page(first, second))["items"]
    parsed, whole = outcome(items[1]), outcome(second)
    assert isinstance(parsed, NodeLayersInfo) and parsed == whole
    table = [layer["digest"] for layer in second["spec"]["layers"]]
    web = next(i for i in parsed.images if i.digest == WEB.digest)
    assert [layer.digest for layer in web.layers] == [table[i] for i in indices]


def test_a_packed_table_with_records_new_and_met_before_keeps_its_order() -> None:
    """Records met in an earlier object are looked up, the rest decoded, each in its place;
    the first bad one among the new rejects the object."""
    known = nodelayers_object("node-a", [BASE], AMD64, T0, 300, packed=True)
    mixed = nodelayers_object("node-b", [BASE, WEB], AMD64, T0, 300, packed=True)
    items = lean.nodelayers_list(page(known, mixed))["items"]
    a, b = (parse_node_layers(item) for item in items)
    assert a.layers == (digest("deb"),)
    assert b.layers == tuple(sorted((digest("deb"), digest("web"))))
    web = next(i for i in b.images if i.digest == WEB.digest)
    assert [layer.digest for layer in web.layers] == [digest("deb"), digest("web")]
    assert [layer.size for layer in web.layers] == [30 * MiB, 7 * MiB]
