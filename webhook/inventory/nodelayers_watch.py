"""The live inventory's view of NodeLayers objects: which nodes have a fresh one, and their
layers. The reflector (list/watch through the `kubernetes` client's CustomObjectsApi) reports
each object here; the CRD is optional: while it is absent (404 on list) one line is logged,
a gauge says so, and the list is retried every `absent_retry_seconds`. Runs on the event loop.
"""

from __future__ import annotations

import logging
import time
from array import array
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol, cast, runtime_checkable

from webhook.core.nodes import NodeInfo
from webhook.inventory import lean, reflector_terms
from webhook.inventory.nodeimages import NodeImagesSource
from webhook.inventory.nodelayers import (
    GROUP,
    PLURAL,
    VERSION,
    NodeLayersError,
    NodeLayersInfo,
    parse_node_layers,
)
from webhook.inventory.podstate import node_key
from webhook.inventory.reflector import DELETED, Reflector

log = logging.getLogger(__name__)
NODELAYERS_PAGE = 50


@runtime_checkable
class NodeLayersMetrics(Protocol):
    """What webhook.serving.metrics.InventoryMetrics reports about NodeLayers."""

    def nodelayers_crd(self, present: bool) -> None: ...
    def nodelayers_objects(self, fresh: int, stale: int) -> None: ...
    def nodelayers_rejected(self, reason: str) -> None: ...


class Liveness(Protocol):
    """Whose agent is alive by its Lease (leases_watch.AgentLeases)."""

    @property
    def readable(self) -> bool | None: ...  # None: not listed yet; False: cannot be listed

    def alive(self, name: str) -> bool | None: ...  # None: the node has no Lease


class _NoLeases:
    readable: bool | None = False

    def alive(self, name: str) -> bool | None:
        return None


class _NoMetrics:
    def nodelayers_crd(self, present: bool) -> None:
        pass

    def nodelayers_objects(self, fresh: int, stale: int) -> None:
        pass

    def nodelayers_rejected(self, reason: str) -> None:
        pass


def custom_objects_api(core: Any) -> Any:
    """A CustomObjectsApi sharing `core`'s ApiClient (its configuration and connections);
    None for stand-ins without one (bench/served/inventory.py drives the inventory directly)."""
    api_client = getattr(core, "api_client", None)
    if api_client is None:
        return None
    from kubernetes import client  # only where a real client exists

    return client.CustomObjectsApi(api_client)


