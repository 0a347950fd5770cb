"""The simulated cluster: nodes, their image stores, pulls, node status and pods.

Model (each approximation is named):
- A node has allocatable cpu/memory/pods, a platform, a bandwidth to the registry and an image
  filesystem (`disk`). Sizes are the compressed layer sizes of the manifests (what a pull
  downloads); unpacked images take more disk, so `disk` is in compressed bytes.
- Binding a pod starts the pulls of its images the node lacks. The kubelet pulls images one at
  a time (`serializeImagePulls: true`, the default), so a node has one pull queue: an image pull
  starts when the previous one ends and takes `missing bytes / bandwidth + per-layer overhead`.
  Layers already on the node or queued by an earlier pull are not downloaded again. A pod
  starts once all its images are there; its *pull time* is bind -> images ready.
- Once pulled, an image appears in the node status when the kubelet's image list next
  refreshes from the runtime (every `image_list_period`, 30 s, on a phase of each node's
  own) and then at the node's next status update (every `status_period`, 10 s, on another
  phase of its own): 0-40 s later, as measured on real nodes (docs/evaluation.md; the kubelet
  stand-in runs the same model, evaluation/pulls.py). The status is capped to the largest 50
  images (`nodeStatusMaxImages`), each with at most 5 names (containerd reports
  `repo@sha256:<what the tag resolved to>` and `repo:tag`). ImageLocality sees only this
  status.
- The webhook does not read this state: it learns of it through delayed watch events
  (node status changes, binds, pod ends; webhook/sim/watch.py and view.py).
- Pods run `duration` seconds after they start, then free their resources; their images stay.
- Optional image GC (kubelet `imageGCHighThresholdPercent` 85 / `Low` 80): when a pull pushes
  disk usage above the high mark, unused images are removed least recently used first until
  usage is below the low mark; a layer goes when no remaining image holds it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from webhook.core.images import ImageRefError, parse_image
from webhook.core.layers import ImageLayers, Platform
from webhook.core.nodes import Taint
from webhook.core.objects import HOSTNAME_LABEL
from webhook.registry.catalog import StaticCatalog
from webhook.sim.workload import NodeSpec, PodSpec

MAX_STATUS_IMAGES = 50  # kubelet --node-status-max-images default
MAX_NAMES_PER_IMAGE = 5  # kubelet maxNamesPerImageInNodeStatus
ZONE_LABEL = "topology.kubernetes.io/zone"


@dataclass(frozen=True, slots=True)
class WorldConfig:
    layer_overhead: float = 0.3  # seconds per downloaded layer (round trips, unpack setup)
    image_list_period: float | None = 30.0  # imageCacheRefreshPeriod; None: listed at once
    status_period: float = 10.0  # nodeStatusUpdateFrequency; 0: reported at the refresh
    gc: bool = True
    gc_high: float = 0.85
    gc_low: float = 0.80


def node_phase(name: str, period: float, salt: str = "") -> float:
    """Where in each `period` a node's periodic loop ticks, from its name (and `salt`, to give
    one node's loops different phases): fixed per node, spread over the nodes, as the
    kubelets' loops are by their start times."""
    digest = hashlib.sha256(f"{salt}{name}".encode()).digest()
    return int.from_bytes(digest[:4], "big") / 2**32 * period


def next_tick(at: float, phase: float, period: float) -> float:
    """The first tick at or after `at` of a loop ticking every `period` from `phase`."""
    return at + (phase - at) % period


def last_tick(at: float, phase: float, period: float) -> float:
    """The last tick at or before `at` of a loop ticking every `period` from `phase`."""
    return at - (at - phase) % period


@dataclass(frozen=True, slots=True)
class SimImage:
    """One image for one platform: what a pod or node refers to."""

    ref: str  # as written by the pod / node (the tag name containerd reports)
    names: tuple[str, ...]  # node status names: repo@sha256:<resolved digest>, ref
    layers: tuple[tuple[str, int], ...]
    size: int


