"""The NodeLayers object (docs/agent.md, the shared contract): runtime images -> a compact,
bounded spec. Pure: no I/O.

Compact: each distinct layer appears once, sorted by digest, in `spec.packedLayers` (one string,
webhook/core/packedlayers.py; `spec.layers`, a list of objects, only when a digest is not
sha256); an image refers to its layers by index. Names that resolve to the same content are one
image entry.
Bounded: past `Bounds`, the largest images (by total layer bytes) are kept and the rest counted
in `spec.truncated`, so a node with thousands of images still fits an etcd object.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from webhook.core.layers import Layer, Platform
from webhook.core.packedlayers import RECORD, pack_layers

# The object's contract (names and bounds) lives with the code that reads it.
from webhook.inventory.nodelayers import API_VERSION, KIND, MAX_IMAGES, MAX_LAYERS

# The parts of the spec whose change warrants a write (the heartbeat alone only when it is old).
CONTENT_FIELDS = ("platform", "layers", "packedLayers", "images", "truncated")


@dataclass(frozen=True, slots=True)
class RuntimeImage:
    """One image name in the runtime's store, resolved to the node's platform manifest."""

    name: str
    digest: str  # what the name points to: an index or a single manifest
    manifest: str  # the node's platform manifest
    layers: tuple[Layer, ...]


@dataclass(frozen=True, slots=True)
class Bounds:
    images: int = MAX_IMAGES
    layers: int = MAX_LAYERS


class LayerEntry(TypedDict):
    digest: str
    size: int


class ImageEntry(TypedDict):
    names: list[str]
    digest: str
    manifest: str
    layers: list[int]


class Truncated(TypedDict):
    images: int
    layers: int


class NodeLayersSpec(TypedDict):
    nodeName: str
    runtime: str
    platform: str
    resyncSeconds: int
    heartbeat: str
    layers: NotRequired[list[LayerEntry]]  # one of the two
    packedLayers: NotRequired[str]
    images: list[ImageEntry]
    truncated: Truncated


@dataclass(frozen=True, slots=True)
class NodeRef:
    """The Node the object belongs to; `uid` None: no ownerReference (the Node was unreadable)."""

    name: str
    uid: str | None = None


def build_spec(node_name: str, runtime: str, platform: Platform, resync_seconds: int,
               heartbeat: str, images: Iterable[RuntimeImage],
               bounds: Bounds = Bounds()) -> NodeLayersSpec:
    grouped: dict[tuple[str, str], tuple[set[str], tuple[Layer, ...]]] = {}
    for image in images:
        names, _ = grouped.setdefault((image.digest, image.manifest), (set(), image.layers))
        names.add(image.name)
    # Largest first, so the bounds drop the images whose layers matter least; the key's tail
    # makes the order (and so what is kept) deterministic.
    ordered = sorted(grouped.items(),
                     key=lambda item: (-sum(layer.size for layer in item[1][1]), item[0]))
    kept: list[tuple[tuple[str, str], list[str], tuple[Layer, ...]]] = []
    sizes: dict[str, int] = {}
    dropped_layers: set[str] = set()
    dropped_images = 0
    for key, (names, layers) in ordered:
        new = {layer.digest for layer in layers} - sizes.keys()
        if len(kept) >= bounds.images or len(sizes) + len(new) > bounds.layers:
            dropped_images += 1
            dropped_layers |= new
            continue
        kept.append((key, sorted(names), layers))
        sizes.update((layer.digest, layer.size) for layer in layers)
    digests = sorted(sizes)
    position = {digest: i for i, digest in enumerate(digests)}
    entries: list[ImageEntry] = [
        {"names": names, "digest": digest, "manifest": manifest,
         "layers": [position[layer.digest] for layer in layers]}
        for (digest, manifest), names, layers in sorted(kept, key=lambda item: item[1][0])
    ]
    spec: NodeLayersSpec = {
        "nodeName": node_name,
        "runtime": runtime,
        "platform": str(platform),
        "resyncSeconds": resync_seconds,
        "heartbeat": heartbeat,
        "images": entries,
        "truncated": {"images": dropped_images, "layers": len(dropped_layers - sizes.keys())},
    }
    packed = pack_layers((digest, sizes[digest]) for digest in digests)
    if packed is not None:
        spec["packedLayers"] = packed
    else:
        spec["layers"] = [{"digest": digest, "size": sizes[digest]} for digest in digests]
    return spec


def layer_count(spec: NodeLayersSpec) -> int:
    """How many distinct layers the spec lists (either form)."""
    if "packedLayers" in spec:
        return len(spec["packedLayers"]) * 3 // 4 // RECORD
    return len(spec.get("layers", ()))


def build_object(node: NodeRef, spec: NodeLayersSpec) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": node.name}
    if node.uid is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node.uid}]
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}


def content_changed(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether `new` differs from the published spec `old` in anything but the heartbeat."""
    if old is None:
        return True
    return any(old.get(name) != new.get(name) for name in CONTENT_FIELDS)
