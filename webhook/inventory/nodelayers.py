"""NodeLayers objects (published by `layer-locality agent`, one per node): validation, freshness,
and the layer source their image names feed. Pure: no I/O.

The contract (../shared/DESIGN.md, docs/deploy.md "Node agent"): `spec.layers` holds each
distinct layer once (digest, compressed size); `spec.images[].layers` are indices into it, in
manifest order. An object is FRESH while now - heartbeat <= 3 x resyncSeconds; a heartbeat in
the future (clock skew between node and webhook) counts as now. Objects come from agents on
the nodes: everything is bounded and checked before it reaches the index.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from itertools import compress, count
from operator import attrgetter, itemgetter, not_
from typing import Annotated, Any, TypeGuard, cast

import msgspec

from webhook.core.images import is_digest
from webhook.core.layers import Layer, Platform
from webhook.core.packedlayers import PackedLayersError, layer_of, records
from webhook.inventory.nodelayers_known import (
    KNOWN_DIGESTS,
    KNOWN_IMAGES,
    KNOWN_LAYERS,
    KNOWN_RECORDS,
    MAX_KNOWN_LAYERS,
    NodeImage,
    checked_digest,
    known_image,
    remember,
)

GROUP = "layer-locality.io"
VERSION = "v1alpha1"
PLURAL = "nodelayers"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "NodeLayers"
RUNTIMES = frozenset({"containerd", "cri-o"})
MAX_IMAGES = 2000
MAX_LAYERS = 6000
MAX_NAMES_PER_IMAGE = 64
MAX_LAYERS_PER_IMAGE = 1000
MAX_NAME_LENGTH = 512
MAX_RESYNC_SECONDS = 86_400
# Bounds no real object comes near, so that sums over a pod's layers stay exact 64-bit
# integers (the decision annotation encodes them): 6,000 layers of 16 TiB stay under 2^57.
MAX_LAYER_BYTES = 1 << 44
MAX_TRUNCATED = 1 << 31
STALE_AFTER_RESYNCS = 3


class NodeLayersError(ValueError):
    """The object breaks the contract; `reason` is a short label for metrics."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class NodeLayersInfo:
    node: str
    runtime: str
    platform: Platform
    resync_seconds: int
    heartbeat: float  # seconds since the epoch
    # Every distinct layer digest on the node, sorted; the digests are interned (each exists
    # once in memory however many nodes hold it): a tuple costs 8 bytes a layer where a
    # frozenset of 300 costs 16 KB (a node's share of the inventory, issue: lean at 5,000).
    layers: tuple[str, ...]
    images: tuple[NodeImage, ...]
    truncated_images: int = 0
    truncated_layers: int = 0

    @property
    def stale_after(self) -> float:
        return float(STALE_AFTER_RESYNCS * self.resync_seconds)

    def fresh(self, now: float) -> bool:
        """now - heartbeat <= 3 x resyncSeconds; a heartbeat ahead of `now` counts as now."""
        return now - min(self.heartbeat, now) <= self.stale_after


# What a NodeLayers object's spec is decoded to from a list page or a watch event
# (webhook/inventory/lean.py): exactly the fields read, with the types the contract gives them.
# A page or event whose object does not fit (a field of another type, a layer without a
# size...) is decoded whole instead, and parse_node_layers then rejects that object with the
# reason it always gave; what fits is checked below for everything the types do not say
# (bounds, digests, indices), in the same order, so an object gets the same answer both ways.
class SpecLayer(msgspec.Struct):
    digest: str
    size: int


class SpecImage(msgspec.Struct):
    names: list[str]
    digest: str
    manifest: str
    # Indices are never negative (the decoder checks it, so the loop below need not): an
    # object with one is decoded whole and rejected as before. A Spec is only ever what
    # lean.py's decoder built: one made in Python would skip this check.
    layers: list[Annotated[int, msgspec.Meta(ge=0)]]


class SpecTruncated(msgspec.Struct):
    images: int
    layers: int


class Spec(msgspec.Struct, kw_only=True):
    nodeName: Any = None
    runtime: Any = None
    platform: Any = None
    resyncSeconds: Any = None
    heartbeat: Any = None
    layers: list[SpecLayer] | None = None  # one of the two (packedlayers.py)
    packedLayers: str | None = None
    images: list[SpecImage]
    truncated: SpecTruncated


