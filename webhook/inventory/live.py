"""The live inventory: Nodes and bound Pods from the API server, kept in the layer index.

Two reflectors (webhook.inventory.reflector: list, watch, relist, backoff) report node and
pod events here; this module decides what they mean. With outcome telemetry on (PodOutcomes,
webhook.telemetry's recorder, handed in by wiring), pod binds also go to it, and a third
reflector feeds it kubelet `Pulled` Events.
Everything below runs on the event loop, which alone touches the index.

Node images become layers through the layer sources (`cached` first; unknown images are
resolved in the background and the nodes that reported them re-indexed when they arrive:
resolving.py). A replica's first lists build the index once (firstindex.py).
Pods just bound to a node count their layers as present there ("in flight") until the node
status reports the image or `inflight_seconds` pass (inflight.py, mixed in here).
A node's fresh NodeLayers object (node agent; nodelayers_watch.py) adds all its layers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from typing import Any, Protocol

from webhook import memtrim
from webhook.config import AGENT_NAMESPACE
from webhook.core.images import try_parse
from webhook.core.index import LayerIndex
from webhook.core.layers import ImageLayers, LayerSource, SourceChain
from webhook.core.nodes import NodeError, NodeInfo, node_from_object
from webhook.core.pods import decision_id, pending_placement, pod_owner
from webhook.inventory import lean, reflector_terms
from webhook.inventory.firstindex import INDEX, FirstIndex
from webhook.inventory.inflight import InFlight, InFlightLayers
from webhook.inventory.leases_watch import AgentLeases, coordination_api
from webhook.inventory.nodeimages import NodeImagesSource
from webhook.inventory.nodelayers_watch import NodeLayersTracker, custom_objects_api
from webhook.inventory.podstate import BoundPod, BoundPods, node_key, uid_key
from webhook.inventory.reflector import DELETED, Reflector, supervise
from webhook.inventory.resolving import ImageResolutions
from webhook.inventory.siblings import SiblingTracker, new_replica_id
from webhook.inventory.static import layer_digests, node_layers
from webhook.inventory.syncgate import SyncGate

log = logging.getLogger(__name__)

# What webhook.serving.metrics.InventoryMetrics implements.
LiveMetrics = reflector_terms.ReflectorMetrics


@dataclass(frozen=True, slots=True)
class WatchSettings(reflector_terms.ReflectorSettings):
    inflight_seconds: float = 600.0
    pending_seconds: float = 60.0  # a reviewed pod counts for spreading until seen bound
    resolve_concurrency: int = 4
    max_pending_resolutions: int = 10_000
    max_known_images: int = 50_000  # last answer per node image name (LRU)
    max_node_images: int = 50_000  # images known from NodeLayers objects (LRU)
    nodelayers_absent_retry_seconds: float = 300.0  # CRD not installed: list again after
    # A Node with 50 images is ~15 KB of JSON: 500 a page decode to ~60,000 short-lived
    # objects among which the long-lived ones land, and the heap keeps that high-water mark
    # (5,000 nodes: +52 MB of RSS at 500 a page, +27 MB at 100). The first page's size; the
    # rest grow to streams.MAX_PAGE_BYTES (about 250 such Nodes).
    node_page_size: int = 100
    # A watch failing this long leaves the picture stale: not ready, decisions fail open.
    stale_seconds: float = 60.0


Lookup = Callable[[str], "ImageLayers | None"]  # an image as a pod writes it -> its layers


class PodOutcomes(Protocol):
    """What the pod and event watches feed besides the inventory: the outcome telemetry
    (webhook.telemetry.recorder.Telemetry), built by wiring; the inventory needs no more."""

    def pod(self, uid: str, pod: Mapping[str, Any] | None, node_name: str | None) -> None: ...
    def pods_listed(self, keys: Set[str] = ...) -> None: ...
    def event(self, kind: str, key: str, obj: Mapping[str, Any] | None) -> None: ...
    def events_listed(self, keys: Set[str] = ...) -> None: ...
    def event_keys(self) -> Set[str]: ...
    def expire(self) -> int: ...


# The telemetry, made from the inventory's index, its image lookup and its clock.
OutcomesFactory = Callable[[LayerIndex, Lookup, Callable[[], float]], PodOutcomes]


class LiveInventory(InFlightLayers):
    """`index` and `ready` for the Mutator; `run()` keeps them current until cancelled."""

    def __init__(
        self,
        api: Any,  # corelists.CoreLists or a CoreV1Api: the three core lists, .api_client
        sources: Sequence[LayerSource],
        settings: WatchSettings = WatchSettings(),
        metrics: LiveMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        telemetry: OutcomesFactory | None = None,
        *,
        node_images: NodeImagesSource | None = None,  # give it to the Mutator's sources too
        wall_clock: Callable[[], float] = time.time,  # NodeLayers heartbeats are wall time
        agent_namespace: str = AGENT_NAMESPACE,  # where the node agents' Leases are
    ) -> None:
        self._api = api
        self.node_images = (node_images if node_images is not None  # empty is falsy
                            else NodeImagesSource(settings.max_node_images))
        if not any(source is self.node_images for source in sources):
            sources = (*sources, self.node_images)
        self._sources = SourceChain(sources)
        self._settings = settings
        self._metrics: LiveMetrics = metrics or reflector_terms.NoMetrics()
        self._clock = clock
        self._index = LayerIndex()
        # Ready while every resource below is listed in full and watched (syncgate.py).
        self._gate = SyncGate((), clock, settings.stale_seconds)
        # While run() makes its first lists, nodes are indexed once at their end.
        self._first = FirstIndex(self._gate, self._index_node, settings.slice_seconds,
                                 complete=self._index.flush)
        self._nodes: dict[str, NodeInfo] = {}
        # node -> digests of its reported images: a tuple (50 entries, a quarter of a
        # frozenset's memory; looked up once per image of a pod bind)
        self._reported: dict[str, tuple[str, ...]] = {}
        self._inflight: dict[str, dict[str, InFlight]] = {}  # node -> image digest -> entry
        self._resolutions = ImageResolutions(self._sources, self._reindex,
                                             settings.max_pending_resolutions,
                                             settings.max_known_images)
        self._pods: dict[str, BoundPod] = {}  # pod uid -> what its last event said
        self._bound = BoundPods()  # the states pods share
        # Where each workload's pods are (bound + reviewed here): the Mutator's spread guard.
        self.siblings = SiblingTracker(settings.pending_seconds, clock=clock,
                                       replica=new_replica_id())
        self._reflectors = [
            Reflector("nodes", self._list_nodes, node_key, self._node_event,
                      self._nodes_synced,
                      replace(settings, page_size=min(settings.page_size,
                                                      settings.node_page_size)),
                      self._metrics, decode_page=lean.node_list),
            # The pods it holds are `_pods`' keys: a pod it dropped (unbound, or never bound)
            # needs no deletion report, which would change nothing anyway.
            Reflector("pods", self._list_pods, uid_key, self._pod_event,
                      self._pods_relisted, settings, self._metrics, held=self._pods.keys,
                      decode_page=lean.pod_list),
        ]
        # The agents' Leases: whose NodeLayers object and layer labels count.
        self.leases = AgentLeases(coordination_api(api), agent_namespace, self._lease_changed,
                                  self._leases_listed, metrics, wall_clock,
                                  settings.nodelayers_absent_retry_seconds)
        self.nodelayers = NodeLayersTracker(
            custom_objects_api(api), self.node_images, self._reindex, self._nodes, metrics,
            wall_clock, settings.nodelayers_absent_retry_seconds, self.leases)
        self._reflectors += self.nodelayers.reflectors(settings, self._metrics)
        self._reflectors += self.leases.reflectors(settings, self._metrics)
        # Readiness, and every decision, wait for all of them: Nodes, pods (the spread
        # guard's counts), NodeLayers (layers the node status does not show) and the agents'
        # Leases (whose labels count). Not for the outcome telemetry's Events (below).
        for watched in self._reflectors:
            watched.report_sync_to(self._gate)
        # Outcome telemetry (binds, kubelet pull events); None: off, and no events watch.
        self.telemetry = None if telemetry is None else telemetry(self._index, self._cached,
                                                                  clock)
        if self.telemetry is not None:
            self._reflectors.append(Reflector(
                "events", self._list_pulled_events, uid_key, self.telemetry.event,
                self.telemetry.events_listed, settings, self._metrics,
                held=self.telemetry.event_keys))

    # -- what reviews read ---------------------------------------------------------------

    @property
    def index(self) -> LayerIndex:
        return self._index

    @property
    def ready(self) -> bool:
        return self._gate.ready

    def not_ready(self) -> list[str]:
        """Why it is not ready, one phrase per resource ([] when it is)."""
        missing = self._gate.missing()
        others = [m for m in missing if not m.startswith(f"{INDEX}:")]
        if others or not missing:
            return others  # the index is built once the lists are in: say what it waits for
        return [f"{INDEX}: indexing {self._first.held()} nodes from the first lists"]

    def listed_by_hand(self) -> None:
        """For a driver that applies the objects itself (`_apply_nodes`, the callbacks; no
        API server: tests, bench/served/inventory.py): its picture is complete as it stands."""
        for watched in self._reflectors:
            self._gate.synced(watched.resource)

    async def wait_ready(self) -> None:
        await self._gate.wait()

    async def settled(self) -> None:
        """Ready, and every node image queued for resolution so far has been tried."""
        await self._gate.wait()
        await self._resolutions.join()

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Watch nodes and pods, resolve images, expire in-flight entries; until cancelled."""
        loops = {"in-flight expiry": self._expire_loop,
                 "agent lease expiry": self.leases.expiry_loop,
                 **{f"resolver {i}": self._resolutions.loop
                    for i in range(self._settings.resolve_concurrency)}}
        pause = self._settings.backoff_max
        self._first.hold()
        tasks = [asyncio.create_task(self._first.build())]
        tasks += [asyncio.create_task(r.run()) for r in self._reflectors]
        tasks += [asyncio.create_task(supervise(name, loop, self._metrics, pause))
                  for name, loop in loops.items()]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    def _list_nodes(self, **kwargs: Any) -> Any:
        return self._api.list_node(**kwargs)

    def _list_pods(self, **kwargs: Any) -> Any:
        # Every pod, bound or not: a pod stored but not bound yet carries the decision of the
        # replica that reviewed it, which the spread guard of every replica counts (pending).
        return self._api.list_pod_for_all_namespaces(**kwargs)

    def _list_pulled_events(self, **kwargs: Any) -> Any:
        return self._api.list_event_for_all_namespaces(field_selector="reason=Pulled", **kwargs)

    def _cached(self, text: str) -> ImageLayers | None:
        ref = try_parse(text)
        return self._sources.cached(ref) if ref is not None else None

    # -- nodes ---------------------------------------------------------------------------

    def _node_event(self, kind: str, name: str, obj: Mapping[str, Any] | None) -> None:
        if kind == DELETED or obj is None:
            self._nodes.pop(name, None)
            self._reported.pop(name, None)
            self._inflight.pop(name, None)
            self._index.remove(name)
            return
        try:
            node = node_from_object(obj)
        except NodeError as exc:
            log.warning("ignoring node %s: %s", name, exc)
            return
        if self._nodes.get(name) == node:
            return  # a heartbeat-style update: nothing scoring uses changed
        self._nodes[name] = node
        self._reindex(name)

    def _apply_nodes(self, kind: str, obj: Mapping[str, Any]) -> None:
        """One Node event by object alone (what bench/served/inventory.py drives directly)."""
        name = node_key(obj)
        if name is not None:
            self._node_event(kind, name, obj)

    def _nodes_synced(self, names: Set[str]) -> None:
        """A complete node list is in the index (readiness: the gate, told by the
        reflector)."""

    def _lease_changed(self, name: str) -> None:
        if not self.nodelayers.lease_changed(name):
            self._reindex(name)  # no object: only its layer labels' trust changes

    def _leases_listed(self) -> None:
        self.nodelayers.expire()  # objects judged before the Leases were known

    def _reindex(self, name: str) -> None:
        self._first.reindex(name)  # now, or once the first lists are in

    def _index_node(self, name: str) -> None:
        node = self._nodes.get(name)
        if node is None:
            return
        if node.layer_labels:  # the scheduler matches them either way; we credit the vouched
            trusted = self.leases.alive(name) is True
            if node.labels_trusted != trusted:
                node = replace(node, labels_trusted=trusted)
        found = node_layers(node, self._sources, self._resolutions.recall)
        for image_name in found.unresolved:
            self._resolutions.queue(image_name, name)
        self._reported[name] = tuple(found.images)
        inflight = self._inflight.get(name, {})
        for digest in [d for d in inflight if d in found.images]:
            del inflight[digest]  # the kubelet reports it now: no longer in flight
        layers: frozenset[str] = found.layers
        if extra := self.nodelayers.layers_for(node):
            layers = layers.union(extra)  # the agent's view, exact and complete
        if inflight:
            layers = layers.union(*(layer_digests(e.image, node.platform)
                                    for e in inflight.values()))
        self._index.upsert(node, layers)

    # -- bound pods (their layers in flight: inflight.py) -----------------------------------

    def _pod_event(self, kind: str, uid: str, obj: Mapping[str, Any] | None) -> None:
        """The pod reflector's callback: keep each pod's compact state, hand on the change."""
        previous = self._pods.get(uid)
        current = self._bound.of(obj) if kind != DELETED and obj is not None else None
        if current is None:
            self._pods.pop(uid, None)
        else:
            self._pods[uid] = current
        self._count_sibling(uid, obj, kind == DELETED, previous, current)
        if self.telemetry is not None:  # before the pod's own images count as in flight
            self.telemetry.pod(uid, obj, current.node if current is not None else None)
        self._pod_changed(obj, previous, current)

    def _count_sibling(self, uid: str, obj: Mapping[str, Any] | None, deleted: bool,
                       previous: BoundPod | None, current: BoundPod | None) -> None:
        """Per-owner counts for the spread guard: a pod stored but not bound counts as
        pending where its decision preferred (whichever replica decided; this replica's own
        entry already counts); a pod seen on a node for the first time counts there and
        releases its pending entry (matched by the decision's id: it had no name when
        reviewed); a finished or deleted pod no longer counts."""
        if obj is None or deleted or (current is not None and current.finished):
            self.siblings.gone(uid)
            token = decision_id(obj) if obj is not None and previous is None else None
            if token:  # never seen bound: its pending entry would linger
                self.siblings.release(token)
        elif current is None:
            owner = pod_owner(obj)
            if owner is not None:
                placement = pending_placement(obj)
                self.siblings.seen_pending(uid, owner, placement.token, placement.node,
                                           placement.by, placement.also,
                                           placement.near)
        elif previous is None or previous.node != current.node or previous.finished:
            owner = pod_owner(obj)
            if owner is not None:
                self.siblings.bound(uid, owner, current.node, decision_id(obj))

    def _pod_changed(self, obj: Mapping[str, Any] | None, previous: BoundPod | None,
                     current: BoundPod | None) -> None:
        """Every pod event (watch, list, or a deletion a relist found: `obj` None), with the
        pod's state before it (None: first sight) and after it (None: gone)."""
        if obj is not None and current is not None and previous is None:
            self._pod_bound(obj, current)  # the layers stay after it goes: entries expire

    def _pods_relisted(self, uids: Set[str]) -> None:
        """A relist replaced the set of bound pods (those it lacked were reported deleted):
        where anything aggregated over all pods would be checked or rebuilt."""
        log.debug("pods relisted: %d bound", len(uids))
        memtrim.release()  # the pages of a 150,000-pod list: give back what they left free
        if self.telemetry is not None:
            self.telemetry.pods_listed()  # binds count from now on: the list was the past

    async def _expire_loop(self) -> None:
        period = min(30.0, self._settings.inflight_seconds / 4, self._settings.pending_seconds / 4)
        while True:
            await asyncio.sleep(max(0.1, period))
            self.expire_inflight()
            self.siblings.expire()
            self.nodelayers.expire()
            if self.telemetry is not None:
                self.telemetry.expire()
