"""What the webhook learns of the cluster, and when: watch events delivered after a delay.

In production the webhook never sees the scheduler's decisions directly: a bind reaches it
through its pod watch, a pulled image through its node watch (after the kubelet's status
update), each some time after the fact. `SimWatch` delivers those events to the listeners
`delay` seconds after they happened, in order, when the webhook next looks (`advance(now)`,
before a review). Listeners are the webhook's inventory (`webhook.sim.view.IndexListener`),
its outcome telemetry (`webhook.sim.outcomes`) and, through `TrackerListener`, a spread
tracker with the interface `bound(pod_uid, owner_uid, node, decision_annotation_or_None)` /
`gone(pod_uid)` / `stored(pod)`. A pod stored by the API server (admitted, not bound yet)
reaches the listeners that define `stored` (the webhook replicas' spread trackers read the
reviewing replica's decision from it). A bind also carries what the kubelet's `Pulled`
events will say about the pod's images (the webhook's event watch), and the simulator's own
accounting of the bind, which only the comparison with the telemetry reads.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from webhook.core.pods import DECISION_ANNOTATION


@dataclass(frozen=True, slots=True)
class ImagePull:
    """One image of a pod just bound, as the kubelet's `Pulled` event will report it."""

    image: str  # as the pod writes it
    seconds: float  # bind -> the image on the node, waits included; 0: already there
    size: int  # bytes (the image's compressed layers)


@dataclass(frozen=True, slots=True)
class BindAccount:
    """The world's own figures for a bind (the webhook never sees them)."""

    bytes_present: int  # of the pod's distinct layers, on the node just before the bind
    pod_bytes: int  # the pod's distinct layers for the node's platform


@dataclass(frozen=True, slots=True)
class BoundPod:
    """A pod the pod watch reports bound: named, with its uid (unlike at admission)."""

    uid: str
    name: str
    owner: str | None  # the controller ownerReference's uid
    node: str
    annotations: Mapping[str, str]
    images: tuple[str, ...]  # init and regular containers, as written
    pod: Mapping[str, Any] = field(default_factory=dict)  # the object (patched affinity)
    pulls: tuple[ImagePull, ...] = ()
    account: BindAccount | None = None


@dataclass(frozen=True, slots=True)
class StoredPod:
    """A pod the API server stored after admission, before any bind: what the pod watch shows."""

    uid: str
    owner: str | None  # the controller ownerReference's uid
    annotations: Mapping[str, str]


class WatchListener(Protocol):
    def node(self, obj: Mapping[str, Any]) -> None:
        """A Node object as the node watch reports it (ADDED / MODIFIED)."""

    def bound(self, pod: BoundPod) -> None: ...

    def gone(self, uid: str) -> None:
        """The pod ended (deleted, or Succeeded/Failed)."""


class SpreadTracker(Protocol):
    """The webhook's per-owner placement tracker (its bound half; reviews feed the rest)."""

    def bound(self, pod_uid: str, owner_uid: str | None, node: str,
              decision: str | None) -> None: ...

    def gone(self, pod_uid: str) -> None: ...


class TrackerListener:
    """Feeds a SpreadTracker from the pod watch (node events do not concern it)."""

    def __init__(self, tracker: SpreadTracker) -> None:
        self.tracker = tracker

    def node(self, obj: Mapping[str, Any]) -> None:
        return None

    def bound(self, pod: BoundPod) -> None:
        self.tracker.bound(pod.uid, pod.owner, pod.node, pod.annotations.get(DECISION_ANNOTATION))

    def gone(self, uid: str) -> None:
        self.tracker.gone(uid)

    def stored(self, pod: StoredPod) -> None:
        stored = getattr(self.tracker, "stored", None)  # a tracker of bound pods only: none
        if stored is not None:
            stored(pod)


_NODE, _BOUND, _GONE, _STORED = range(4)


class SimWatch:
    """Cluster events, delivered to every listener `delay` seconds after they happened; to a
    listener subscribed `lagging`, up to `jitter` seconds later still, drawn per event and
    listener and kept in order (a watch never reorders): webhook replicas whose pod watches
    show the same events at different moments, as on a busy machine."""

    def __init__(self, delay: float = 0.0, jitter: float = 0.0, seed: int = 0) -> None:
        if delay < 0 or jitter < 0:
            raise ValueError("watch delay and jitter must be >= 0")
        self.delay = delay
        self.jitter = jitter
        self.listeners: list[WatchListener] = []
        self._lagging: list[WatchListener] = []
        self._last_due: list[float] = []  # per lagging listener: its last event's delivery
        self._rng = random.Random(f"watch/{seed}")
        # (due, seq, lagging listener or -1 for every other one, kind, data)
        self._queue: list[tuple[float, int, int, int, Any]] = []
        self._seq = 0

    @property
    def active(self) -> bool:
        """Whether anyone listens (the engine skips building events otherwise)."""
        return bool(self.listeners or self._lagging)

    def subscribe(self, listener: WatchListener, lagging: bool = False) -> None:
        if lagging:
            self._lagging.append(listener)
            self._last_due.append(0.0)
        else:
            self.listeners.append(listener)

    def node_changed(self, now: float, obj: Mapping[str, Any]) -> None:
        self._push(now, _NODE, obj)

    def pod_bound(self, now: float, pod: BoundPod) -> None:
        self._push(now, _BOUND, pod)

    def pod_gone(self, now: float, uid: str) -> None:
        self._push(now, _GONE, uid)

    def pod_stored(self, now: float, pod: StoredPod) -> None:
        self._push(now, _STORED, pod)

    def advance(self, now: float, at: Callable[[float], None] | None = None) -> int:
        """Deliver every event due by `now`, in order. `at` sets the listeners' clock: to
        each event's due time while a lagging listener takes it in (a spread tracker reads
        its own echoes' lag from it), then back to `now`. Returns how many deliveries were
        made to the listeners subscribed without lag (each counted once)."""
        delivered = 0
        while self._queue and self._queue[0][0] <= now:
            due, _, to, kind, data = heapq.heappop(self._queue)
            if to < 0:
                delivered += 1
                for listener in self.listeners:
                    _deliver(listener, kind, data)
            else:
                if at is not None:
                    at(due)
                _deliver(self._lagging[to], kind, data)
                if at is not None:
                    at(now)
        return delivered

    def _push(self, now: float, kind: int, data: Any) -> None:
        if self.listeners:
            self._seq += 1
            heapq.heappush(self._queue, (now + self.delay, self._seq, -1, kind, data))
        for to in range(len(self._lagging)):
            due = max(self._last_due[to], now + self.delay + self._rng.uniform(0, self.jitter))
            self._last_due[to] = due
            self._seq += 1
            heapq.heappush(self._queue, (due, self._seq, to, kind, data))


def _deliver(listener: WatchListener, kind: int, data: Any) -> None:
    if kind == _NODE:
        listener.node(data)
    elif kind == _BOUND:
        listener.bound(data)
    elif kind == _GONE:
        listener.gone(data)
    else:
        stored = getattr(listener, "stored", None)
        if stored is not None:  # only the spread trackers read stored pods
            stored(data)
