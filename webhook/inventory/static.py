"""Static inventory: a NodeList file (`kubectl get nodes -o json`, JSON or YAML) plus layers
from a layer source. Used by --nodes, --demo, explain, the simulator and tests."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

import orjson

from webhook.core.images import ImageRef, try_parse
from webhook.core.index import LayerIndex
from webhook.core.layers import ImageLayers, LayerSource, Platform
from webhook.core.nodes import NodeError, NodeInfo, node_from_object
from webhook.yaml_document import one_document


class InventoryFileError(ValueError):
    """The nodes file cannot be read or is not a NodeList."""


@dataclass(frozen=True, slots=True)
class NodeLayers:
    layers: frozenset[str]
    unresolved: tuple[str, ...]  # one name per node image no source knows (yet)
    images: frozenset[str] = frozenset()  # digests of the images the layers came from


Recall = Callable[[str, ImageLayers | None], ImageLayers | None]
"""(a node image's key name, what the source answered) -> the answer to use. The live
inventory remembers answers here and recalls them while a tag's entry has expired."""


def node_layers(node: NodeInfo, source: LayerSource, recall: Recall | None = None) -> NodeLayers:
    """The layers of every image the node reports, for the node's own platform.

    Digest names are tried first: containerd reports the digest a tag resolved to, which
    identifies the content even when the tag has moved since. An image's key name (for
    `unresolved` and `recall`) is that first name."""
    layers: set[str] = set()
    unresolved: list[str] = []
    images: set[str] = set()
    platform = node.platform
    for names in node.images:  # a hot path (every node event): plain loops, no helpers
        if not names:
            continue
        key, refs = _KEYED.get(names) or _keyed(names)
        image = None
        for ref in refs:
            if (image := source.cached(ref)) is not None:
                break
        else:
            unresolved.append(key)
        if recall is not None:
            image = recall(key, image)
        if image is not None:
            images.add(image.digest)
            manifest = image.platforms.get(platform)
            if manifest is not None:
                layers |= manifest.layer_set
    return NodeLayers(frozenset(layers), tuple(unresolved), frozenset(images))


# A node image's names (the tuple nodes.py shares between the nodes reporting it) -> its key
# name and its names parsed, digest names first: what node_layers asks the sources, worked out
# once per distinct image rather than for each of 5,000 nodes x 50 images at every relist.
# A cache of a pure function: cleared when full (an entry with its references is ~1 KB, so
# at most ~20 MB where a cluster's nodes report ~1,000 distinct images).
_KEYED: dict[tuple[str, ...], tuple[str, tuple[ImageRef, ...]]] = {}
MAX_KEYED = 20_000


def _keyed(names: tuple[str, ...]) -> tuple[str, tuple[ImageRef, ...]]:
    ordered = sorted(names, key=_digest_first)
    keyed = ordered[0], tuple(ref for ref in map(try_parse, ordered) if ref is not None)
    if len(_KEYED) >= MAX_KEYED:
        _KEYED.clear()
    _KEYED[names] = keyed
    return keyed


def layer_digests(image: ImageLayers, platform: Platform) -> tuple[str, ...]:
    """The image's layers for `platform` (none when the image does not support it)."""
    manifest = image.for_platform(platform)
    return tuple(layer.digest for layer in manifest.layers) if manifest is not None else ()


_DIGEST = attrgetter("digest")


def _digest_first(name: str) -> bool:
    return "@" not in name


def read_node_list(path: Path) -> list[NodeInfo]:
    try:
        text = path.read_bytes()
    except OSError as exc:
        raise InventoryFileError(f"cannot read nodes file {path}: {exc}") from exc
    try:
        raw: Any = orjson.loads(text)
    except orjson.JSONDecodeError:
        try:
            raw = one_document(text, str(path), "NodeList (kubectl get nodes -o yaml)")
        except ValueError as exc:
            raise InventoryFileError(str(exc)) from exc
    return parse_node_list(raw, source=str(path))


def parse_node_list(raw: object, source: str = "nodes") -> list[NodeInfo]:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("items"), list):
        raise InventoryFileError(f"{source}: expected a NodeList (an object with 'items')")
    nodes = []
    for i, item in enumerate(raw["items"]):
        if not isinstance(item, Mapping):
            raise InventoryFileError(f"{source}: items[{i}] is not an object")
        try:
            nodes.append(node_from_object(item))
        except NodeError as exc:
            raise InventoryFileError(f"{source}: items[{i}]: {exc}") from exc
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise InventoryFileError(f"{source}: duplicate node names")
    return nodes


def build_index(nodes: Iterable[NodeInfo], source: LayerSource) -> tuple[LayerIndex, list[str]]:
    """Index `nodes`; also returns the node image names no source could resolve."""
    index = LayerIndex()
    unresolved: list[str] = []
    for node in nodes:
        found = node_layers(node, source)
        index.upsert(node, found.layers)
        unresolved.extend(found.unresolved)
    return index, unresolved