def parse_node_layers(obj: Mapping[str, Any]) -> NodeLayersInfo:
    """Validate a NodeLayers object (JSON-decoded, its spec possibly to `Spec`);
    NodeLayersError says what is wrong."""
    if obj.get("apiVersion") != API_VERSION or obj.get("kind") != KIND:
        raise NodeLayersError("kind", f"expected {API_VERSION} {KIND}")
    metadata, spec = obj.get("metadata"), obj.get("spec")
    if type(spec) is Spec:
        if not isinstance(metadata, Mapping):
            raise NodeLayersError("shape", "metadata and spec must be objects")
        return _parse_decoded(metadata, spec)
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        raise NodeLayersError("shape", "metadata and spec must be objects")
    name, runtime, platform, resync, heartbeat = _header(
        metadata.get("name"), spec.get("nodeName"), spec.get("runtime"), spec.get("platform"),
        spec.get("resyncSeconds"), spec.get("heartbeat"))
    packed = spec.get("packedLayers")
    layers = _packed(packed, spec.get("layers")) if packed is not None else _layers(
        spec.get("layers"))
    images = _images(spec.get("images"), layers)
    truncated = spec.get("truncated")
    if not isinstance(truncated, Mapping) or not all(
            _int(truncated.get(k)) and 0 <= truncated[k] <= MAX_TRUNCATED
            for k in ("images", "layers")):
        raise NodeLayersError("truncated", "truncated needs counts 'images' and 'layers' >= 0")
    return NodeLayersInfo(
        node=sys.intern(name), runtime=runtime, platform=platform, resync_seconds=resync,
        heartbeat=heartbeat, layers=tuple(sorted(map(_DIGEST_OF, layers))),
        images=images,
        truncated_images=truncated["images"], truncated_layers=truncated["layers"])


def _parse_decoded(metadata: Mapping[str, Any], spec: Spec) -> NodeLayersInfo:
    """parse_node_layers for a spec decoded to `Spec`: the same checks, on typed fields."""
    name, runtime, platform, resync, heartbeat = _header(
        metadata.get("name"), spec.nodeName, spec.runtime, spec.platform, spec.resyncSeconds,
        spec.heartbeat)
    if spec.packedLayers is not None:
        layers = _packed(spec.packedLayers, spec.layers)
    elif spec.layers is not None:
        layers = _decoded_layers(spec.layers)
    else:
        raise NodeLayersError("layers", "layers must be a list")
    images = _decoded_images(spec.images, layers)
    truncated = spec.truncated
    if not (0 <= truncated.images <= MAX_TRUNCATED and 0 <= truncated.layers <= MAX_TRUNCATED):
        raise NodeLayersError("truncated", "truncated needs counts 'images' and 'layers' >= 0")
    return NodeLayersInfo(
        node=sys.intern(name), runtime=runtime, platform=platform, resync_seconds=resync,
        heartbeat=heartbeat, layers=tuple(sorted(map(_DIGEST_OF, layers))),
        images=images, truncated_images=truncated.images, truncated_layers=truncated.layers)


def _header(name: object, node_name: object, runtime: object, platform_text: object,
            resync: object, heartbeat_text: object) -> tuple[str, str, Platform, int, float]:
    """The object's identity and scalars, checked in the contract's order."""
    if not isinstance(name, str) or not name or node_name != name:
        raise NodeLayersError("node_name", "spec.nodeName must equal metadata.name")
    if runtime not in RUNTIMES:
        raise NodeLayersError("runtime", f"unknown runtime {runtime!r}")
    try:
        platform = Platform.parse(_string(platform_text, "platform"))
    except ValueError as exc:
        raise NodeLayersError("platform", str(exc)) from exc
    if not _int(resync) or not 1 <= resync <= MAX_RESYNC_SECONDS:
        raise NodeLayersError("resync", f"resyncSeconds must be 1..{MAX_RESYNC_SECONDS}")
    heartbeat = parse_heartbeat(heartbeat_text)
    return name, str(runtime), platform, resync, heartbeat


