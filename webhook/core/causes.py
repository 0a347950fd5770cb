"""Why a pod's node cost bytes that the best node it could have had did not: one cause per
placement, in words shared by the simulator's loss table (`smallsweep --explain`), the
real-node evaluation and `layer-locality explain`. Pure.

A placement is judged against the best node *in the same state* (the greedy oracle's choice at
that moment): among the feasible nodes with the least spreading excess (the scheduler's
default maxSkew taken as hard), the one holding the most of the pod's bytes. The bytes lost
are what the chosen node lacks beyond that node. The cause is the first of these that holds:

1. `sample`: the best node was outside the scheduler's sample (percentageOfNodesToScore).
2. `unpatched`: the webhook gave the pod no preference (below the floor, unresolved, ...).
3. The webhook weighed the best node no higher than the chosen one (its decision is why):
   - `guard-counts`: the spread guard closed it, its counts (bound + pending siblings) at the
     scheduler's limit; `guard-headroom`: closed only by the room the guard keeps while a
     pending sibling may be anywhere; `guard-replicas`: closed only for other webhook
     replicas' reviews it could not see (their in-flight reviews, a node's last place kept
     for another replica, a watch behind);
   - `unseen`: the webhook's view held fewer of the pod's bytes there than the node had (a
     pull not yet in the node status, a layer it could not know);
   - `weighed-lower`: it knew the bytes and the node was open, yet weighed it no higher (the
     spreading step, the seed node, a lift of the siblings' nodes, the term budget).
4. The webhook preferred the best node and the scheduler chose another: the plugin whose
   weighted score favoured the chosen node most: `spread-score` (PodTopologySpread),
   `resources` (NodeResourcesFit, NodeResourcesBalancedAllocation), `image-locality`,
   `taints` (TaintToleration); `tie-break` when the totals were equal (the scheduler's random
   pick among the best).

A placement on a node past the spreading limit while a node within it was feasible is
`over-skew` (its bytes may be negative: the oracle would not have saved them that way).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum


class Cause(StrEnum):
    NONE = ""  # the chosen node was as good as the best one
    SAMPLE = "sample"
    UNPATCHED = "unpatched"
    GUARD_COUNTS = "guard-counts"
    GUARD_HEADROOM = "guard-headroom"
    GUARD_REPLICAS = "guard-replicas"
    UNSEEN = "unseen"
    WEIGHED_LOWER = "weighed-lower"
    SPREAD_SCORE = "spread-score"
    RESOURCES = "resources"
    IMAGE_LOCALITY = "image-locality"
    TAINTS = "taints"
    TIE_BREAK = "tie-break"
    OVER_SKEW = "over-skew"


EXPLANATIONS: Mapping[Cause, str] = {
    Cause.NONE: "the pod landed on a node as good as the best it could have had",
    Cause.SAMPLE: "the best node was outside the scheduler's sample of nodes "
                  "(percentageOfNodesToScore)",
    Cause.UNPATCHED: "the webhook gave the pod no preference",
    Cause.GUARD_COUNTS: "the spread guard closed the best node: its siblings there (bound "
                        "and pending) were at the scheduler's maxSkew",
    Cause.GUARD_HEADROOM: "the spread guard closed the best node to keep room while a "
                          "pending sibling might land anywhere",
    Cause.GUARD_REPLICAS: "the spread guard closed the best node for another webhook "
                          "replica's reviews it could not see yet",
    Cause.UNSEEN: "the webhook did not know the best node held those bytes yet (a pull not "
                  "yet in the node status)",
    Cause.WEIGHED_LOWER: "the webhook knew the bytes but weighed the best node no higher "
                         "than the one chosen",
    Cause.SPREAD_SCORE: "the scheduler's PodTopologySpread score outweighed the preference",
    Cause.RESOURCES: "the scheduler's resource scores outweighed the preference",
    Cause.IMAGE_LOCALITY: "the scheduler's ImageLocality score outweighed the preference",
    Cause.TAINTS: "the scheduler's TaintToleration score outweighed the preference",
    Cause.TIE_BREAK: "the scheduler's totals were equal: its random pick among the best",
    Cause.OVER_SKEW: "placed past the spreading limit while a node within it was feasible",
}

# Scheduler plugin -> the cause when its weighted score decided against the preference.
PLUGIN_CAUSES: Mapping[str, Cause] = {
    "PodTopologySpread": Cause.SPREAD_SCORE,
    "NodeResourcesFit": Cause.RESOURCES,
    "NodeResourcesBalancedAllocation": Cause.RESOURCES,
    "ImageLocality": Cause.IMAGE_LOCALITY,
    "TaintToleration": Cause.TAINTS,
}

# Why the spread guard closed a node (spread.py's `closed_by` values).
GUARD_CAUSES: Mapping[str, Cause] = {
    "counts": Cause.GUARD_COUNTS,
    "headroom": Cause.GUARD_HEADROOM,
    "replicas": Cause.GUARD_REPLICAS,
}


@dataclass(frozen=True, slots=True)
class NodeView:
    """One feasible node at the moment the pod was placed."""

    name: str
    bytes_present: int  # of the pod's bytes, on disk or being pulled there (the truth)
    believed: int  # what the webhook's decision took it to hold (siblings' nodes as full)
    weight: int  # summed weights of the pod's preferred terms matching it (NodeAffinity raw)
    excess: int = 0  # past the default spreading limits (hostname, zone) if placed here
    sampled: bool = True  # among the nodes the scheduler scored
    closed_by: str = ""  # why the spread guard closed it ("": open)
    # Each score plugin's weighted score (plugin weight x normalized score).
    scores: Mapping[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.scores.values())


@dataclass(frozen=True, slots=True)
class Placement:
    """What `attribute` reads of one placement."""

    pod: str
    pod_bytes: int
    chosen: str
    nodes: Sequence[NodeView]  # the feasible nodes, the chosen one among them
    patched: bool = True  # the webhook gave preferred terms


@dataclass(frozen=True, slots=True)
class Loss:
    pod: str
    cause: Cause
    lost: int  # bytes the chosen node lacks beyond the best one (negative: over-skew gain)
    chosen: NodeView | None = None
    best: NodeView | None = None


def attribute(placement: Placement) -> Loss:
    """The bytes `placement` lost against the best node in the same state, and why (module
    docstring)."""
    nodes = {n.name: n for n in placement.nodes}
    chosen = nodes.get(placement.chosen)
    if chosen is None or not nodes:
        return Loss(placement.pod, Cause.NONE, 0)
    least = min(n.excess for n in placement.nodes)
    legal = [n for n in placement.nodes if n.excess == least]
    most = max(n.bytes_present for n in legal)
    lost = most - chosen.bytes_present
    if chosen.excess > least:
        best = max(legal, key=lambda n: (n.bytes_present, n.weight, n.total))
        return Loss(placement.pod, Cause.OVER_SKEW, lost, chosen, best)
    if lost <= 0:
        return Loss(placement.pod, Cause.NONE, 0, chosen)
    # The best node closest to being chosen: the most weight, then the highest total.
    top = [n for n in legal if n.bytes_present == most]
    best = max(top, key=lambda n: (n.sampled, n.weight, n.total))
    return Loss(placement.pod, _cause(placement, chosen, best), lost, chosen, best)


def _cause(placement: Placement, chosen: NodeView, best: NodeView) -> Cause:
    if not best.sampled:
        return Cause.SAMPLE
    if not placement.patched:
        return Cause.UNPATCHED
    if best.weight <= chosen.weight:
        if best.closed_by:
            return GUARD_CAUSES.get(best.closed_by, Cause.GUARD_COUNTS)
        if best.believed < best.bytes_present and best.believed <= chosen.believed:
            return Cause.UNSEEN
        return Cause.WEIGHED_LOWER
    margins = {plugin: chosen.scores.get(plugin, 0) - best.scores.get(plugin, 0)
               for plugin in PLUGIN_CAUSES}
    plugin, margin = max(margins.items(), key=lambda item: item[1])
    if chosen.total == best.total or margin <= 0:
        return Cause.TIE_BREAK
    return PLUGIN_CAUSES[plugin]


@dataclass(slots=True)
class LossTable:
    """Lost bytes and placements by cause, summed over runs."""

    bytes_by_cause: dict[Cause, int] = field(default_factory=dict)
    pods_by_cause: dict[Cause, int] = field(default_factory=dict)
    placements: int = 0

    def add(self, losses: Iterable[Loss]) -> None:
        for loss in losses:
            self.placements += 1
            if loss.cause is Cause.NONE:
                continue
            self.bytes_by_cause[loss.cause] = self.bytes_by_cause.get(loss.cause, 0) + loss.lost
            self.pods_by_cause[loss.cause] = self.pods_by_cause.get(loss.cause, 0) + 1

    def merge(self, other: LossTable) -> None:
        self.placements += other.placements
        for cause, lost in other.bytes_by_cause.items():
            self.bytes_by_cause[cause] = self.bytes_by_cause.get(cause, 0) + lost
        for cause, pods in other.pods_by_cause.items():
            self.pods_by_cause[cause] = self.pods_by_cause.get(cause, 0) + pods

    @property
    def lost(self) -> int:
        """Bytes lost over every cause but over-skew (whose bytes are no loss to the oracle)."""
        return sum(b for c, b in self.bytes_by_cause.items() if c is not Cause.OVER_SKEW)

    def ranked(self) -> list[tuple[Cause, int, int]]:
        """(cause, bytes, placements), most bytes first."""
        return sorted(((c, b, self.pods_by_cause[c]) for c, b in self.bytes_by_cause.items()),
                      key=lambda row: (-row[1], row[0].value))


@dataclass(frozen=True, slots=True)
class BindExplanation:
    """What a bound pod's own record says of its placement (`explain_bind`)."""

    cause: Cause
    node: str  # where it was bound
    weight: int | None  # its summed weight in the pod's terms (None: label terms, unknown)
    best: str  # the node the decision preferred most
    best_weight: int
    detail: str


