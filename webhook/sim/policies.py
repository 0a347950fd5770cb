"""Placement policies compared by the simulator.

- `stock`: the default profile (scheduler.py), ImageLocality as is, the pod unchanged.
- `webhook`: the pod goes through the real `/mutate` code path in-process (`Mutator.review`
  on an AdmissionReview `Review`, the patch applied with jsonpatch); the stock scheduler then
  schedules the patched pod. The webhook's inventory is a `LayerIndex` kept in step with the
  simulated cluster: node status images (`node_from_object` + `node_layers`, as the static and
  live inventories read them) plus the images of pods already bound (in-flight pulls).
- `plugin`: the default profile with ImageLocality replaced by LayerLocality (bytes of the pod's
  layers in the node status, same thresholds, weight 1): the forked-scheduler approach.
- `oracle`: the best a layer-aware scheduler could do while keeping the default spreading:
  among all feasible nodes (no sampling) where the pod keeps its workload within maxSkew 3 per
  node, the one holding most of the pod's bytes (truth: on disk or queued), ties by the stock
  score, then at random.
- `greedy`: most bytes present, spreading ignored (the bound), ties as `oracle`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

import jsonpatch

from webhook.admission import Review
from webhook.inventory.index import LayerIndex
from webhook.inventory.memory import StaticInventory
from webhook.inventory.nodes import node_from_object
from webhook.inventory.static import node_layers
from webhook.mutate import Mutator
from webhook.scoring import ScoringPolicy
from webhook.sim.scheduler import PodView, Profile, Result, Scheduler
from webhook.sim.world import NodeState, World

POLICIES = ("stock", "webhook", "plugin", "oracle", "greedy")
SPREAD_MAX_SKEW = 3  # the system default hostname constraint


class Policy(Protocol):
    name: str

    def place(self, pod: Mapping[str, Any], view: PodView, now: float) -> Result: ...

    def close(self) -> None: ...


class StockPolicy:
    def __init__(self, world: World, seed: int, percentage: int = 0,
                 layer_locality: bool = False, name: str = "stock") -> None:
        self.name = name
        self.scheduler = Scheduler(world, Profile(percentage_of_nodes_to_score=percentage,
                                                  layer_locality=layer_locality), seed)

    def place(self, pod: Mapping[str, Any], view: PodView, now: float) -> Result:
        return self.scheduler.schedule(view)

    def close(self) -> None:
        return None


class WebhookPolicy:
    """Stock scheduling of the pod as the webhook patched it."""

    def __init__(self, world: World, seed: int, scoring: ScoringPolicy,
                 percentage: int = 0, name: str = "webhook") -> None:
        self.name = name
        self.world = world
        self.scheduler = Scheduler(world, Profile(percentage_of_nodes_to_score=percentage), seed)
        self.index = LayerIndex()
        self._synced: dict[str, int] = {}
        self.mutator = Mutator([world.book.catalog], StaticInventory(self.index), scoring)
        self.loop = asyncio.new_event_loop()
        self.patched = 0
        self.reasons: dict[str, int] = {}

    def sync(self) -> None:
        """Bring the inventory up to date with the nodes that changed."""
        for node in self.world.nodes.values():
            if self._synced.get(node.name) != node.version:
                self._synced[node.name] = node.version
                self.index.upsert(*self.inventory_view(node))

    def inventory_view(self, node: NodeState) -> tuple[Any, set[str]]:
        info = node_from_object(self.world.node_object(node))
        layers = set(node_layers(info, self.world.book.catalog).layers)
        for run in node.pods.values():
            for image in run.images:
                layers.update(d for d, _ in image.layers)
        return info, layers

    def place(self, pod: Mapping[str, Any], view: PodView, now: float) -> Result:
        self.sync()
        review = Review.for_pod(pod, uid=f"sim-{(pod.get('metadata') or {}).get('name')}")
        outcome = self.loop.run_until_complete(self.mutator.review(review))
        reason = str(outcome.reason) or str(outcome.result)
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        if outcome.patch:
            self.patched += 1
            patched: dict[str, Any] = jsonpatch.apply_patch(dict(pod), list(outcome.patch))
            view = PodView.of(patched, view.layers)
        return self.scheduler.schedule(view)

    def close(self) -> None:
        self.loop.run_until_complete(self.mutator.close())
        self.loop.close()


class BytesPolicy:
    """`oracle` (spread kept) and `greedy` (spread ignored)."""

    def __init__(self, world: World, seed: int, keep_spread: bool) -> None:
        self.name = "oracle" if keep_spread else "greedy"
        self.keep_spread = keep_spread
        self.scheduler = Scheduler(world, Profile(), seed)

    def place(self, pod: Mapping[str, Any], view: PodView, now: float) -> Result:
        feasible = self.scheduler.find_feasible(view, sample=False)
        if not feasible:
            return Result(None, 0, {})
        candidates = feasible
        if self.keep_spread and view.owner is not None:
            owner = view.owner
            low = min(n.owner_counts.get(owner, 0) for n in feasible)
            candidates = [n for n in feasible
                          if n.owner_counts.get(owner, 0) + 1 - low <= SPREAD_MAX_SKEW]
        present = [n.bytes_present(view.layers.get(n.platform, {})) for n in candidates]
        best = max(present)
        top = [n for n, b in zip(candidates, present, strict=True) if b == best]
        totals = self.scheduler.total_scores(view, top) if len(top) > 1 else [0]
        return Result(self.scheduler.select_host(top, totals), len(feasible),
                      {n.name: s for n, s in zip(top, totals, strict=True)})

    def close(self) -> None:
        return None


def make_policy(name: str, world: World, seed: int, scoring: ScoringPolicy,
                percentage: int = 0) -> Policy:
    if name == "stock":
        return StockPolicy(world, seed, percentage)
    if name == "webhook":
        return WebhookPolicy(world, seed, scoring, percentage)
    if name == "plugin":
        return StockPolicy(world, seed, percentage, layer_locality=True, name="plugin")
    if name in ("oracle", "greedy"):
        return BytesPolicy(world, seed, keep_spread=name == "oracle")
    raise ValueError(f"unknown policy {name!r} (one of {', '.join(POLICIES)})")