def parse_heartbeat(value: object) -> float:
    """RFC 3339 with an explicit UTC offset (`Z` or `+00:00`...) -> seconds since the epoch."""
    text = _string(value, "heartbeat")
    try:
        moment = datetime.fromisoformat(text)
    except ValueError as exc:
        raise NodeLayersError("heartbeat", f"heartbeat is not RFC 3339: {text!r}") from exc
    if moment.tzinfo is None:
        raise NodeLayersError("heartbeat", f"heartbeat has no UTC offset: {text!r}")
    return moment.timestamp()


_DIGEST_OF = attrgetter("digest")

def _packed(value: object, listed: object) -> tuple[Layer, ...]:
    """The layers of `packedLayers` (webhook/core/packedlayers.py), checked as `_layers` checks
    a list; an object carries the table one way only."""
    if listed is not None:
        raise NodeLayersError("layers", "layers and packedLayers: one of them, not both")
    if not isinstance(value, str):
        raise NodeLayersError("layers", "packedLayers must be a string")
    try:
        table = records(value, MAX_LAYERS)
    except PackedLayersError as exc:
        raise NodeLayersError("bounds" if exc.over_bound else "layers",
                              f"packedLayers: {exc}") from None
    # Most records were met in another node's object: one dict lookup each, no decoding.
    found = list(map(KNOWN_RECORDS.get, table))
    # The misses' positions, found in C (a Layer is true, a miss None; `None in found` would
    # call Layer.__eq__ for each), decoded in order: the first bad one raises, as before.
    for i in compress(count(), map(not_, found)):
        found[i] = _new_record(i, table[i])
    layers = cast("list[Layer]", found)
    if len(set(table)) != len(table):
        raise NodeLayersError("layers", "layers must be distinct")
    return tuple(layers)


def _new_record(i: int, record: bytes) -> Layer:
    digest, size = layer_of(record)
    if size > MAX_LAYER_BYTES:
        raise NodeLayersError("layers", f"packedLayers[{i}]: a size above {MAX_LAYER_BYTES}")
    layer = KNOWN_LAYERS.get(digest)
    if layer is None or layer.size != size:
        layer = remember(digest, size)
    if len(KNOWN_RECORDS) >= MAX_KNOWN_LAYERS:
        KNOWN_RECORDS.clear()
    KNOWN_RECORDS[record] = layer
    return layer


def _layers(value: object) -> tuple[Layer, ...]:
    if not isinstance(value, list):
        raise NodeLayersError("layers", "layers must be a list")
    if len(value) > MAX_LAYERS:
        raise NodeLayersError("bounds", f"{len(value)} layers, at most {MAX_LAYERS}")
    layers = []
    known = KNOWN_LAYERS
    for i, item in enumerate(value):
        digest = item.get("digest") if isinstance(item, dict) else None
        size = item.get("size") if isinstance(item, dict) else None
        layer = known.get(digest) if isinstance(digest, str) else None
        if layer is not None and layer.size == size and _int(size):
            layers.append(layer)  # checked before: the same digest, the same size
            continue
        if not isinstance(digest, str) or not is_digest(digest) or not _int(size) \
                or not 0 <= size <= MAX_LAYER_BYTES:
            raise NodeLayersError("layers", f"layers[{i}] needs a sha256 digest and a size >= 0")
        layers.append(remember(digest, size))
    if len({layer.digest for layer in layers}) != len(layers):
        raise NodeLayersError("layers", "layers must be distinct")
    return tuple(layers)


def _images(value: object, layers: tuple[Layer, ...]) -> tuple[NodeImage, ...]:
    if not isinstance(value, list):
        raise NodeLayersError("images", "images must be a list")
    if len(value) > MAX_IMAGES:
        raise NodeLayersError("bounds", f"{len(value)} images, at most {MAX_IMAGES}")
    images = []
    known = KNOWN_IMAGES
    count = len(layers)
    for i, item in enumerate(value):
        if not isinstance(item, dict):
            raise NodeLayersError("images", f"images[{i}] must be an object")
        names, indices = item.get("names"), item.get("layers")
        digest, manifest = item.get("digest"), item.get("manifest")
        # `type(...) is` rather than isinstance: JSON gives exact types, and this runs for
        # every image of every object (5,000 nodes: 200,000 images a list).
        if (type(names) is not list or not names or len(names) > MAX_NAMES_PER_IMAGE
                or not all(type(n) is str and 0 < len(n) <= MAX_NAME_LENGTH for n in names)):
            raise NodeLayersError("images", f"images[{i}].names: 1..{MAX_NAMES_PER_IMAGE} "
                                  f"strings of at most {MAX_NAME_LENGTH} characters")
        if not (type(digest) is str and type(manifest) is str
                and (digest in KNOWN_DIGESTS or checked_digest(digest))
                and (manifest in KNOWN_DIGESTS or checked_digest(manifest))):
            raise NodeLayersError("images", f"images[{i}] needs sha256 digest and manifest")
        if (type(indices) is not list or len(indices) > MAX_LAYERS_PER_IMAGE
                or not all(type(x) is int for x in indices)
                or (indices and (min(indices) < 0 or max(indices) >= count))):
            raise NodeLayersError("images", f"images[{i}].layers must be indices into layers")
        images.append(known_image(known, digest, manifest, tuple(names),
                             tuple(layers[x] for x in indices)))
    return tuple(images)


