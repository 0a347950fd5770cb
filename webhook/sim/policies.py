"""Placement policies compared by the simulator. Each has two steps, as in a cluster: `admit`
(mutating admission, once, when the pod is created) and `schedule` (every scheduling attempt).

- `stock`: the default profile (scheduler.py), ImageLocality as is, the pod unchanged.
- `webhook`: the pod goes through the real `/mutate` code path in-process (`Mutator.review` on
  an AdmissionReview `Review`, the patch applied with jsonpatch); the stock scheduler then
  schedules the patched pod. The webhook sees only what production gives it (view.py,
  watch.py): node status and binds through watches that lag by `watch_delay`, images it has not
  seen before only `registry_delay` after their first review. Its outcome telemetry (binds,
  kubelet pull events) runs on the same watch: `telemetry_metrics` holds what a cluster's
  /metrics would show (outcomes.py).
- `plugin`: the default profile with ImageLocality replaced by LayerLocality (bytes of the pod's
  layers in the node status, same thresholds, weight 1): the forked-scheduler approach. It needs
  the pod's image manifests too, so it gets the same registry as the webhook: an image it has
  not seen scores nothing until `registry_delay` after the first attempt.
- `oracle`, `greedy`: oracle.py.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

import jsonpatch
from prometheus_client import CollectorRegistry

from webhook.core.admission import Review
from webhook.core.decision import Decision
from webhook.core.holdout import HoldoutPolicy
from webhook.core.index import LayerIndex
from webhook.core.pods import DECISION_ANNOTATION, decision_id, pending_placement
from webhook.core.prepare import pod_layers
from webhook.core.scoring import ScoringPolicy
from webhook.inventory.memory import StaticInventory
from webhook.inventory.siblings import SiblingTracker
from webhook.serving.metrics import TelemetryMetrics
from webhook.serving.mutate import Mutator
from webhook.sim.oracle import BytesPolicy
from webhook.sim.outcomes import SimAccounting, TelemetryFeed
from webhook.sim.scheduler import PodView, Profile, Result, Scheduler
from webhook.sim.view import ROUTINGS, IndexListener, SimRegistry, ViewConfig
from webhook.sim.watch import SimWatch, SpreadTracker, StoredPod, TrackerListener
from webhook.sim.world import World
from webhook.telemetry.recorder import Telemetry

POLICIES = ("stock", "webhook", "plugin", "oracle", "greedy")
DEFAULT_VIEW = ViewConfig()


class Policy(Protocol):
    name: str

    def admit(self, pod: dict[str, Any], now: float,
              replica: int | None = None) -> dict[str, Any]:
        """The pod after mutating admission (a new object when changed)."""
        ...

    def schedule(self, view: PodView, now: float) -> Result: ...

    def close(self) -> None: ...


class StockPolicy:
    def __init__(self, world: World, seed: int, percentage: int = 0, name: str = "stock") -> None:
        self.name = name
        self.scheduler = Scheduler(world, Profile(percentage_of_nodes_to_score=percentage), seed)

    def admit(self, pod: dict[str, Any], now: float,
              replica: int | None = None) -> dict[str, Any]:
        return pod

    def schedule(self, view: PodView, now: float) -> Result:
        return self.scheduler.schedule(view)

    def close(self) -> None:
        return None


class PluginPolicy(StockPolicy):
    """LayerLocality in place of ImageLocality, the pod's layers from a registry that takes
    time like the webhook's."""

    def __init__(self, world: World, seed: int, percentage: int = 0,
                 view: ViewConfig = DEFAULT_VIEW) -> None:
        super().__init__(world, seed, percentage, name="plugin")
        self.scheduler = Scheduler(world, Profile(percentage_of_nodes_to_score=percentage,
                                                  layer_locality=True), seed)
        self.now = 0.0
        self.registry = SimRegistry(world.book.catalog, view.registry_delay, lambda: self.now)
        self.registry.preload(ref for node in world.nodes.values() for ref in node.spec.images)
        self.platforms = sorted({n.platform for n in world.nodes.values()})

    def schedule(self, view: PodView, now: float) -> Result:
        self.now = now
        known = [self.registry.lookup(name) for name in view.images]
        layers = pod_layers([i for i in known if i is not None], self.platforms)
        return self.scheduler.schedule(replace(view, layers=layers))


