"""What a kubelet does with images when a pod is bound to its node, as a pure model: which
layers it downloads, how long that takes, what the node status then lists. No I/O; the kubelet
stand-in (kubelet.py) runs it against the API server.

The rules are the kubelet's (pkg/kubelet/images, kuberuntime) with containerd:
- images are pulled one at a time per node (`serializeImagePulls: true`, the default), in the
  order of the pod's init containers then containers; a pod bound while the node pulls for
  another pod waits behind it;
- an image whose name the node already holds is "already present"; otherwise only the layers
  the node lacks are downloaded (containerd shares layers between images by digest);
- a pull takes `bytes / bandwidth + layer_overhead` per downloaded layer, on a scaled clock:
  `clock_scale` nominal seconds pass per wall second, so an evaluation of hours of pulls runs
  in minutes; every time this module returns is nominal;
- the node status lists images largest first, at most 50 (`--node-status-max-images`), each
  by its repo digest and tag names, as the kubelet's image list last saw them: the kubelet
  refreshes that list from the runtime every `image_list_period` (imageCacheRefreshPeriod,
  30 s), each node on its own phase, so a pulled image shows up 0-30 s later plus the next
  status update (measured on real nodes: docs/evaluation.md);
- a pod whose image another pod is still pulling on the node waits for that pull (containerd
  fetches a blob once) and downloads nothing itself;
- images stay when their pods end. With `gc_high` set, image garbage collection frees unused
  images, least recently used first, down to `gc_low` of `disk` (image_gc_manager.freeSpace).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from webhook.core.layers import Platform

# One image book for the simulator's nodes and the stand-in's: image strings -> layers for a
# platform, through a StaticCatalog, with the names a node status gives them.
from webhook.sim.world import (
    MAX_NAMES_PER_IMAGE,
    MAX_STATUS_IMAGES,
    ImageBook,
    StoredImage,
    drop_image,
    last_tick,
    node_phase,
    store_image,
)

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True, slots=True)
class PullSettings:
    bandwidth: float = 20 * MiB  # nominal bytes per second from the registry, per node
    layer_overhead: float = 0.3  # nominal seconds per downloaded layer
    clock_scale: float = 20.0  # nominal seconds per wall second
    disk: int = 60 * GiB  # image filesystem size (compressed bytes)
    gc_high: float | None = None  # None: no image garbage collection
    gc_low: float = 0.80
    image_list_period: float | None = 30.0  # None: the status lists an image once it is pulled


@dataclass(frozen=True, slots=True)
class ImagePull:
    """One image of one pod: `start`/`end` are nominal seconds; `bytes` 0 and `present` when
    the node held it by name."""

    ref: str
    present: bool
    bytes: int
    layers: int  # downloaded
    requested: float  # when the kubelet asked for it (the pod's bind, or its previous image)
    start: float
    end: float
    image_size: int = 0  # the whole image (the event's "Image size")
    known: bool = True  # False: the catalog does not know the image (nothing is pulled)

    @property
    def pull_seconds(self) -> float:
        return self.end - self.start

    @property
    def total_seconds(self) -> float:
        """Including the wait behind other pulls: what the kubelet's event reports."""
        return self.end - self.requested


@dataclass(slots=True)
class NodeImages:
    platform: Platform
    layers: dict[str, int] = field(default_factory=dict)  # on disk or being pulled
    layer_refs: dict[str, int] = field(default_factory=dict)
    images: dict[str, StoredImage] = field(default_factory=dict)
    free_at: float = 0.0  # the puller is busy until then
    disk_used: int = 0
    list_phase: float = 0.0  # when in each image-list period the kubelet refreshes the list