def _decoded_layers(value: list[SpecLayer]) -> tuple[Layer, ...]:
    """_layers for decoded layers: each has a string digest and an int size already."""
    if len(value) > MAX_LAYERS:
        raise NodeLayersError("bounds", f"{len(value)} layers, at most {MAX_LAYERS}")
    layers = []
    known = KNOWN_LAYERS
    for i, item in enumerate(value):
        digest, size = item.digest, item.size
        layer = known.get(digest)
        if layer is not None and layer.size == size:
            layers.append(layer)  # checked before: the same digest, the same size
            continue
        if not is_digest(digest) or not 0 <= size <= MAX_LAYER_BYTES:
            raise NodeLayersError("layers", f"layers[{i}] needs a sha256 digest and a size >= 0")
        layers.append(remember(digest, size))
    if len({layer.digest for layer in layers}) != len(layers):
        raise NodeLayersError("layers", "layers must be distinct")
    return tuple(layers)


def _decoded_images(value: list[SpecImage], layers: tuple[Layer, ...]) -> tuple[NodeImage, ...]:
    """_images for decoded images: names a list of strings, digests strings, indices ints."""
    if len(value) > MAX_IMAGES:
        raise NodeLayersError("bounds", f"{len(value)} images, at most {MAX_IMAGES}")
    images = []
    known = KNOWN_IMAGES
    digests = KNOWN_DIGESTS
    count = len(layers)
    at = layers.__getitem__
    for i, item in enumerate(value):
        names, indices, digest, manifest = item.names, item.layers, item.digest, item.manifest
        # An image met in an earlier object (nearly all): its names and digests were checked
        # then; only its indices, which are this object's, are checked again.
        named = tuple(names)  # the image's key with its digests, built once
        image = known.get((digest, manifest, named))
        if image is not None and len(indices) <= MAX_LAYERS_PER_IMAGE:
            try:  # indices are >= 0 (SpecImage); one past the table raises
                found = _gather(layers, indices)
            except IndexError:
                found = None
            if image.layers == found:
                images.append(image)
                continue
        if (not names or len(names) > MAX_NAMES_PER_IMAGE
                or not all(0 < len(n) <= MAX_NAME_LENGTH for n in names)):
            raise NodeLayersError("images", f"images[{i}].names: 1..{MAX_NAMES_PER_IMAGE} "
                                  f"strings of at most {MAX_NAME_LENGTH} characters")
        if not ((digest in digests or checked_digest(digest))
                and (manifest in digests or checked_digest(manifest))):
            raise NodeLayersError("images", f"images[{i}] needs sha256 digest and manifest")
        if (len(indices) > MAX_LAYERS_PER_IMAGE
                or (indices and (min(indices) < 0 or max(indices) >= count))):
            raise NodeLayersError("images", f"images[{i}].layers must be indices into layers")
        images.append(known_image(known, digest, manifest, named, tuple(map(at, indices))))
    return tuple(images)


def _gather(layers: tuple[Layer, ...], indices: list[int]) -> tuple[Layer, ...] | None:
    """layers[i] for each index, in order: itemgetter gathers in C (half the time of a map
    over layers.__getitem__), but needs two indices or more to give a tuple."""
    if len(indices) > 1:
        found: tuple[Layer, ...] = itemgetter(*indices)(layers)
        return found
    return (layers[indices[0]],) if indices else ()


def _string(value: object, field: str) -> str:
    if not isinstance(value, str):
        raise NodeLayersError(field, f"{field} must be a string")
    return value


def _int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)