class ImageBook:
    """Resolves image strings through a StaticCatalog (the webhook's own lookup)."""

    def __init__(self, catalog: StaticCatalog) -> None:
        self.catalog = catalog
        self._cache: dict[tuple[str, Platform], SimImage | None] = {}

    def get(self, ref: str, platform: Platform) -> SimImage | None:
        key = (ref, platform)
        if key not in self._cache:
            self._cache[key] = self._resolve(ref, platform)
        return self._cache[key]

    def _resolve(self, ref: str, platform: Platform) -> SimImage | None:
        try:
            parsed = parse_image(ref)
        except ImageRefError:
            return None
        found: ImageLayers | None = self.catalog.cached(parsed)
        manifest = found.for_platform(platform) if found is not None else None
        if found is None or manifest is None:
            return None
        layers = tuple((x.digest, x.size) for x in manifest.layers)
        names = (f"{parsed.name}@{found.digest}", ref)
        return SimImage(ref, names, layers, sum(size for _, size in layers))


@dataclass(slots=True)
class StoredImage:
    image: SimImage
    ready_at: float
    last_used: float
    in_use: int = 0


class ImageDisk(Protocol):
    """A node's image store: what `store_image` and `drop_image` keep consistent (the
    simulator's nodes and the evaluation's kubelet stand-in share them)."""

    layers: dict[str, int]  # on disk or queued
    layer_refs: dict[str, int]  # images holding each layer
    images: dict[str, StoredImage]
    disk_used: int


def store_image(node: ImageDisk, image: SimImage, ready_at: float, now: float) -> StoredImage:
    """The image joins the node: its layers are shared with the images already there."""
    for digest, size in image.layers:
        if digest not in node.layers:
            node.layers[digest] = size
            node.disk_used += size
        node.layer_refs[digest] = node.layer_refs.get(digest, 0) + 1
    stored = node.images[image.ref] = StoredImage(image=image, ready_at=ready_at, last_used=now)
    return stored


def drop_image(node: ImageDisk, stored: StoredImage) -> None:
    """Image garbage collection removes the image; a layer goes with its last image."""
    del node.images[stored.image.ref]
    for digest, _ in stored.image.layers:
        left = node.layer_refs[digest] - 1
        if left:
            node.layer_refs[digest] = left
        else:
            del node.layer_refs[digest]
            node.disk_used -= node.layers.pop(digest)


@dataclass(slots=True)
class PodRun:
    spec: PodSpec
    node: str
    bound_at: float
    ready_at: float
    bytes_pulled: int
    bytes_needed: int
    images: tuple[SimImage, ...]


@dataclass(slots=True)
class NodeState:
    spec: NodeSpec
    platform: Platform
    labels: dict[str, str]
    taints: tuple[Taint, ...]  # every effect, PreferNoSchedule included
    req_cpu: int = 0
    req_mem: int = 0
    nz_cpu: int = 0  # non-zero requests (schedutil.GetNonzeroRequests defaults)
    nz_mem: int = 0
    pods: dict[str, PodRun] = field(default_factory=dict)
    owner_counts: dict[str, int] = field(default_factory=dict)
    layers: dict[str, int] = field(default_factory=dict)  # on disk or queued
    layer_refs: dict[str, int] = field(default_factory=dict)  # images holding each layer
    images: dict[str, StoredImage] = field(default_factory=dict)
    reported: dict[str, SimImage] = field(default_factory=dict)  # status, before the cap
    status: tuple[SimImage, ...] = ()  # capped, largest first
    status_names: dict[str, int] = field(default_factory=dict)  # name -> size
    status_layers: frozenset[str] = frozenset()
    pull_free_at: float = 0.0
    disk_used: int = 0
    status_version: int = 0  # bumps when the node status (its images) changes

    @property
    def name(self) -> str:
        return self.spec.name

    def bytes_present(self, layers: Mapping[str, int]) -> int:
        return sum(size for digest, size in layers.items() if digest in self.layers)


