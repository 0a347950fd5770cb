"""One pod's decision: its layers against the inventory -> weighted terms -> JSON Patch. Pure.

The Mutator (mutate.py) gathers the inputs (layers within the time budget, the inventory
snapshot, the pod's siblings); this module decides with no I/O, and `explain` reads the same
`Decision` to show why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from webhook.admission import PatchOperation
from webhook.affinity import PreferredTerm, affinity_patch
from webhook.inventory.index import LayerIndex
from webhook.inventory.nodes import NodeInfo
from webhook.layers import ImageLayers, Platform
from webhook.pods import pod_tolerations
from webhook.reasons import Reason
from webhook.scoring import ScoringPolicy, TermPlan, plan_terms, spread_weight, weight_for
from webhook.spread import SpreadState, spread_state

DECISION_VERSION = 2
TOP_NODES_IN_DECISION = 3


@dataclass(frozen=True, slots=True)
class NodeScore:
    """A node named in the patch: the bytes of the pod it holds, its weight, siblings."""

    node: NodeInfo
    bytes_present: int
    weight: int
    siblings: int = 0


@dataclass(frozen=True, slots=True)
class ScoredGroup:
    """Candidate nodes (bitset `mask` over the index) alike for this pod."""

    bytes_present: int
    extra_siblings: int  # above the least-loaded candidate; -1: excluded for spread
    weight: int
    mask: int


@dataclass(frozen=True, slots=True)
class Siblings:
    """The pod's workload (controller uid) and its pods per node, bound + pending."""

    owner: str
    counts: Mapping[str, int]
    max_skew: int


@dataclass(frozen=True, slots=True)
class Decision:
    reason: Reason  # Reason.NONE: patched
    terms: tuple[PreferredTerm, ...] = ()
    patch: tuple[PatchOperation, ...] = ()
    preferred: tuple[NodeScore, ...] = ()  # nodes named in the terms, best first
    pod_bytes: int = 0
    candidates: int = 0  # bitset of the nodes that can take the pod
    groups: tuple[ScoredGroup, ...] = field(default=(), repr=False)
    spread: SpreadState | None = None
    left_out: int = 0  # nodes that hold enough bytes but were left out for spread

    @property
    def patched(self) -> bool:
        return self.reason is Reason.NONE

    @property
    def top(self) -> NodeScore | None:
        return self.preferred[0] if self.preferred else None


def pod_layers(
    images: Sequence[ImageLayers], platforms: Sequence[Platform]
) -> dict[Platform, dict[str, int]]:
    """Per platform, the pod's distinct layers (digest -> compressed size)."""
    result: dict[Platform, dict[str, int]] = {}
    for platform in platforms:
        layers: dict[str, int] = {}
        for image in images:
            manifest = image.for_platform(platform)
            if manifest is not None:
                for layer in manifest.layers:
                    layers[layer.digest] = layer.size
        if layers:
            result[platform] = layers
    return result


def decide(
    pod: Mapping[str, Any],
    images: Sequence[ImageLayers],
    index: LayerIndex,
    policy: ScoringPolicy,
    salt: str,
    siblings: Siblings | None = None,
    token: str = "",
    stand_ins: int = 0,
) -> Decision:
    """Terms and patch for a pod whose images resolved to `images`.

    `salt` spreads pods over groups too large to name whole; `siblings` (live inventories)
    turns on the spread guard; `token` identifies this decision in the annotation so that a
    later bind can be matched to it (controller-made pods have no name yet); `stand_ins`
    counts images scored from another tag of their repository (said in the annotation)."""
    layers = pod_layers(images, list(index.platforms()))
    if not layers:
        return Decision(Reason.NO_PLATFORM)
    candidates = index.candidates(pod_tolerations(pod))
    if not candidates:
        return Decision(Reason.NO_NODES)
    pod_bytes = max(sum(sizes.values()) for sizes in layers.values())
    spread = _spread(siblings, index, candidates)
    groups = _score(index.overlap_groups(layers, candidates), spread, index, policy, pod_bytes)
    plan = plan_terms([(g.weight, g.bytes_present, g) for g in groups], policy)
    if isinstance(plan, Reason):
        return Decision(Reason(plan), pod_bytes=pod_bytes, candidates=candidates,
                        groups=tuple(groups), spread=spread)
    left_out = sum(g.mask.bit_count() for g in groups
                   if g.extra_siblings < 0 and weight_for(g.bytes_present, policy, pod_bytes))
    terms, chosen = _spend(plan, index, policy.max_nodes, salt, spread)
    tie_break = _tie_break(plan, chosen, spread, policy)
    if tie_break is not None:
        terms.append(tie_break)
    if plan.baseline_weight:  # the first level always gets nodes: its weight is the top
        terms.append(PreferredTerm(weight=plan.baseline_weight, hostnames=()))
    candidate_count = candidates.bit_count()
    mean_bytes = sum(g.bytes_present * g.mask.bit_count() for g in groups) // candidate_count
    annotation = decision_annotation(pod_bytes, chosen, spread, left_out, token, stand_ins,
                                     mean_bytes, len(terms))
    patch = affinity_patch(pod, terms, annotation)
    return Decision(Reason.NONE, tuple(terms), tuple(patch), tuple(chosen), pod_bytes,
                    candidates, tuple(groups), spread, left_out)


