"""Layers in flight: a pod just bound to a node counts its images' layers as present there
until the node status reports the image or `inflight_seconds` pass, so the next pod of the
same image sees the first one's node as warm before the kubelet has pulled anything.

InFlightLayers is mixed into the live inventory (live.py): its methods read and write the
inventory's state, declared below, as they did when they were the inventory's own. Runs on
the event loop, which alone touches the index.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from webhook.core.images import try_parse
from webhook.core.index import LayerIndex
from webhook.core.layers import ImageLayers, SourceChain
from webhook.core.nodes import NodeInfo
from webhook.core.pods import pod_images
from webhook.inventory.firstindex import FirstIndex
from webhook.inventory.podstate import BoundPod
from webhook.inventory.resolving import ImageResolutions
from webhook.inventory.static import layer_digests

if TYPE_CHECKING:  # live.py mixes this in: its settings' type only, no import cycle at run time
    from webhook.inventory.live import WatchSettings


@dataclass(slots=True)
class InFlight:
    image: ImageLayers
    expires: float


class InFlightLayers:
    """A bound pod's images on its node until reported or expired (LiveInventory's part)."""

    # The inventory's state these methods share with it (set by LiveInventory.__init__).
    _settings: WatchSettings
    _clock: Callable[[], float]
    _sources: SourceChain
    _resolutions: ImageResolutions
    _first: FirstIndex
    _index: LayerIndex
    _nodes: dict[str, NodeInfo]
    _reported: dict[str, tuple[str, ...]]  # node -> digests of its reported images
    _inflight: dict[str, dict[str, InFlight]]  # node -> image digest -> entry
    _reindex: Callable[[str], None]  # now, or once the first lists are in

    def _pod_bound(self, obj: Mapping[str, Any], pod: BoundPod) -> None:
        """First sight of a bound pod: its images count as present on its node."""
        if pod.finished:
            return
        reported = self._reported.get(pod.node, ())
        expires = self._clock() + self._settings.inflight_seconds
        added: list[ImageLayers] = []
        for text in pod_images(obj):
            ref = try_parse(text)
            image = self._sources.cached(ref) if ref is not None else None
            if image is None and ref is not None:
                # Unknown yet: resolve it so the next pod of this image is answered from memory.
                self._resolutions.queue(text, None)
            if image is None or image.digest in reported:
                continue
            entries = self._inflight.setdefault(pod.node, {})
            if image.digest not in entries:
                entries[image.digest] = InFlight(image, expires)
                added.append(image)
        node = self._nodes.get(pod.node)
        if added and node is not None and self._first.holding:
            self._first.reindex(pod.node)  # noted: built with its in-flight layers
        elif added and node is not None:
            # Only layers are added: extend what the index holds instead of recomputing the
            # node from its 50 images (the same result, a tenth of the time: a pod list
            # binds 30 pods a node). Removal (expiry, node updates) goes through _reindex.
            held = self._index.layers_of(pod.node)
            new = held.union(*(layer_digests(image, node.platform) for image in added))
            if len(new) > len(held):
                self._index.upsert(node, new)

    def expire_inflight(self) -> int:
        """Drop in-flight entries past their time; returns how many were dropped."""
        now = self._clock()
        dropped = 0
        for node, entries in list(self._inflight.items()):
            stale = [d for d, e in entries.items() if e.expires <= now]
            for digest in stale:
                del entries[digest]
            if stale:
                dropped += len(stale)
                self._reindex(node)
            if not entries:
                self._inflight.pop(node, None)
        return dropped
