"""A layer source fed by NodeLayers objects (nodelayers.py parses them, nodelayers_watch.py
feeds them): the images the nodes' agents report, answered from memory."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from typing import Any

from webhook.core.images import ImageRef, try_parse
from webhook.core.layers import ImageLayers, Platform, PlatformLayers
from webhook.inventory.nodelayers_known import NodeImage


class NodeImagesSource:
    """A layer source fed by NodeLayers objects: an image a node holds, known by any of its
    names or digests, with that node platform's exact layers; every platform seen across nodes
    is merged into one ImageLayers. Bounded: least recently used images are forgotten. It
    answers from memory only (`resolve` does no I/O), so the chain asks it before registries.
    """

    def __init__(self, max_images: int = 50_000) -> None:
        self._max = max_images
        self._by_digest: OrderedDict[str, ImageLayers] = OrderedDict()
        self._by_ref: OrderedDict[str, str] = OrderedDict()  # tagged ref -> image digest
        # What was last added for an image digest and platform: objects repeat their images
        # every resync, and one parse shares a NodeImage per distinct image (_KNOWN_IMAGES).
        # By platform, then image digest (no key tuple, no Platform hash per image).
        self._added: dict[Platform, dict[str, NodeImage]] = {}

    def __len__(self) -> int:
        return len(self._by_digest)

    def add(self, platform: Platform, images: Iterable[NodeImage]) -> None:
        added = self._added.setdefault(platform, {})
        by_digest = self._by_digest
        for item in images:
            if added.get(item.digest) is item and item.digest in by_digest:
                by_digest.move_to_end(item.digest)  # the same image again: keep it
                continue
            if len(added) >= 2 * self._max:
                added.clear()
            added[item.digest] = item
            known = self._by_digest.get(item.digest)
            wanted = PlatformLayers(item.manifest, item.layers)
            if known is None or known.platforms.get(platform) != wanted:
                platforms = dict(known.platforms) if known is not None else {}
                platforms[platform] = wanted
                ref = known.ref if known is not None else _ref_name(item)
                known = ImageLayers(ref=ref, digest=item.digest, platforms=platforms)
            for digest in known.digests():
                self._remember(self._by_digest, digest, known)
            for name in item.names:
                tagged = _tagged(name)
                if tagged is not None:
                    self._remember(self._by_ref, tagged, item.digest)

    def _remember(self, table: OrderedDict[str, Any], key: str, value: Any) -> None:
        table[key] = value
        table.move_to_end(key)
        while len(table) > self._max:
            table.popitem(last=False)

    def cached(self, ref: ImageRef) -> ImageLayers | None:
        digest = ref.digest
        if digest is None:
            tagged = ref.tagged
            digest = self._by_ref.get(tagged) if tagged is not None else None
        return self._by_digest.get(digest) if digest is not None else None

    async def resolve(self, ref: ImageRef) -> ImageLayers | None:
        return self.cached(ref)


def _tagged(name: str) -> str | None:
    ref = try_parse(name)
    return ref.tagged if ref is not None else None


def _ref_name(item: NodeImage) -> str:
    """A readable reference for the image: its first tagged name, else its first name."""
    return next((t for t in map(_tagged, item.names) if t is not None), item.names[0])