class NodeLayersTracker:
    def __init__(
        self,
        api: Any,  # kubernetes.client.CustomObjectsApi, or None: no watch
        source: NodeImagesSource,
        reindex: Callable[[str], None],
        nodes: Mapping[str, NodeInfo],
        metrics: object = None,
        wall_clock: Callable[[], float] = time.time,
        absent_retry_seconds: float = 300.0,
        leases: Liveness | None = None,
    ) -> None:
        self._api = api
        # An object is trusted while its agent's Lease is current; a node without a Lease
        # (an agent from before Leases) while its heartbeat is recent.
        self._leases: Liveness = leases if leases is not None else _NoLeases()
        self.source = source
        self._reindex = reindex
        self._nodes = nodes  # the inventory's nodes, for the platform check
        self._metrics: NodeLayersMetrics = (
            metrics if isinstance(metrics, NodeLayersMetrics) else _NoMetrics())
        self._clock = wall_clock
        self._absent_retry = absent_retry_seconds
        # node -> object, its images and layers dropped: the source keeps what reviews need,
        # and the layers are kept as 4-byte ids (1.2 KB a node where a tuple of 300 digests
        # takes 2.4 KB), read back only when the node is re-indexed.
        self._objects: dict[str, NodeLayersInfo] = {}
        self._layers: dict[str, array[int]] = {}
        self._layer_id: dict[str, int] = {}
        self._digests: list[str] = []
        self._in_use: set[str] = set()  # nodes indexed with their object's layers
        self._fresh: set[str] = set()  # objects fresh when last looked at (the gauge)
        # Objects judged by their heartbeat (their node has no agent Lease) when last looked
        # at: the only ones that go stale with no event saying so (a Lease that runs out is
        # leases_watch's to notice), so expire() looks at these alone.
        self._by_heartbeat: set[str] = set()
        self._mismatch_logged: set[str] = set()
        self.crd_present: bool | None = None  # None: not listed yet

    def reflectors(self, settings: reflector_terms.ReflectorSettings,
                   metrics: reflector_terms.ReflectorMetrics) -> list[Reflector]:
        """The nodelayers watch (none without an API client)."""
        if self._api is None:
            return []
        # A NodeLayers object is ~35 KB of JSON (300 layers packed, 40 images): a first page
        # of 50 keeps a list's transient objects to a few MB (decoded to the fields read);
        # the pages after it grow to streams.MAX_PAGE_BYTES (the API server's watch cache
        # collects every object from a page's continue key to the end before it applies the
        # limit: n objects in pages of p cost it n^2/2p collected).
        small = replace(settings, page_size=min(settings.page_size, NODELAYERS_PAGE))
        # Pages and events decoded to the fields read (lean.py: no dict per layer or image).
        return [Reflector(PLURAL, self._list, node_key, self.event, self._listed, small,
                          metrics, on_unavailable=self.absent, decode_page=lean.nodelayers_list,
                          decode_event=lean.nodelayers_event)]

    def _list(self, **kwargs: Any) -> Any:
        """The list/watch call; a 404 on list means the CRD is not installed (yet)."""
        try:
            return self._api.list_cluster_custom_object(GROUP, VERSION, PLURAL, **kwargs)
        except Exception as exc:
            if getattr(exc, "status", None) != 404 or kwargs.get("watch"):
                raise
            raise reflector_terms.Unavailable("NodeLayers CRD absent", self._absent_retry) from exc

    def _listed(self, names: object) -> None:
        if self.crd_present is not True:
            log.info("NodeLayers: watching %s.%s (%d objects)", PLURAL, GROUP, len(self._objects))
        self._set_present(True)

    def absent(self, exc: object = None) -> None:
        """The list answered 404: forget every object (the CRD and its objects are gone)."""
        if self.crd_present is not False:
            log.warning("NodeLayers CRD (%s.%s) not installed: scoring from node status only; "
                        "checking again every %.0fs", PLURAL, GROUP, self._absent_retry)
        self._set_present(False)
        for name in list(self._objects):
            self.event(DELETED, name, None)

    def _set_present(self, present: bool) -> None:
        self.crd_present = present
        self._metrics.nodelayers_crd(present)

    # -- events --------------------------------------------------------------------------

    def event(self, kind: str, name: str, obj: Mapping[str, Any] | None) -> None:
        if kind == DELETED or obj is None:
            if self._forget(name):
                self._changed(name)
            return
        try:
            info = parse_node_layers(obj)
        except NodeLayersError as exc:
            log.warning("ignoring NodeLayers %s: %s", name, exc)
            self._metrics.nodelayers_rejected(exc.reason)
            if self._forget(name):
                self._changed(name)
            return
        now = self._clock()
        # A heartbeat ahead of our clock counts from when it arrived, so an agent whose clock
        # runs fast cannot keep a dead node fresh.
        info = replace(info, heartbeat=min(info.heartbeat, now))
        node = self._nodes.get(name)
        alive = self._leases.alive(name)
        # Before the Leases are listed an object is given the benefit of the doubt (its
        # images are content-addressed facts); expire() re-judges once they are.
        teach = alive is True or (alive is None and (
            info.fresh(now) or self._leases.readable is None))
        if teach and (node is None or node.platform == info.platform):
            # Only a fresh object of the node's own platform may teach the shared source what
            # an image holds: every review reads it, for every node.
            self.source.add(info.platform, info.images)
        # One exact allocation; digests seen before (nearly all) found at C speed.
        found: list[int | None] = list(map(self._layer_id.get, info.layers))
        if None in found:
            found = list(map(self._id, info.layers))
        ids = array("I", cast(list[int], found))
        previous = self._layers.get(name)
        self._objects[name] = replace(info, images=(), layers=())
        self._layers[name] = ids
        if previous is None or previous != ids or name not in self._in_use:
            self._changed(name)  # a heartbeat alone changes nothing the index holds

    def _changed(self, name: str) -> None:
        self._reindex(name)
        # This object's freshness only: counting all of them per event made a list of n
        # objects cost n^2 (5,000 objects: 12.5 million checks). expire() recounts them all.
        info = self._objects.get(name)
        if info is not None and self._trusted(name, info, self._clock()):
            self._fresh.add(name)
        else:
            self._fresh.discard(name)
        self._report()

    # -- what the index reads --------------------------------------------------------------

    def layers_for(self, node: NodeInfo) -> tuple[str, ...]:
        """The node's layers from a fresh object of its platform; empty otherwise."""
        info = self._objects.get(node.name)
        usable = info is not None and self._trusted(node.name, info, self._clock())
        if info is not None and usable and info.platform != node.platform:
            if node.name not in self._mismatch_logged:
                self._mismatch_logged.add(node.name)
                log.warning("ignoring NodeLayers %s: platform %s, the node says %s",
                            node.name, info.platform, node.platform)
            usable = False
        if usable and info is not None:
            self._in_use.add(node.name)
            digests = self._digests
            return tuple(map(digests.__getitem__, self._layers[node.name]))
        self._in_use.discard(node.name)
        return ()

    def expire(self) -> int:
        """Re-index the nodes whose object went stale since they were indexed (no event
        says so: the agent just stopped); returns how many. Only objects judged by their
        heartbeat are looked at: a few, or none, where agents keep Leases."""
        now = self._clock()
        stale = [n for n in self._by_heartbeat & self._in_use
                 if (info := self._objects.get(n)) is None or not self._trusted(n, info, now)]
        for name in stale:
            self._reindex(name)
            self._in_use.discard(name)  # also when the node itself is gone
        self._count()
        return len(stale)

    def _trusted(self, name: str, info: NodeLayersInfo, now: float) -> bool:
        """The node's agent is alive by its Lease, or, without a Lease, the object is
        fresh by its heartbeat."""
        alive = self._leases.alive(name)
        if alive is None:
            self._by_heartbeat.add(name)
            return info.fresh(now)
        self._by_heartbeat.discard(name)
        return alive

    def lease_changed(self, name: str) -> bool:
        """The node's agent came alive or ran out: its object counts or stops counting
        (re-indexed); False when the node has no object."""
        if name not in self._objects:
            return False
        self._changed(name)
        return True

    def _forget(self, name: str) -> bool:
        """Drop the node's object; whether there was one."""
        self._layers.pop(name, None)
        self._by_heartbeat.discard(name)
        self._fresh.discard(name)
        found = self._objects.pop(name, None) is not None
        if not self._layers:  # nothing refers to an id any more
            self._layer_id.clear()
            self._digests.clear()
        return found

    def _id(self, digest: str) -> int:
        """The digest's id (ids are never reused: the table grows with the distinct layers
        ever seen, a few thousand in a cluster; cleared when every object is gone)."""
        found = self._layer_id.get(digest)
        if found is None:
            found = self._layer_id[digest] = len(self._digests)
            self._digests.append(digest)
        return found

    def _count(self) -> None:
        """The gauge's count again, for the objects whose freshness can change silently."""
        now = self._clock()
        for name in list(self._by_heartbeat):
            info = self._objects.get(name)
            if info is None:
                self._by_heartbeat.discard(name)
                self._fresh.discard(name)
            elif self._trusted(name, info, now):
                self._fresh.add(name)
            else:
                self._fresh.discard(name)
        self._report()

    def _report(self) -> None:
        fresh = len(self._fresh)
        self._metrics.nodelayers_objects(fresh, len(self._objects) - fresh)

    @property
    def objects(self) -> int:
        return len(self._objects)
