"""Where the webhook's lost bytes go, read off a simulated run: at each placement, the
scheduler's view of every feasible node (its plugins' scores, its sample), the true bytes of
the pod there, the spreading excess, and what the webhook's decision believed and weighed;
`core.causes.attribute` names the cause. The probe reads the run's own objects and changes
nothing in it, so a probed run places exactly as an unprobed one."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core.causes import Loss, LossTable, NodeView, Placement, attribute
from webhook.core.decision import Decision
from webhook.core.index import LayerIndex
from webhook.sim.formulas import node_selector_term_matches
from webhook.sim.oracle import spread_excess
from webhook.sim.scheduler import PodView, Result, Scheduler
from webhook.sim.world import World

GiB = 1 << 30


class LossProbe:
    """Records a `Loss` per placement of one run (`losses`, in placement order)."""

    def __init__(self, world: World, scheduler: Scheduler, index: LayerIndex | None) -> None:
        self.world = world
        self.scheduler = scheduler
        self.index = index
        self.decisions: dict[int, Decision | None] = {}  # trace pod index -> its decision
        self.losses: list[Loss] = []

    def admitted(self, i: int, decision: Decision | None) -> None:
        self.decisions[i] = decision

    def placing(self, i: int, view: PodView, placed: Result) -> None:
        """Before the bind of trace pod `i` to `placed.node`."""
        if placed.node is None:
            return
        feasible = self.scheduler.find_feasible(view, sample=False)
        if len(feasible) < 2:
            self.losses.append(Loss(view.name, attribute(Placement(
                view.name, 0, placed.node, ())).cause, 0))
            return
        decision = self.decisions.get(i)
        believed = _believed(decision, self.index)
        closed = decision.spread.closed_by if decision is not None and decision.spread else {}
        per_plugin = self.scheduler.plugin_scores(view, feasible)
        weights = self.scheduler.profile.weights
        excess = (spread_excess(self.world, view, view.spread_owner, feasible)
                  if view.spread_owner is not None else [(0, 0)] * len(feasible))
        sampled = set(placed.scores) if placed.scores else {n.name for n in feasible}
        nodes = []
        for k, node in enumerate(feasible):
            layers = view.layers.get(node.platform, {})
            host, zone = excess[k]
            nodes.append(NodeView(
                name=node.name, bytes_present=node.bytes_present(layers),
                believed=believed.get(node.name, 0),
                weight=sum(w for w, term in view.preferred
                           if node_selector_term_matches(term, node)),
                excess=host * 1000 + zone, sampled=node.name in sampled,
                closed_by=closed.get(node.name, ""),
                scores={p: weights.get(p, 0) * s[k] for p, s in per_plugin.items()}))
        pod_bytes = max((sum(layers.values()) for layers in view.layers.values()), default=0)
        patched = decision is not None and decision.patched and bool(view.preferred)
        self.losses.append(attribute(Placement(view.name, pod_bytes, placed.node, nodes,
                                               patched)))


def _believed(decision: Decision | None, index: LayerIndex | None) -> Mapping[str, int]:
    """Bytes per node as the decision scored them (its groups, siblings' nodes lifted)."""
    if decision is None or index is None or not decision.groups:
        return {}
    out: dict[str, int] = {}
    for node in index.nodes():
        bit = index.bit(node.name)
        for group in decision.groups:
            if group.mask & bit:
                out[node.name] = max(out.get(node.name, 0), group.bytes_present)
    return out


def decision_of(placer: Any) -> Decision | None:
    """The decision of the placer's last review (the webhook policy keeps it), else None."""
    decision = getattr(placer, "last_decision", None)
    return decision if isinstance(decision, Decision) else None


def cause_lines(table: LossTable, gap: float | None = None, indent: str = "  ") -> list[str]:
    """The cause table: lost bytes per cause over the placements (GiB, share of the lost
    bytes, placements), most first; `gap`: the runs' bytes beyond the oracle's, for scale
    (the placements' losses are against the best node in each one's own state, so their sum
    need not equal it)."""
    head = (f"{indent}lost bytes by cause over {table.placements} placements "
            f"({table.lost / GiB:.2f} GiB at placement")
    head += f"; runs' gap to the oracle {gap / GiB:.2f} GiB):" if gap is not None else "):"
    lines = [head]
    for cause, lost, pods in table.ranked():
        share = lost / table.lost if table.lost > 0 else 0.0
        lines.append(f"{indent}  {cause.value:<15} {lost / GiB:7.2f} GiB {share:5.0%}  "
                     f"{pods} placements")
    return lines