class _SiblingFeed:
    """The watch's bound/gone events into the webhook's SiblingTracker, as live.py does."""

    def __init__(self, tracker: SiblingTracker) -> None:
        self.tracker = tracker

    def bound(self, pod_uid: str, owner_uid: str | None, node: str,
              decision: str | None) -> None:
        if owner_uid is not None:
            token = decision_id({"metadata": {"annotations": {DECISION_ANNOTATION: decision}}})
            self.tracker.bound(pod_uid, owner_uid, node, token)

    def gone(self, pod_uid: str) -> None:
        self.tracker.gone(pod_uid)

    def stored(self, pod: StoredPod) -> None:
        if pod.owner is not None:
            placement = pending_placement({"metadata": {"annotations": pod.annotations}})
            self.tracker.seen_pending(pod.uid, pod.owner, placement.token, placement.node,
                                      placement.by, placement.also, placement.near)


class Router:
    """Which webhook replica reviews each pod (`ViewConfig.routing`):

    - `connection`: as the API server's connections through a Service fall. It reviews over
      kept-alive connections, each pinned at random to one replica when opened: a review
      alone goes over the first connection (steady arrivals: one connection carries all), the
      k-th of reviews made at the same moment over the k-th (a burst's slow-start batch opens
      as many as it needs), up to `connections`;
    - `random`: each review to a replica at random (a per-request balancer);
    - `one`: every review to the first replica; `even`: to each in turn."""

    def __init__(self, replicas: int, routing: str, connections: int, seed: int) -> None:
        if routing not in ROUTINGS:
            raise ValueError(f"unknown routing {routing!r} (one of {', '.join(ROUTINGS)})")
        self.replicas = replicas
        self.routing = routing
        self.connections = max(1, connections)
        self.rng = random.Random(f"replicas/{seed}")
        self.pinned: list[int] = []  # connection -> replica
        self.turn = 0
        self.at: float | None = None  # the moment of the last review, and how many then
        self.concurrent = 0
        self.reviews = [0] * replicas  # per replica
        self.per_connection: list[int] = []

    def observed(self, replica: int) -> int:
        """The replica a replayed trace says reviewed the pod."""
        choice = replica % self.replicas
        self.reviews[choice] += 1
        return choice

    def route(self, now: float) -> int:
        self.concurrent = self.concurrent + 1 if now == self.at else 0
        self.at = now
        if self.routing == "connection":
            connection = self.concurrent % self.connections
            while len(self.pinned) <= connection:
                self.pinned.append(self.rng.randrange(self.replicas))
                self.per_connection.append(0)
            self.per_connection[connection] += 1
            choice = self.pinned[connection]
        elif self.routing == "random":
            choice = self.rng.randrange(self.replicas)
        elif self.routing == "even":
            choice, self.turn = self.turn, (self.turn + 1) % self.replicas
        else:
            choice = 0
        self.reviews[choice] += 1
        return choice


