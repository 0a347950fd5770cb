"""An emulation of kube-scheduler's default profile, one pod at a time.

Each piece follows the kube-scheduler source (paths under kubernetes/kubernetes):

Filters
- NodeUnschedulable: pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go
  (a cordoned node passes only with a toleration of `node.kubernetes.io/unschedulable:NoSchedule`).
- TaintToleration: pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go
  (every NoSchedule/NoExecute taint must be tolerated).
- NodeAffinity: pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go with
  k8s.io/component-helpers/scheduling/corev1/nodeaffinity (nodeSelector AND required terms;
  terms are ORed, expressions ANDed).
- NodeResourcesFit: pkg/scheduler/framework/plugins/noderesources/fit.go (cpu, memory, pods).

Scores (default weights from pkg/scheduler/apis/config/v1/default_plugins.go)
- TaintToleration (3): count of intolerable PreferNoSchedule taints, normalised in reverse
  (helper.DefaultNormalizeScore(100, reverse=true)).
- NodeAffinity (2): sum of the weights of matching preferred terms, normalised
  `100 * raw / max(raw)` (helper.DefaultNormalizeScore, integer division).
- PodTopologySpread (2): the system default constraints (podtopologyspread/plugin.go:
  hostname maxSkew 3, zone maxSkew 5, ScheduleAnyway) for pods a ReplicaSet owns;
  podtopologyspread/scoring.go: `cnt * log(size + 2) + (maxSkew - 1)` summed over constraints,
  rounded, then `100 * (max + min - s) / max`.
- NodeResourcesFit LeastAllocated (1): noderesources/least_allocated.go
  `(capacity - requested) * 100 / capacity`, cpu and memory weight 1 each, on the non-zero
  requests (100m / 200MiB for a container without requests, pkg/scheduler/util).
- NodeResourcesBalancedAllocation (1): noderesources/balanced_allocation.go
  `(1 - |cpuFraction - memFraction| / 2) * 100` on the actual requests; skipped for
  best-effort pods.
- ImageLocality (1): imagelocality/image_locality.go: for each init and regular container whose
  image name (`:latest` appended when untagged) is in the node status,
  `size * nodesHavingImage / totalNodes`; summed and clamped to
  [23 MiB, 1000 MiB * containers], then `100 * (sum - 23 MiB) / (max - 23 MiB)`.
- InterPodAffinity (2) scores every node 0 for pods without inter-pod (anti)affinity: omitted.

Node sampling (pkg/scheduler/schedule_one.go): `numFeasibleNodesToFind` (all nodes below 100;
else `percentageOfNodesToScore`, adaptive `50 - nodes/125` with a 5% floor and at least 100),
filtering from a round-robin start index over the zone-interleaved node list
(pkg/scheduler/backend/cache/node_tree.go), a single feasible node is taken without scoring,
and `selectHost` picks uniformly among the top scores (reservoir sampling; here a seeded RNG).

The `plugin` policy replaces ImageLocality by LayerLocality: the bytes of the pod's layers that
the node status shows, with the same thresholds and weight (the forked-scheduler approach).
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.core.layers import Platform
from webhook.core.nodes import Taint
from webhook.core.objects import HOSTNAME_LABEL
from webhook.core.tolerations import tolerates
from webhook.sim.formulas import (
    balanced_score,
    default_normalize,
    image_locality_priority,
    least_requested_score,
    node_selector_term_matches,
    normalized_image_name,
    num_feasible_nodes_to_find,
    round_half_away,
    scaled_image_score,
    spread_normalize,
)
from webhook.sim.workload import parse_bytes, parse_cpu
from webhook.sim.world import (
    DEFAULT_MEMORY,
    DEFAULT_MILLI_CPU,
    ZONE_LABEL,
    NodeState,
    World,
)

UNSCHEDULABLE_TAINT = Taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
SYSTEM_DEFAULT_CONSTRAINTS = ((HOSTNAME_LABEL, 3), (ZONE_LABEL, 5))
SPREAD_OWNER_KINDS = frozenset({"ReplicaSet", "StatefulSet", "ReplicationController"})

DEFAULT_WEIGHTS: Mapping[str, int] = {
    "TaintToleration": 3,
    "NodeAffinity": 2,
    "PodTopologySpread": 2,
    "NodeResourcesFit": 1,
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
}


@dataclass(frozen=True, slots=True)
class PodView:
    """What the scheduler reads from a Pod object (the patched one for the webhook)."""

    name: str
    namespace: str
    images: tuple[str, ...]  # init + regular containers, normalizedImageName applied
    cpu: int  # millicores, actual requests
    memory: int
    nz_cpu: int  # non-zero requests
    nz_memory: int
    tolerations: tuple[Mapping[str, Any], ...]
    node_selector: Mapping[str, str]
    required: tuple[Mapping[str, Any], ...] | None  # nodeSelectorTerms, None: no requirement
    preferred: tuple[tuple[int, Mapping[str, Any]], ...]
    owner: str | None  # the controller ownerReference's uid
    # The owner the system default spreading counts: a ReplicaSet, StatefulSet or
    # ReplicationController (the default selector comes from those and Services; Jobs: none).
    spread_owner: str | None
    # The pod's layers (digest -> size) per node platform, set by the simulation: what the
    # layer-aware scores (`plugin`, `oracle`, `greedy`) need; the stock profile ignores it.
    layers: Mapping[Platform, Mapping[str, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, pod: Mapping[str, Any],
           layers: Mapping[Platform, Mapping[str, int]] | None = None) -> PodView:
        metadata = pod.get("metadata") or {}
        spec = pod.get("spec") or {}
        containers = list(spec.get("containers") or [])
        init = list(spec.get("initContainers") or [])
        cpu = mem = nz_cpu = nz_mem = 0
        for c in containers:
            req = (c.get("resources") or {}).get("requests") or {}
            c_cpu = parse_cpu(req["cpu"]) if "cpu" in req else 0
            c_mem = parse_bytes(req["memory"]) if "memory" in req else 0
            cpu, mem = cpu + c_cpu, mem + c_mem
            nz_cpu += c_cpu or DEFAULT_MILLI_CPU
            nz_mem += c_mem or DEFAULT_MEMORY
        for c in init:  # resource.PodRequests: max(sum(containers), each init container)
            req = (c.get("resources") or {}).get("requests") or {}
            cpu = max(cpu, parse_cpu(req["cpu"]) if "cpu" in req else 0)
            mem = max(mem, parse_bytes(req["memory"]) if "memory" in req else 0)
        affinity = ((spec.get("affinity") or {}).get("nodeAffinity")) or {}
        required_doc = affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
        required = (tuple(required_doc.get("nodeSelectorTerms") or [])
                    if isinstance(required_doc, Mapping) else None)
        preferred = tuple(
            (int(t["weight"]), t.get("preference") or {})
            for t in affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []
        )
        refs = [o for o in metadata.get("ownerReferences") or [] if isinstance(o, Mapping)]
        controller = next((o for o in refs if o.get("controller") is True), None)
        return cls(
            name=str(metadata.get("name", "")),
            namespace=str(metadata.get("namespace", "default")),
            images=tuple(normalized_image_name(str(c.get("image", ""))) for c in init + containers),
            cpu=cpu, memory=mem, nz_cpu=nz_cpu, nz_memory=nz_mem,
            tolerations=tuple(spec.get("tolerations") or []),
            node_selector=dict(spec.get("nodeSelector") or {}),
            required=required,
            preferred=preferred,
            owner=str(controller.get("uid")) if controller else None,
            spread_owner=str(controller.get("uid"))
            if controller and controller.get("kind") in SPREAD_OWNER_KINDS else None,
            layers=dict(layers or {}),
        )


# -- the scheduler ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Profile:
    weights: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    percentage_of_nodes_to_score: int = 0  # 0: adaptive (the default)
    layer_locality: bool = False  # True: ImageLocality replaced by LayerLocality (`plugin`)


@dataclass(frozen=True, slots=True)
class Result:
    node: str | None
    feasible: int  # feasible nodes found (in the sample)
    scores: Mapping[str, int]  # total weighted score per scored node


class Scheduler:
    def __init__(self, world: World, profile: Profile = Profile(), seed: int = 0) -> None:
        self.world = world
        self.profile = profile
        self.rng = random.Random(seed)
        self.order = _zone_interleaved(world.nodes.values())
        self.next_start = 0

    # Filters -----------------------------------------------------------------------------

    def fits(self, pod: PodView, node: NodeState) -> bool:
        if node.spec.unschedulable and not any(
            tolerates(t, UNSCHEDULABLE_TAINT) for t in pod.tolerations
        ):
            return False
        for taint in node.taints:
            if taint.effect in ("NoSchedule", "NoExecute") and not any(
                tolerates(t, taint) for t in pod.tolerations
            ):
                return False
        if not self.matches_required(pod, node):
            return False
        if len(node.pods) + 1 > node.spec.max_pods:
            return False
        if pod.cpu > 0 and pod.cpu > node.spec.cpu_milli - node.req_cpu:
            return False
        return not (pod.memory > 0 and pod.memory > node.spec.memory - node.req_mem)

    @staticmethod
    def matches_required(pod: PodView, node: NodeState) -> bool:
        for key, value in pod.node_selector.items():
            if node.labels.get(key) != value:
                return False
        if pod.required is None:
            return True
        return any(node_selector_term_matches(t, node) for t in pod.required)

    def find_feasible(self, pod: PodView, sample: bool = True) -> list[NodeState]:
        """schedule_one.go findNodesThatPassFilters: stop at numFeasibleNodesToFind."""
        nodes = self.order
        n = len(nodes)
        want = num_feasible_nodes_to_find(n, self.profile.percentage_of_nodes_to_score) \
            if sample else n
        feasible: list[NodeState] = []
        processed = 0
        for i in range(n):
            node = nodes[(self.next_start + i) % n]
            processed += 1
            if self.fits(pod, node):
                feasible.append(node)
                if len(feasible) >= want:
                    break
        if sample:
            self.next_start = (self.next_start + processed) % n if n else 0
        return feasible

    # Scores ------------------------------------------------------------------------------

    def plugin_scores(self, pod: PodView, nodes: Sequence[NodeState]) -> dict[str, list[int]]:
        """Normalised (unweighted) score per plugin, aligned with `nodes`."""
        out: dict[str, list[int]] = {}
        out["TaintToleration"] = default_normalize(
            [self._intolerable_prefer_no_schedule(pod, n) for n in nodes], reverse=True)
        affinity = [sum(w for w, term in pod.preferred if node_selector_term_matches(term, n))
                    for n in nodes]
        out["NodeAffinity"] = default_normalize(affinity)
        out["PodTopologySpread"] = self._spread(pod, nodes)
        out["NodeResourcesFit"] = [
            (least_requested_score(n.nz_cpu + pod.nz_cpu, n.spec.cpu_milli)
             + least_requested_score(n.nz_mem + pod.nz_memory, n.spec.memory)) // 2
            for n in nodes
        ]
        if pod.cpu == 0 and pod.memory == 0:
            out["NodeResourcesBalancedAllocation"] = [0] * len(nodes)
        else:
            out["NodeResourcesBalancedAllocation"] = [
                balanced_score((n.req_cpu + pod.cpu) / n.spec.cpu_milli,
                               (n.req_mem + pod.memory) / n.spec.memory)
                for n in nodes
            ]
        containers = len(pod.images)
        if self.profile.layer_locality:
            out["ImageLocality"] = [
                image_locality_priority(sum(
                    s for d, s in pod.layers.get(n.platform, {}).items() if d in n.status_layers
                ), containers)
                for n in nodes
            ]
        else:
            total = len(self.world.nodes)
            counts = self.world.image_nodes
            out["ImageLocality"] = [
                image_locality_priority(sum(
                    scaled_image_score(n.status_names[name], counts[name], total)
                    for name in pod.images if name in n.status_names), containers)
                for n in nodes
            ]
        return out

    def total_scores(self, pod: PodView, nodes: Sequence[NodeState]) -> list[int]:
        per_plugin = self.plugin_scores(pod, nodes)
        totals = [0] * len(nodes)
        for plugin, scores in per_plugin.items():
            weight = self.profile.weights.get(plugin, 0)
            for i, s in enumerate(scores):
                totals[i] += weight * s
        return totals

    def _intolerable_prefer_no_schedule(self, pod: PodView, node: NodeState) -> int:
        tolerations = [t for t in pod.tolerations
                       if (t.get("effect") or "") in ("", "PreferNoSchedule")]
        return sum(1 for taint in node.taints if taint.effect == "PreferNoSchedule"
                   and not any(tolerates(t, taint) for t in tolerations))

    def _spread(self, pod: PodView, nodes: Sequence[NodeState]) -> list[int]:
        if pod.spread_owner is None:  # no default selector (not owned by a ReplicaSet): Skip
            return [0] * len(nodes)
        owner = pod.spread_owner
        weights = []
        for key, _ in SYSTEM_DEFAULT_CONSTRAINTS:
            size = len(nodes) if key == HOSTNAME_LABEL else len(
                {n.labels[key] for n in nodes if key in n.labels})
            weights.append(math.log(size + 2))
        zones = {n.labels[ZONE_LABEL] for n in nodes if ZONE_LABEL in n.labels}
        zone_counts = dict.fromkeys(zones, 0)
        for n in self.world.nodes.values():
            zone = n.labels.get(ZONE_LABEL)
            if zone in zone_counts and self.matches_required(pod, n):
                zone_counts[zone] += n.owner_counts.get(owner, 0)
        raw = []
        for n in nodes:
            score = 0.0
            for (key, max_skew), weight in zip(SYSTEM_DEFAULT_CONSTRAINTS, weights, strict=True):
                if key not in n.labels:
                    continue
                count = n.owner_counts.get(owner, 0) if key == HOSTNAME_LABEL \
                    else zone_counts[n.labels[key]]
                score += count * weight + (max_skew - 1)
            raw.append(int(round_half_away(score)))
        return spread_normalize(raw)

    # The cycle ---------------------------------------------------------------------------

    def schedule(self, pod: PodView) -> Result:
        feasible = self.find_feasible(pod)
        if not feasible:
            return Result(None, 0, {})
        if len(feasible) == 1:
            return Result(feasible[0].name, 1, {})
        totals = self.total_scores(pod, feasible)
        return Result(self.select_host(feasible, totals), len(feasible),
                      {n.name: s for n, s in zip(feasible, totals, strict=True)})

    def select_host(self, nodes: Sequence[NodeState], totals: Sequence[int]) -> str:
        """schedule_one.go selectHost: uniform among the highest scores (reservoir)."""
        best = max(totals)
        top = [n.name for n, s in zip(nodes, totals, strict=True) if s == best]
        return top[0] if len(top) == 1 else self.rng.choice(top)


def _zone_interleaved(nodes: Iterable[NodeState]) -> list[NodeState]:
    """node_tree.go list(): one node per zone in turn, zones in order of appearance."""
    zones: dict[str, list[NodeState]] = {}
    for node in nodes:
        zones.setdefault(node.labels.get(ZONE_LABEL, ""), []).append(node)
    out: list[NodeState] = []
    queues = list(zones.values())
    i = 0
    while any(queues):
        for q in queues:
            if i < len(q):
                out.append(q[i])
        i += 1
        if all(i >= len(q) for q in queues):
            break
    return out