def explain_bind(node: str, weight: int | None, top: Sequence[tuple[str, int, int | None]],
                 top_weight: int, siblings: int | None, nodes_total: int,
                 sample_from: int = 100) -> BindExplanation:
    """The cause, in the words above, that a bound pod's record supports: `node` it was bound
    to and its `weight` in the pod's terms; `top`: the decision annotation's top list (node,
    bytes present, siblings at the decision), best first, and the best's summed weight;
    `siblings`: the bound node's siblings at the decision when known (listed in `top`, or
    counted since); `nodes_total`: the cluster's nodes (the scheduler samples from
    `sample_from` up). After the fact the scheduler's resource scores are not known: a
    choice against the preference that spreading does not explain is put down to them."""
    if not top:
        return BindExplanation(Cause.UNPATCHED, node, weight, "", 0,
                               "the decision names no node")
    best, _, best_siblings = top[0]
    if node == best or (weight is not None and weight >= top_weight):
        return BindExplanation(Cause.NONE, node, weight, best, top_weight,
                               f"bound to a node at the top weight ({top_weight})")
    if nodes_total >= sample_from and not weight:
        return BindExplanation(
            Cause.SAMPLE, node, weight, best, top_weight,
            f"{nodes_total} nodes: the scheduler scores a sample of them, and {node} "
            f"(weight {weight or 0}) may have been scored without {best}")
    if siblings is not None and best_siblings is not None and siblings < best_siblings:
        return BindExplanation(
            Cause.SPREAD_SCORE, node, weight, best, top_weight,
            f"{best} held {best_siblings} of the workload's pods at the decision, {node} "
            f"{siblings}: PodTopologySpread favoured {node} by more than the preference's "
            f"{top_weight - (weight or 0)} weight points")
    return BindExplanation(
        Cause.RESOURCES, node, weight, best, top_weight,
        f"{node} weighed {weight if weight is not None else 'an unknown weight'} against "
        f"{best}'s {top_weight} and spreading does not explain it: the scheduler's resource "
        f"scores (or ImageLocality, or a tie among equal totals) chose it")