DEFAULT_MILLI_CPU = 100  # pkg/scheduler/util/pod_resources.go DefaultMilliCPURequest
DEFAULT_MEMORY = 200 * 1024 * 1024  # DefaultMemoryRequest


class World:
    def __init__(self, specs: Iterable[NodeSpec], book: ImageBook,
                 config: WorldConfig = WorldConfig()) -> None:
        self.book = book
        self.config = config
        self._phases: dict[str, tuple[float, float]] = {}  # node -> image list, status phase
        self.nodes: dict[str, NodeState] = {}
        self.image_nodes: dict[str, int] = {}  # status name -> nodes reporting it
        for spec in specs:
            platform = Platform.parse(spec.platform)
            labels = {HOSTNAME_LABEL: spec.name, ZONE_LABEL: spec.zone,
                      "kubernetes.io/os": platform.os,
                      "kubernetes.io/arch": platform.architecture, **spec.labels}
            taints = tuple(Taint(t.key, t.value, t.effect) for t in spec.taints)
            node = NodeState(spec=spec, platform=platform, labels=labels, taints=taints)
            self.nodes[spec.name] = node
            for ref in spec.images:
                image = book.get(ref, platform)
                if image is not None and ref not in node.images:
                    store_image(node, image, ready_at=0.0, now=0.0)
                    node.reported[ref] = image
            self._refresh_status(node)
        self.bytes_pulled = 0

    # -- pods ------------------------------------------------------------------------------

    def bind(self, spec: PodSpec, owner: str | None, node_name: str, now: float
             ) -> tuple[PodRun, list[tuple[float, str, str]]]:
        """Place `spec` on the node: reserve resources, queue pulls. Returns the run and the
        pulls as (end time, node, image ref) for the caller's event queue."""
        node = self.nodes[node_name]
        cpu, mem = spec.cpu_milli, spec.memory
        node.req_cpu += cpu
        node.req_mem += mem
        node.nz_cpu += cpu or DEFAULT_MILLI_CPU
        node.nz_mem += mem or DEFAULT_MEMORY
        if owner is not None:
            node.owner_counts[owner] = node.owner_counts.get(owner, 0) + 1
        images: list[SimImage] = []
        for ref in dict.fromkeys(spec.init_images + spec.images):
            image = self.book.get(ref, node.platform)
            if image is not None:
                images.append(image)
        pulls: list[tuple[float, str, str]] = []
        ready = now
        pulled = 0
        needed = 0
        start = max(now, node.pull_free_at)
        for image in images:
            needed += image.size
            stored = node.images.get(image.ref)
            if stored is None:
                missing = [(d, s) for d, s in image.layers if d not in node.layers]
                size = sum(s for _, s in missing)
                end = start + size / node.spec.bandwidth + self.config.layer_overhead * len(
                    missing)
                pulled += size
                stored = store_image(node, image, ready_at=end, now=now)
                pulls.append((end, node.name, image.ref))
                start = end
                node.pull_free_at = end
            stored.in_use += 1
            stored.last_used = now
            ready = max(ready, stored.ready_at)
        self.bytes_pulled += pulled
        run = PodRun(spec=spec, node=node.name, bound_at=now, ready_at=ready,
                     bytes_pulled=pulled, bytes_needed=needed, images=tuple(images))
        node.pods[spec.name] = run
        return run, pulls

    def finish(self, run: PodRun, owner: str | None, now: float) -> None:
        node = self.nodes[run.node]
        del node.pods[run.spec.name]
        node.req_cpu -= run.spec.cpu_milli
        node.req_mem -= run.spec.memory
        node.nz_cpu -= run.spec.cpu_milli or DEFAULT_MILLI_CPU
        node.nz_mem -= run.spec.memory or DEFAULT_MEMORY
        if owner is not None:
            left = node.owner_counts[owner] - 1
            if left:
                node.owner_counts[owner] = left
            else:
                del node.owner_counts[owner]
        for image in run.images:
            stored = node.images.get(image.ref)
            if stored is not None:
                stored.in_use -= 1
                stored.last_used = now

    def pulled(self, node_name: str, ref: str, now: float) -> None:
        """A pull ended: garbage-collect if over the high mark."""
        node = self.nodes[node_name]
        if self.config.gc and node.disk_used > self.config.gc_high * node.spec.disk:
            self._gc(node, now)

    def status_time(self, node_name: str, ready_at: float) -> float:
        """When an image pulled at `ready_at` shows in the node's status: the image list's
        next refresh, then the next status update."""
        phases = self._phases.get(node_name)
        if phases is None:  # a node's loops keep their phases: hashed once per node
            period, status = self.config.image_list_period, self.config.status_period
            phases = self._phases[node_name] = (
                node_phase(node_name, period) if period else 0.0,
                node_phase(node_name, status, "status/") if status else 0.0)
        listed = ready_at
        if self.config.image_list_period:
            listed = next_tick(ready_at, phases[0], self.config.image_list_period)
        if self.config.status_period:
            listed = next_tick(listed, phases[1], self.config.status_period)
        return listed

    def report(self, node_name: str, ref: str) -> None:
        """The kubelet's status update after a pull: the image joins the node status."""
        node = self.nodes[node_name]
        stored = node.images.get(ref)
        if stored is not None and ref not in node.reported:
            node.reported[ref] = stored.image
            self._refresh_status(node)

    # -- internals -------------------------------------------------------------------------

    def _gc(self, node: NodeState, now: float) -> None:
        """kubelet image_gc_manager.freeSpace: unused images, least recently used first."""
        target = self.config.gc_low * node.spec.disk
        unused = sorted((s for s in node.images.values() if s.in_use == 0 and s.ready_at <= now),
                        key=lambda s: s.last_used)
        changed = False
        for stored in unused:
            if node.disk_used <= target:
                break
            drop_image(node, stored)
            if node.reported.pop(stored.image.ref, None) is not None:
                changed = True
        if changed:
            self._refresh_status(node)

    def _refresh_status(self, node: NodeState) -> None:
        """Node status images: largest first, at most 50 (kubelet setters.go Images)."""
        for name in node.status_names:
            left = self.image_nodes[name] - 1
            if left:
                self.image_nodes[name] = left
            else:
                del self.image_nodes[name]
        ranked = sorted(node.reported.values(), key=lambda i: (-i.size, i.ref))
        before = node.status
        node.status = tuple(ranked[:MAX_STATUS_IMAGES])
        node.status_names = {n: i.size for i in node.status for n in i.names[:MAX_NAMES_PER_IMAGE]}
        for name in node.status_names:
            self.image_nodes[name] = self.image_nodes.get(name, 0) + 1
        node.status_layers = frozenset(d for i in node.status for d, _ in i.layers)
        if node.status != before:
            node.status_version += 1

    def node_object(self, node: NodeState) -> dict[str, Any]:
        """The Node as `kubectl get node -o json` would show it now (what the webhook's
        inventory reads)."""
        spec: dict[str, Any] = {}
        if node.spec.unschedulable:
            spec["unschedulable"] = True
        if node.taints:
            spec["taints"] = [{"key": t.key, "value": t.value, "effect": t.effect}
                              for t in node.taints]
        return {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node.name, "labels": dict(node.labels)},
            "spec": spec,
            "status": {
                "nodeInfo": {"operatingSystem": node.platform.os,
                             "architecture": node.platform.architecture},
                "images": [{"names": list(i.names[:MAX_NAMES_PER_IMAGE]), "sizeBytes": i.size}
                           for i in node.status],
            },
        }
