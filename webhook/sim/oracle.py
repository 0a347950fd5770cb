"""The layer-aware bounds: `oracle` (best placement keeping the default spreading) and `greedy`
(most bytes, spreading ignored). Both are schedulers with a perfect, instant view: the
scheduler's own state (binds and the owners' pod counts at once) and the true layers of each
node (on disk or queued by an earlier bind).

`oracle`, exactly, for one pod:
1. Feasible nodes: every node passing the default filters (no `percentageOfNodesToScore`
   sampling).
2. Spreading: for each system default constraint (hostname maxSkew 3, zone maxSkew 5), the
   skew a placement on node n would give, as kube-scheduler's PodTopologySpread filter computes
   it for a hard constraint: the owner's pods in n's domain + 1 - the fewest owner pods in any
   domain of an eligible node (a node matching the pod's nodeSelector and required node
   affinity; nodes without the zone label have no zone domain and no zone constraint).
   Excess = max(0, skew - maxSkew). Candidates are the feasible nodes with the least
   (hostname excess, zone excess), compared in that order: every node within both limits when
   there is one (the usual case); otherwise the least violating ones, so that the oracle never
   leaves a pod pending that the scheduler would place (the real constraints are
   ScheduleAnyway). Only pods a ReplicaSet owns are spread (the default constraints select
   nothing else).
3. Among candidates, the most bytes of the pod's layers on the node.
4. Ties: the highest total score of the default profile, then uniformly at random (seeded).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from webhook.core.objects import HOSTNAME_LABEL
from webhook.sim.scheduler import SYSTEM_DEFAULT_CONSTRAINTS, PodView, Profile, Result, Scheduler
from webhook.sim.world import ZONE_LABEL, NodeState, World

MAX_SKEW = dict(SYSTEM_DEFAULT_CONSTRAINTS)
HOST_MAX_SKEW = MAX_SKEW[HOSTNAME_LABEL]  # 3
ZONE_MAX_SKEW = MAX_SKEW[ZONE_LABEL]  # 5


def spread_excess(world: World, pod: PodView, owner: str, nodes: Sequence[NodeState]
                  ) -> list[tuple[int, int]]:
    """(hostname excess, zone excess) of placing `pod` on each of `nodes` (see above)."""
    eligible = [n for n in world.nodes.values() if Scheduler.matches_required(pod, n)]
    host_min = min((n.owner_counts.get(owner, 0) for n in eligible), default=0)
    zones: dict[str, int] = {}
    for n in eligible:
        zone = n.labels.get(ZONE_LABEL)
        if zone is not None:
            zones[zone] = zones.get(zone, 0) + n.owner_counts.get(owner, 0)
    zone_min = min(zones.values(), default=0)
    out = []
    for n in nodes:
        host_skew = n.owner_counts.get(owner, 0) + 1 - host_min
        zone = n.labels.get(ZONE_LABEL)
        zone_skew = zones.get(zone, 0) + 1 - zone_min if zone is not None else 0
        out.append((max(0, host_skew - HOST_MAX_SKEW), max(0, zone_skew - ZONE_MAX_SKEW)))
    return out


class BytesPolicy:
    """`oracle` (spread kept) and `greedy` (spread ignored)."""

    def __init__(self, world: World, seed: int, keep_spread: bool) -> None:
        self.name = "oracle" if keep_spread else "greedy"
        self.world = world
        self.keep_spread = keep_spread
        self.scheduler = Scheduler(world, Profile(), seed)

    def admit(self, pod: dict[str, Any], now: float,
              replica: int | None = None) -> dict[str, Any]:
        return pod

    def schedule(self, view: PodView, now: float) -> Result:
        feasible = self.scheduler.find_feasible(view, sample=False)
        if not feasible:
            return Result(None, 0, {})
        candidates = feasible
        if self.keep_spread and view.spread_owner is not None:
            excess = spread_excess(self.world, view, view.spread_owner, feasible)
            least = min(excess)
            candidates = [n for n, e in zip(feasible, excess, strict=True) if e == least]
        present = [n.bytes_present(view.layers.get(n.platform, {})) for n in candidates]
        best = max(present)
        top = [n for n, b in zip(candidates, present, strict=True) if b == best]
        totals = self.scheduler.total_scores(view, top) if len(top) > 1 else [0]
        return Result(self.scheduler.select_host(top, totals), len(feasible),
                      {n.name: s for n, s in zip(top, totals, strict=True)})

    def close(self) -> None:
        return None

