"""The webhook's own view in the simulator: its layer sources and its inventory, fed only by
what production would give it (delayed watch events, a registry that takes time).

- `SimRegistry`, the webhook's layer source: knows an image only `delay` seconds after the
  webhook first asked for it (a review, a node status or a bound pod naming it), as the
  registry resolver does when a resolution overruns the review budget (250 ms) and finishes in
  the background; reviews in between get nothing for that image, the next pod benefits. Images
  on the nodes when the run starts are known (the webhook has been running and resolved them).
  Knowledge is per image (its digest), whichever name asks; answers come from the run's catalog.
- `IndexListener`, the inventory (as webhook/inventory/live.py keeps it): a node's layers are
  those of the images its status reports plus the images of pods the pod watch reported bound
  to it ("in flight") until the status reports them or `inflight_seconds` pass. Pod ends change
  nothing (the layers stay on the node).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.images import ImageRef, try_parse
from webhook.core.index import LayerIndex
from webhook.core.layers import ImageLayers
from webhook.core.nodes import NodeInfo, node_from_object
from webhook.registry.catalog import StaticCatalog
from webhook.sim.watch import BoundPod

Clock = Callable[[], float]


ROUTINGS = ("connection", "random", "one", "even")


@dataclass(frozen=True, slots=True)
class ViewConfig:
    """What the webhook can know, and when (docs/evaluation.md, "What the webhook sees")."""

    watch_delay: float = 1.0  # bind / pod end / node status -> the webhook's watches
    # Each replica's pod watch up to this much later again, drawn per event and replica:
    # replicas that see each other's reviews at different moments (a busy machine).
    watch_jitter: float = 0.0
    # The replicas in their first minutes (a cold start, a rollout: SiblingTracker's
    # `started`), as the real control plane's evaluation starts them; else long serving.
    young: bool = False
    registry_delay: float = 0.5  # first review of an unseen image -> the registry's answer
    budget: float = 0.25  # the webhook's --budget-ms: a registry faster than this is waited for
    inflight_seconds: float = 600.0  # live inventory WatchSettings.inflight_seconds
    pending_seconds: float = 60.0  # live inventory WatchSettings.pending_seconds
    spread_guard: bool = True  # live mode has one; False replays the static-inventory webhook
    replicas: int = 2  # webhook replicas, as the manifests ship
    routing: str = "connection"  # which replica reviews a pod (policies.Router; ROUTINGS)
    connections: int = 2  # `connection` routing: the API server's connections kept at most
    holdout: float = 0.0  # the webhook's --holdout: this share of workloads left unsteered
    holdout_seed: str = "sim"


class SimRegistry:
    """A LayerSource answering from `catalog` once an image has been resolved."""

    def __init__(self, catalog: StaticCatalog, delay: float, clock: Clock,
                 budget: float = 0.0) -> None:
        self.catalog = catalog
        self.delay = delay
        self.budget = budget
        self.clock = clock
        self._ready_at: dict[str, float] = {}  # image digest -> when the answer is there
        self._pending: list[tuple[float, str]] = []

    def cached(self, ref: ImageRef) -> ImageLayers | None:
        image = self.catalog.cached(ref)
        if image is None:
            return None
        now = self.clock()
        ready = self._ready_at.get(image.digest)
        if ready is None:  # first sight: the resolution starts now
            ready = self._ready_at[image.digest] = now + self.delay
            heapq.heappush(self._pending, (ready, image.digest))
        return image if ready <= now else None

    def preload(self, names: Iterable[str]) -> None:
        """Images known from the start (the nodes' images when the run begins)."""
        for text in names:
            ref = try_parse(text)
            image = self.catalog.cached(ref) if ref is not None else None
            if image is not None:
                self._ready_at[image.digest] = 0.0

    async def resolve(self, ref: ImageRef) -> ImageLayers | None:
        # A registry that answers within the review's budget is waited for (the review takes
        # that much longer); a slower one misses now and answers after `delay`.
        image = self.cached(ref)
        if image is None and self.delay <= self.budget:
            known = self.catalog.cached(ref)
            if known is not None:
                self._ready_at[known.digest] = self.clock()
                return known
        return image

    def learned(self, now: float) -> bool:
        """Whether a resolution finished since the last call (nodes may need re-indexing)."""
        done = False
        while self._pending and self._pending[0][0] <= now:
            heapq.heappop(self._pending)
            done = True
        return done

    def lookup(self, text: str) -> ImageLayers | None:
        ref = try_parse(text)
        return self.cached(ref) if ref is not None else None


class IndexListener:
    """Keeps `index` as the live inventory would, from the events SimWatch delivers."""

    def __init__(self, index: LayerIndex, registry: SimRegistry, clock: Clock,
                 inflight_seconds: float = 600.0) -> None:
        self.index = index
        self.registry = registry
        self.clock = clock
        self.inflight_seconds = inflight_seconds
        self._nodes: dict[str, NodeInfo] = {}
        self._reported: dict[str, frozenset[str]] = {}  # node -> digests of reported images
        self._inflight: dict[str, dict[str, tuple[ImageLayers, float]]] = {}
        self._expiry: list[tuple[float, str]] = []
        self._unresolved: set[str] = set()  # nodes reporting an image not known yet

    def node(self, obj: Mapping[str, Any]) -> None:
        info = node_from_object(obj)
        if self._nodes.get(info.name) != info:
            self._nodes[info.name] = info
            self._reindex(info.name)

    def bound(self, pod: BoundPod) -> None:
        reported = self._reported.get(pod.node, frozenset())
        expires = self.clock() + self.inflight_seconds
        added = False
        for text in pod.images:
            image = self.registry.lookup(text)
            if image is None or image.digest in reported:
                continue
            entries = self._inflight.setdefault(pod.node, {})
            if image.digest not in entries:
                entries[image.digest] = (image, expires)
                heapq.heappush(self._expiry, (expires, pod.node))
                added = True
        if added:
            self._reindex(pod.node)

    def gone(self, uid: str) -> None:
        return None  # the pod's layers stay on the node; in-flight entries expire on their own

    def advance(self, now: float) -> None:
        """Expire in-flight entries; re-index nodes whose images the registry now knows."""
        stale: set[str] = set()
        while self._expiry and self._expiry[0][0] <= now:
            stale.add(heapq.heappop(self._expiry)[1])
        for name in stale:
            entries = self._inflight.get(name, {})
            for digest in [d for d, (_, exp) in entries.items() if exp <= now]:
                del entries[digest]
        if self.registry.learned(now):
            stale |= self._unresolved
        for name in stale:
            self._reindex(name)

    def _reindex(self, name: str) -> None:
        info = self._nodes.get(name)
        if info is None:
            return
        layers: set[str] = set()
        reported: set[str] = set()
        unresolved = False
        for names in info.images:
            image = self._status_image(names)
            if image is None:
                unresolved = True
                continue
            reported.add(image.digest)
            manifest = image.for_platform(info.platform)
            if manifest is not None:
                layers.update(layer.digest for layer in manifest.layers)
        if unresolved:
            self._unresolved.add(name)
        else:
            self._unresolved.discard(name)
        self._reported[name] = frozenset(reported)
        entries = self._inflight.get(name, {})
        for digest in [d for d in entries if d in reported]:
            del entries[digest]  # the kubelet reports it now: no longer in flight
        for image, _ in entries.values():
            manifest = image.for_platform(info.platform)
            if manifest is not None:
                layers.update(layer.digest for layer in manifest.layers)
        self.index.upsert(info, layers)

    def _status_image(self, names: tuple[str, ...]) -> ImageLayers | None:
        for text in sorted(names, key=lambda n: "@" not in n):  # digests identify content
            image = self.registry.lookup(text)
            if image is not None:
                return image
        return None
