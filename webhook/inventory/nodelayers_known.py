"""Values met before in other NodeLayers objects, each kept once: layers, packed records,
images and image digests. A relist of 5,000 objects of 300 layers and 40 images holds a few
thousand distinct ones; found here, they are neither decoded, checked nor built again (1.5
million Layer objects per list otherwise, most of them garbage at once and the rest scattered
through the heap), and every object shares the same immutable values (interned strings).
Each table is bounded: cleared when full (most values are shared, so it refills at once).
Only checked values enter (nodelayers.py checks them first). Pure: no I/O.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from webhook.core.images import is_digest
from webhook.core.layers import Layer


@dataclass(frozen=True, slots=True)
class NodeImage:
    names: tuple[str, ...]
    digest: str  # what the names resolve to (an index or a single manifest)
    manifest: str  # the node platform's manifest
    layers: tuple[Layer, ...]  # manifest order, exact compressed sizes


# Every layer seen in an object, by digest: 5,000 nodes of 300 layers hold a few thousand
# distinct ones, so a node's layers are found here, not built anew (1.5 million Layer objects
# per list otherwise, most of them garbage at once and the rest scattered through the heap)
# and a digest is checked once. Shared by every object (interned digests, immutable values).
KNOWN_LAYERS: dict[str, Layer] = {}
MAX_KNOWN_LAYERS = 200_000


def remember(digest: str, size: int) -> Layer:
    """A checked layer, interned and kept in KNOWN_LAYERS (bounded; most layers are
    shared, so the table refills at once after a clear)."""
    layer = Layer(sys.intern(digest), size)
    if len(KNOWN_LAYERS) >= MAX_KNOWN_LAYERS:
        KNOWN_LAYERS.clear()
    KNOWN_LAYERS[layer.digest] = layer
    return layer


# Records already decoded (bounded like KNOWN_LAYERS; the same Layer values).
KNOWN_RECORDS: dict[bytes, Layer] = {}


# Images and image digests already seen in an object (bounded; see KNOWN_LAYERS).
KNOWN_IMAGES: dict[tuple[str, str, tuple[str, ...]], NodeImage] = {}
KNOWN_DIGESTS: set[str] = set()
MAX_KNOWN_IMAGES = 100_000


def known_image(known: dict[tuple[str, str, tuple[str, ...]], NodeImage], digest: str,
                manifest: str, names: tuple[str, ...], layers: tuple[Layer, ...]) -> NodeImage:
    """One value per distinct image across every object: the source and the next object's
    parse find it (and the source sees it has it, by identity). Found by its names and
    digests, then its layers compared: they are the shared Layer values (KNOWN_LAYERS), so
    the tuples compare by identity, without hashing a Layer."""
    key = (digest, manifest, names)
    image = known.get(key)
    if image is None or image.layers != layers:
        if len(known) >= MAX_KNOWN_IMAGES:
            known.clear()
        image = known[key] = NodeImage(key[2], sys.intern(digest), sys.intern(manifest), layers)
    return image


def checked_digest(digest: str) -> bool:
    """Whether `digest` is a sha256 digest; one that is is kept (interned) in KNOWN_DIGESTS."""
    if not is_digest(digest):
        return False
    if len(KNOWN_DIGESTS) >= MAX_KNOWN_IMAGES:
        KNOWN_DIGESTS.clear()
    KNOWN_DIGESTS.add(sys.intern(digest))
    return True