class PullModel:
    """Every node's images and puller; `bind` plans a pod's pulls."""

    def __init__(self, book: ImageBook, settings: PullSettings) -> None:
        self.book = book
        self.settings = settings
        self.nodes: dict[str, NodeImages] = {}

    def add_node(self, name: str, platform: Platform, preloaded: Sequence[str] = ()) -> None:
        node = self.nodes[name] = NodeImages(platform)
        if self.settings.image_list_period:  # each node on a phase of its own, from its name
            node.list_phase = node_phase(name, self.settings.image_list_period)
        for ref in preloaded:
            image = self.book.get(ref, platform)
            if image is not None:  # there before the run: in every image list
                store_image(node, image, -math.inf, 0.0)

    def bind(self, node_name: str, images: Sequence[str], now: float) -> list[ImagePull]:
        """The pulls for a pod bound at `now` (nominal), in order; marks its images in use."""
        node = self.nodes[node_name]
        out = []
        at = now
        for ref in images:
            image = self.book.get(ref, node.platform)
            if image is None:
                out.append(ImagePull(ref, False, 0, 0, at, at, at, known=False))
                continue
            stored = node.images.get(ref)
            if stored is not None:
                stored.in_use += 1
                stored.last_used = now
                if stored.ready_at > at:  # another pod's pull of it is not over: wait for it
                    out.append(ImagePull(ref, False, 0, 0, at, at, stored.ready_at,
                                         image.size))
                    at = stored.ready_at
                else:
                    out.append(ImagePull(ref, True, 0, 0, at, at, at, image.size))
                continue
            missing = [(d, s) for d, s in image.layers if d not in node.layers]
            size = sum(s for _, s in missing)
            start = max(at, node.free_at)
            end = start + size / self.settings.bandwidth \
                + self.settings.layer_overhead * len(missing)
            node.free_at = end
            store_image(node, image, end, now).in_use += 1
            out.append(ImagePull(ref, False, size, len(missing), at, start, end, image.size))
            at = end
        if self.settings.gc_high is not None \
                and node.disk_used > self.settings.gc_high * self.settings.disk:
            self._gc(node, now)
        return out

    def release(self, node_name: str, images: Sequence[str], now: float) -> None:
        """A pod ended: its images stay, no longer in use."""
        node = self.nodes.get(node_name)
        if node is None:
            return
        for ref in images:
            stored = node.images.get(ref)
            if stored is not None and stored.in_use > 0:
                stored.in_use -= 1
                stored.last_used = now

    def listed_at(self, node_name: str, now: float) -> float:
        """When the node's kubelet last refreshed its image list, as of `now` (each node on a
        phase of its own, from its name); `now` without an image-list period."""
        period = self.settings.image_list_period
        if not period:
            return now
        return last_tick(now, self.nodes[node_name].list_phase, period)

    def behind(self, node_name: str, now: float) -> bool:
        """Whether an image pulled by `now` is not yet in the node's image list."""
        listed = self.listed_at(node_name, now)
        return any(listed < s.ready_at <= now for s in self.nodes[node_name].images.values())

    def status_images(self, node_name: str, now: float) -> list[dict[str, object]]:
        """`node.status.images` as the kubelet reports it at `now`: the images pulled by its
        last image-list refresh (the images it started with always), largest first, at most
        50."""
        node = self.nodes[node_name]
        listed = self.listed_at(node_name, now)
        ranked = sorted((s.image for s in node.images.values() if s.ready_at <= listed),
                        key=lambda i: (-i.size, i.ref))
        return [{"names": list(i.names[:MAX_NAMES_PER_IMAGE]), "sizeBytes": i.size}
                for i in ranked[:MAX_STATUS_IMAGES]]

    def _gc(self, node: NodeImages, now: float) -> None:
        target = self.settings.gc_low * self.settings.disk
        unused = (s for s in node.images.values() if s.in_use == 0 and s.ready_at <= now)
        for stored in sorted(unused, key=lambda s: s.last_used):
            if node.disk_used <= target:
                break
            drop_image(node, stored)


def go_duration(seconds: float) -> str:
    """A Go time.Duration string as the kubelet prints one (`1.234s`, `512ms`, `1m2.5s`)."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{seconds * 1000:.3f}".rstrip("0").rstrip(".") + "ms"
    minutes, rest = divmod(seconds, 60.0)
    text = f"{rest:.9f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text


def pulled_message(pull: ImagePull) -> str:
    """The kubelet's `Pulled` event message (image_manager.go)."""
    if pull.present:
        return f'Container image "{pull.ref}" already present on machine'
    return (f'Successfully pulled image "{pull.ref}" in {go_duration(pull.pull_seconds)} '
            f"({go_duration(pull.total_seconds)} including waiting). "
            f"Image size: {pull.image_size} bytes.")