def _spread(siblings: Siblings | None, index: LayerIndex, candidates: int) -> SpreadState | None:
    if siblings is None:
        return None
    counted = [name for name in siblings.counts if index.in_mask(name, candidates)]
    return spread_state(siblings.counts, counted, candidates.bit_count(), siblings.max_skew)


def _score(
    groups: Sequence[Any],
    spread: SpreadState | None,
    index: LayerIndex,
    policy: ScoringPolicy,
    pod_bytes: int,
) -> list[ScoredGroup]:
    """Weights per overlap group, the groups split where siblings make nodes differ."""
    classes: dict[int, int] = {}  # extra siblings (-1: excluded) -> node bitset
    if spread is not None:
        for name in spread.excluded:
            classes[-1] = classes.get(-1, 0) | index.bit(name)
        for name, extra in spread.extra.items():
            classes[extra] = classes.get(extra, 0) | index.bit(name)
    scored: list[ScoredGroup] = []
    for group in groups:
        weight = weight_for(group.bytes_present, policy, pod_bytes)
        rest = group.mask
        for extra, mask in sorted(classes.items()):
            inside = rest & mask
            if inside:
                rest ^= inside
                adjusted = 0 if extra < 0 else spread_weight(weight, extra, policy)
                scored.append(ScoredGroup(group.bytes_present, extra, adjusted, inside))
        if rest:
            scored.append(ScoredGroup(group.bytes_present, 0, weight, rest))
    # Most bytes first; among equal bytes the emptier nodes first (they get picked first).
    scored.sort(key=lambda g: (-g.bytes_present, g.extra_siblings < 0, g.extra_siblings))
    return scored


def _spend(
    plan: TermPlan[ScoredGroup],
    index: LayerIndex,
    budget: int,
    salt: str,
    spread: SpreadState | None,
) -> tuple[list[PreferredTerm], list[NodeScore]]:
    """Hostnames per weight level, best first, at most `budget` in all."""
    counts = spread.counts if spread is not None else {}
    # Terms name hostname labels, which nodes may share: a label an excluded node carries would
    # prefer that node too.
    blocked = {node.hostname for name in (spread.excluded if spread is not None else ())
               if (node := index.node(name)) is not None}
    terms: list[PreferredTerm] = []
    chosen: list[NodeScore] = []
    for level in plan.levels:
        hostnames: dict[str, None] = {}
        for group in level.members:
            left = budget - len(chosen)
            for node in index.pick(group.mask, left, salt):
                if node.hostname in blocked:
                    continue
                chosen.append(NodeScore(node, group.bytes_present, level.weight,
                                        counts.get(node.name, 0)))
                hostnames.setdefault(node.hostname)
        if hostnames:
            terms.append(PreferredTerm(weight=level.weight, hostnames=tuple(sorted(hostnames))))
        if len(chosen) >= budget:
            break
    return terms, chosen


def _tie_break(
    plan: TermPlan[ScoredGroup],
    chosen: Sequence[NodeScore],
    spread: SpreadState | None,
    policy: ScoringPolicy,
) -> PreferredTerm | None:
    """With siblings in play the pending entry is counted on the first node named; when the
    best group holds several equal nodes the scheduler could take any of them, and the counts
    stay wrong until the watch shows the bind. A term of `spread_step` on that node alone
    nudges the scheduler to it (simulator: with the guard's headroom, no seed's heat above the
    oracle's; without this term, 3 of 10). Only equal nodes are split: no node holding fewer
    bytes gains on one holding more, so weights stay monotonic in bytes."""
    if spread is None or not policy.spread_step or not chosen:
        return None
    if plan.levels[0].members[0].mask.bit_count() < 2:
        return None
    return PreferredTerm(weight=policy.spread_step, hostnames=(chosen[0].node.hostname,))


def decision_annotation(
    pod_bytes: int,
    chosen: Sequence[NodeScore],
    spread: SpreadState | None,
    left_out: int,
    token: str,
    stand_ins: int = 0,
    mean_bytes: int = 0,
    terms: int = 0,
) -> str:
    """The short JSON the pod carries: what was preferred and why, and an id for the bind."""
    top: list[dict[str, Any]] = []
    for score in chosen[:TOP_NODES_IN_DECISION]:
        entry: dict[str, Any] = {"node": score.node.name, "bytes": score.bytes_present}
        if spread is not None:
            entry["siblings"] = score.siblings
        top.append(entry)
    doc: dict[str, Any] = {"v": DECISION_VERSION}
    if token:
        doc["id"] = token
    # meanBytes: what a placement blind to layers would find on average (the candidates' mean
    # bytes present): the baseline of the bytes-avoided estimate when the pod is seen bound.
    doc.update(podBytes=pod_bytes, meanBytes=mean_bytes, preferredNodes=len(chosen), top=top)
    if terms:
        # terms: how many preferred terms were appended (the last ones of the list): a bind
        # is classified against these only, never against terms the pod brought itself.
        doc["terms"] = terms
    if spread is not None:
        doc["spread"] = {"maxSkew": spread.max_skew, "leftOut": left_out}
    if stand_ins:
        doc["standIns"] = stand_ins  # images scored from their repository's previous tag
    return orjson.dumps(doc).decode()
