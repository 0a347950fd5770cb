"""Outcome telemetry: pod binds and kubelet `Pulled` events turned into metrics.

Fed by the live inventory's pod and event reflectors (webhook/inventory/live.py) and, with the
same code, by the simulator (webhook/sim/outcomes.py). Runs on the event loop only; no I/O.

- A pod seen bound for the first time that carries a decision is classified against it
  (binds.py) and measured against the layer index as it stands then: the bytes of its layers
  its node holds (the same per-node overlap a review computes) over its bytes, and those bytes
  minus the candidates' mean at review time (`meanBytes`). Call `bound` before the inventory
  counts the pod's own images as in flight on the node, or every pod would look warm.
- Each pod seen bound is remembered (uid -> whether it carries a decision) until it is gone:
  a `Pulled` event names its pod by uid, and is counted as `patched` or not from that record.
  An event whose pod is not known yet (the two watches race) waits up to `orphan_seconds`.
- An Event object aggregates repeats (`count`): each (uid, count) is counted once, so a
  relist or an update that changes nothing else counts nothing.
- What the first list of each resource shows happened before this process watched: it is
  remembered (pods, event counts) but not counted.
- The holdout (webhook/core/holdout.py): a pod whose decision names a group (steered or holdout)
  is a start of that group, in its workload's cohort, when first seen bound: the bytes of
  its layers the node lacked then (0: a warm start), the seconds of its `Pulled` events, and
  the time from its creationTimestamp until it is first seen Running go to the sink by
  (group, cohort), for the report's comparison. A held-out pod carries no preference: it is
  never counted as a bind of the webhook's, and its pulls count as not patched.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from webhook.core.holdout import Group, cohort
from webhook.core.index import LayerIndex
from webhook.core.layers import ImageLayers
from webhook.core.objects import mapping, text
from webhook.core.pods import pod_images
from webhook.core.prepare import pod_layers
from webhook.telemetry.binds import (
    BindOutcome,
    baseline_weight,
    bytes_present,
    classify,
    decision_facts,
    webhook_terms,
)
from webhook.telemetry.pulls import PullMessage, parse_message, pulled_event

DELETED = "DELETED"  # a watch event's type (webhook.inventory.reflector.DELETED)

Lookup = Callable[[str], ImageLayers | None]  # an image as the pod writes it -> its layers
_UP = frozenset({"Running", "Succeeded", "Failed"})  # the containers have started (or run)


class TelemetrySink(Protocol):
    """Where the measurements go (webhook.serving.metrics.TelemetryMetrics)."""

    def bind(self, outcome: str, present_ratio: float | None,
             avoided_bytes: int | None) -> None: ...
    def pull(self, patched: bool, group: str, result: str, seconds: float,
             times: int) -> None: ...
    def start(self, group: str, cohort: int, workload: str, missing_bytes: int) -> None: ...
    def start_pull(self, group: str, cohort: int, seconds: float, times: int) -> None: ...
    def running(self, group: str, cohort: int, seconds: float) -> None: ...
    def unparsed(self, times: int) -> None: ...
    def unmatched(self, times: int) -> None: ...


@dataclass(frozen=True, slots=True)
class TelemetrySettings:
    orphan_seconds: float = 60.0  # an event waits this long for its pod to be seen bound
    max_orphans: int = 1_000  # events waiting, at most
    max_events: int = 200_000  # event uids remembered for deduplication (LRU)
    max_repeats: int = 100  # occurrences one Event update may add at once


@dataclass(frozen=True, slots=True)
class _Pod:
    """What is remembered of a bound pod (interned: a few dozen distinct values)."""

    patched: bool  # carries the webhook's preference
    group: str  # Group's value
    cohort: int  # -1: not a counted start of the experiment


_PODS: dict[tuple[bool, str, int], _Pod] = {}


def _pod(patched: bool, group: str, cohort: int) -> _Pod:
    key = (patched, group, cohort)
    found = _PODS.get(key)
    if found is None:
        found = _PODS[key] = _Pod(patched, group, cohort)
    return found


def created_at(pod: Mapping[str, Any]) -> float | None:
    """The pod's creationTimestamp as a Unix time, or None."""
    stamp = text(mapping(pod.get("metadata")).get("creationTimestamp"))
    try:
        return datetime.fromisoformat(stamp).timestamp() if stamp else None
    except ValueError:
        return None