class WebhookPolicy:
    """Stock scheduling of the pod as the webhook patched it, from the webhook's own view."""

    def __init__(self, world: World, watch: SimWatch, seed: int, scoring: ScoringPolicy,
                 percentage: int = 0, view: ViewConfig = DEFAULT_VIEW,
                 tracker: SpreadTracker | None = None, name: str = "webhook") -> None:
        self.name = name
        self.watch = watch
        self.now = 0.0
        self.scheduler = Scheduler(world, Profile(percentage_of_nodes_to_score=percentage), seed)
        self.registry = SimRegistry(world.book.catalog, view.registry_delay, self.clock,
                                    view.budget)
        self.registry.preload(ref for node in world.nodes.values() for ref in node.spec.images)
        self.index = LayerIndex()
        self.inventory = IndexListener(self.index, self.registry, self.clock,
                                       view.inflight_seconds)
        for node in world.nodes.values():  # the initial list: synced before the first review
            self.inventory.node(world.node_object(node))
        # Outcome telemetry, subscribed before the inventory: a bind is measured against the
        # index before the pod's own images count as in flight there (as live.py does).
        self.telemetry_metrics = TelemetryMetrics(CollectorRegistry(auto_describe=True))
        self.telemetry = Telemetry(self.telemetry_metrics, self.index, self.registry.lookup,
                                   self.clock, wall=self.clock)
        self.telemetry.pods_listed()
        self.telemetry.events_listed()
        self.accounting = SimAccounting()  # the simulator's own count, to check the telemetry
        watch.subscribe(TelemetryFeed(self.telemetry))
        watch.subscribe(self.accounting)
        watch.subscribe(self.inventory)
        # The spread guard's counts, fed by the same delayed pod watch as in live mode (binds,
        # ends, and stored pods carrying any replica's decision): one tracker per webhook
        # replica, each told how many they are (`--replicas`, as the manifests' config does).
        # The replicas' inventories would hold the same (one watch): they share one.
        self.trackers = [SiblingTracker(view.pending_seconds, clock=self.clock,
                                        replica=f"replica{i}",
                                        started=None if view.young else -math.inf)
                         for i in range(view.replicas)]
        self.siblings = self.trackers[0]
        for siblings in self.trackers:
            watch.subscribe(TrackerListener(_SiblingFeed(siblings)), lagging=True)
        if tracker is not None:
            watch.subscribe(TrackerListener(tracker))
        told = replace(scoring, replicas=view.replicas) if view.replicas > 1 else scoring
        if not view.spread_guard:  # as a static inventory serves: no guard, no steep weights
            told = replace(told, lack_bytes=0)
        holdout = HoldoutPolicy(view.holdout, view.holdout_seed)
        self.mutators = [Mutator([self.registry], StaticInventory(self.index), told,
                                 budget_seconds=view.budget,
                                 siblings=siblings if view.spread_guard else None,
                                 holdout=holdout)
                         for siblings in self.trackers]
        self.mutator = self.mutators[0]
        self.router = Router(view.replicas, view.routing, view.connections, seed)
        self.loop = asyncio.new_event_loop()
        self.reviews = 0
        self.patched = 0
        self.reasons: dict[str, int] = {}
        self.last_decision: Decision | None = None  # the last review's (sim/lossprobe.py)

    def clock(self) -> float:
        return self.now

    def _at(self, moment: float) -> None:
        self.now = moment

    def catch_up(self, now: float) -> None:
        """Take in what the watches and the registry have delivered by `now`."""
        self.now = now
        self.watch.advance(now, self._at)
        self.inventory.advance(now)
        for siblings in self.trackers:
            siblings.expire()
        self.telemetry.expire()

    def admit(self, pod: dict[str, Any], now: float,
              replica: int | None = None) -> dict[str, Any]:
        self.catch_up(now)
        self.reviews += 1
        review = Review.for_pod(pod, uid=f"sim-review-{self.reviews}")
        # A replayed trace says which replica reviewed the pod (its decision's `by`).
        mutator = self.mutators[self.router.route(now) if replica is None
                                else self.router.observed(replica)]
        outcome = self.loop.run_until_complete(mutator.review(review))
        self.last_decision = outcome.decision
        reason = str(outcome.reason) or str(outcome.result)
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        if not outcome.patch:
            return pod
        self.patched += 1
        patched: dict[str, Any] = jsonpatch.apply_patch(pod, list(outcome.patch))  # a copy
        self.accounting.reviewed(decision_id(patched), outcome.decision)
        return patched

    def schedule(self, view: PodView, now: float) -> Result:
        return self.scheduler.schedule(view)

    def close(self) -> None:
        for mutator in self.mutators:
            self.loop.run_until_complete(mutator.close())
        self.loop.close()


PolicyFactory = Callable[[World, SimWatch], Policy]


def make_policy(name: str, world: World, watch: SimWatch, seed: int, scoring: ScoringPolicy,
                percentage: int = 0, view: ViewConfig = DEFAULT_VIEW) -> Policy:
    if name == "stock":
        return StockPolicy(world, seed, percentage)
    if name == "webhook":
        return WebhookPolicy(world, watch, seed, scoring, percentage, view)
    if name == "plugin":
        return PluginPolicy(world, seed, percentage, view)
    if name in ("oracle", "greedy"):
        return BytesPolicy(world, seed, keep_spread=name == "oracle")
    raise ValueError(f"unknown policy {name!r} (one of {', '.join(POLICIES)})")