@dataclass(slots=True)
class _Held:
    expires: float
    pulls: list[tuple[PullMessage, int]] = field(default_factory=list)


class Telemetry:
    def __init__(self, sink: TelemetrySink, index: LayerIndex, lookup: Lookup,
                 clock: Callable[[], float] = time.monotonic,
                 settings: TelemetrySettings = TelemetrySettings(),
                 wall: Callable[[], float] = time.time) -> None:
        self._sink = sink
        self._index = index
        self._lookup = lookup
        self._clock = clock
        self._wall = wall
        self._settings = settings
        self._patched: dict[str, _Pod] = {}  # pod uid -> what it is, while it exists
        # Counted starts not yet seen Running: pod uid -> its creationTimestamp (Unix time).
        self._starting: dict[str, float] = {}
        # event uid -> count seen, oldest first (a plain dict: ~40 bytes an entry; the uid
        # string is the reflector's own)
        self._events: dict[str, int] = {}
        self._held: OrderedDict[str, _Held] = OrderedDict()  # pod uid -> its waiting events
        self._held_count = 0
        self.counting_binds = False  # after the first pod list
        self.counting_pulls = False  # after the first event list

    @property
    def tracked(self) -> tuple[int, int, int]:
        """(pods, event uids, events waiting for their pod): what memory is spent on."""
        return len(self._patched), len(self._events), self._held_count

    # -- pods --------------------------------------------------------------------------------

    def pods_listed(self, keys: Set[str] = frozenset()) -> None:
        self.counting_binds = True

    def bound(self, uid: str, pod: Mapping[str, Any], node_name: str) -> BindOutcome | None:
        """A pod seen bound to `node_name`; returns the outcome when one was counted."""
        known = self._patched.get(uid)
        if known is not None:  # only the first bind counts
            if uid in self._starting and text(mapping(pod.get("status")).get("phase")) in _UP:
                self._running(uid, known)
            return None
        facts = decision_facts(pod)
        steered = facts is not None and facts.steered
        group = facts.group if facts is not None and facts.group else Group.NONE.value
        node = self._index.node(node_name)
        present: int | None = None
        layers: Mapping[str, int] = {}
        if facts is not None and node is not None:  # else where it stands is unknown
            images = [image for image in map(self._lookup, pod_images(pod)) if image is not None]
            layers = pod_layers(images, [node.platform]).get(node.platform, {})
            present = bytes_present(layers, self._index.layers_of(node_name))
        start = -1
        if (facts is not None and group != Group.NONE and self.counting_binds
                and present is not None and layers):
            found = cohort(facts.workload)
            if found is not None:
                start = found
        record = self._patched[uid] = _pod(steered, group, start)
        if start >= 0:
            assert facts is not None and present is not None
            self._sink.start(group, start, facts.workload, sum(layers.values()) - present)
            created = created_at(pod)
            if created is not None:
                self._starting[uid] = created
                if text(mapping(pod.get("status")).get("phase")) in _UP:
                    self._running(uid, record)
        self._release(uid)
        if facts is None or not steered or not self.counting_binds:
            return None
        outcome = classify(webhook_terms(pod, facts.terms),
                           node.hostname if node is not None else node_name,
                           frozenset(node.layer_labels) if node is not None else frozenset(),
                           baseline_weight(pod, facts.terms))
        ratio = avoided = None
        if present is not None:
            if facts.pod_bytes:
                ratio = min(1.0, present / facts.pod_bytes)
            if facts.mean_bytes is not None:
                avoided = present - facts.mean_bytes
        self._sink.bind(outcome, ratio, avoided)
        return outcome

    def _running(self, uid: str, record: _Pod) -> None:
        created = self._starting.pop(uid)
        self._sink.running(record.group, record.cohort, max(0.0, self._wall() - created))

    def gone(self, uid: str) -> None:
        self._patched.pop(uid, None)
        self._starting.pop(uid, None)

    def pod(self, uid: str, pod: Mapping[str, Any] | None, node_name: str | None) -> None:
        """A pod watch event: bound to `node_name`, or gone (None: deleted, or not bound)."""
        if pod is None or node_name is None:
            self.gone(uid)
        else:
            self.bound(uid, pod, node_name)

    # -- events (a Reflector's callbacks) ----------------------------------------------------

    def event_keys(self) -> Set[str]:
        """The event uids held (bounded): the events reflector's view of what it reported,
        so the uids are not kept twice."""
        return self._events.keys()

    def events_listed(self, keys: Set[str] = frozenset()) -> None:
        self.counting_pulls = True

    def event(self, kind: str, key: str, obj: Mapping[str, Any] | None) -> None:
        if kind == DELETED or obj is None:
            self._events.pop(key, None)
            return
        pulled = pulled_event(obj)
        if pulled is None:
            return
        last = self._events.get(key, 0)
        if pulled.count <= last:
            return  # seen already (a relist, or an update of another field)
        self._events.pop(key, None)
        self._events[key] = pulled.count  # now the newest
        if len(self._events) > self._settings.max_events:
            del self._events[next(iter(self._events))]
        if not self.counting_pulls:
            return
        times = min(pulled.count - last, self._settings.max_repeats)
        message = parse_message(pulled.message)
        if message is None:
            self._sink.unparsed(times)
            return
        record = self._patched.get(pulled.pod_uid)
        if record is None:
            self._hold(pulled.pod_uid, message, times)
        else:
            self._pull(record, message, times)
        self.expire()

    def _pull(self, record: _Pod, message: PullMessage, times: int) -> None:
        self._sink.pull(record.patched, record.group, message.result, message.seconds, times)
        if record.cohort >= 0:
            self._sink.start_pull(record.group, record.cohort, message.seconds, times)

    def expire(self) -> int:
        """Give up on events whose pod was not seen bound in time; returns how many."""
        now = self._clock()
        dropped = 0
        while self._held:
            uid, held = next(iter(self._held.items()))
            if held.expires > now:
                break
            dropped += self._drop(uid)
        return dropped

    def _hold(self, pod_uid: str, message: PullMessage, times: int) -> None:
        held = self._held.get(pod_uid)
        if held is None:
            held = self._held[pod_uid] = _Held(self._clock() + self._settings.orphan_seconds)
        held.pulls.append((message, times))
        self._held_count += 1
        while self._held_count > self._settings.max_orphans:
            self._drop(next(iter(self._held)))

    def _drop(self, pod_uid: str) -> int:
        held = self._held.pop(pod_uid)
        self._held_count -= len(held.pulls)
        times = sum(times for _, times in held.pulls)
        self._sink.unmatched(times)
        return times

    def _release(self, pod_uid: str) -> None:
        held = self._held.pop(pod_uid, None)
        if held is None:
            return
        self._held_count -= len(held.pulls)
        record = self._patched[pod_uid]
        for message, times in held.pulls:
            self._pull(record, message, times)


def recorder_for(sink: TelemetrySink, settings: TelemetrySettings = TelemetrySettings()
                 ) -> Callable[[LayerIndex, Lookup, Callable[[], float]], Telemetry]:
    """What the live inventory is given: it makes the recorder on its own index."""
    def make(index: LayerIndex, lookup: Lookup, clock: Callable[[], float]) -> Telemetry:
        return Telemetry(sink, index, lookup, clock, settings)

    return make
