"""Bytes already present on a node -> preferred-term weight. Pure.

Calibration (docs/how-it-works.md): the NodeAffinity plugin max-normalises the summed weights
of matching preferred terms per scheduling cycle, so only ratios survive. A baseline term that
matches every node, with weight `100 - top`, pins the best node at 100 and a node holding
nothing at `100 - top`: the score gap is then `top`, an absolute value.

The weight is `max_weight` times a blend of two fractions of what a node saves:
- absolute: `min(bytes, full_bytes) / full_bytes` (full_bytes defaults to 1000 MiB, the
  ImageLocality per-container cap): a small pull earns a small weight;
- share: `bytes / pod_bytes`, the part of this pod's pull the node saves.
`share` (0..1) mixes them. Zero below `min_bytes` (23 MiB, the ImageLocality floor), so small
savings never move a pod. For one pod the weight is monotonic in bytes present.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Generic, NamedTuple, TypeVar

from webhook.core.reasons import Reason

MiB = 1 << 20
# The decision annotation and the baseline term alone take up to ~600 bytes with long names:
# below this a budget would leave most pods unpatched.
MIN_PATCH_BYTES = 1024
T = TypeVar("T")
_first = itemgetter(0)


@dataclass(frozen=True, slots=True)
class ScoringPolicy:
    min_bytes: int = 23 * MiB
    full_bytes: int = 1000 * MiB
    max_weight: int = 100  # weight of a node saving the whole fraction
    share: float = 1.0  # 1: share of the pod's pull; 0: absolute bytes up to full_bytes
    # > 0: weights from the bytes a node lacks beyond the best candidate, in absolute bytes
    # (`lack_weight`): a node lacking this many more than the best is weighed as one holding
    # nothing. 0: `share` above.
    lack_bytes: int = 23 * MiB
    baseline: bool = True
    max_terms: int = 10  # weighted terms per pod, baseline not included
    max_nodes: int = 100  # hostnames over all terms of one pod
    spread_step: int = 10  # weight taken off per sibling above the least-loaded candidate
    max_patch_bytes: int = 4096  # what a patch may add to the pod (it lives in etcd)
    # Live mode: nodes where the pod's siblings run or were steered hold (or will) its
    # layers; a burst with no warm node left gets a seed node (decide.py, "co-location").
    colocate: bool = True
    # Webhook replicas serving the cluster (the Deployment's `replicas`). They see each other's
    # reviews through the pod watch; only while a replica's watch is behind (its own reviews
    # unseen there) does it prefer a node for 1 / replicas of what it could (guard_limit).
    replicas: int = 1
    # Layer labels (layerlabels.py, written by the node agent): at most this many preferred
    # terms per pod match a label instead of naming hostnames (0: never), each for a layer
    # that at least `label_min_nodes` candidates carry with a live agent (fewer are named,
    # which is exact and cheaper); at most `max_not_in` hostnames are kept out of the label
    # terms (nodes the spread guard closed, stale labels) before a pod falls back to names.
    # With label terms, hostnames are only for what labels leave out (siblings, a seed,
    # nodes without an agent, layers too few nodes carry for a label): at most
    # `label_max_nodes`, each group named whole or not at all (under the scheduler's sample,
    # part of a large group is mostly missed anyway). 16: at 5,000 nodes, 32 names placed no
    # better for up to twice the bytes on every pod event (docs/performance.md, run 4).
    max_label_terms: int = 4
    label_min_nodes: int = 32
    max_not_in: int = 8
    label_max_nodes: int = 16

    def __post_init__(self) -> None:
        if not 1 <= self.max_weight <= 100:
            raise ValueError("max_weight must be within 1..100")
        if self.min_bytes < 0 or self.full_bytes <= 0 or self.lack_bytes < 0:
            raise ValueError("min_bytes and lack_bytes must be >= 0 and full_bytes > 0")
        if self.max_terms < 1 or self.max_nodes < 1:
            raise ValueError("max_terms and max_nodes must be >= 1")
        if not 0.0 <= self.share <= 1.0:
            raise ValueError("share must be within 0..1")
        if not 0 <= self.spread_step <= 99:
            raise ValueError("spread_step must be within 0..99")
        if self.replicas < 1:
            raise ValueError("replicas must be >= 1")
        if not 0 <= self.max_label_terms <= 10:
            raise ValueError("max_label_terms must be within 0..10")
        if self.label_min_nodes < 2 or self.max_not_in < 0 or self.label_max_nodes < 0:
            raise ValueError("label_min_nodes must be >= 2, max_not_in and label_max_nodes "
                             ">= 0")
        if self.max_patch_bytes < MIN_PATCH_BYTES:
            raise ValueError(f"max_patch_bytes must be >= {MIN_PATCH_BYTES}")


def weight_for(bytes_present: int, policy: ScoringPolicy, pod_bytes: int = 0,
               best: int = 0) -> int:
    """0 below the floor, else ceil(max_weight * blend), at least 1: monotonic in bytes.
    `best`: the most of the pod's bytes any candidate holds (for `lack_bytes`)."""
    if bytes_present <= 0 or bytes_present < policy.min_bytes:
        return 0
    if policy.lack_bytes and best:
        return lack_weight(bytes_present, best, policy)
    if policy.share == 1.0 and pod_bytes > 0:
        # The blend below with share 1: 1.0 * s + 0.0 * a is s exactly, in floating point too.
        fraction = min(1.0, bytes_present / pod_bytes)
        return max(1, min(policy.max_weight, math.ceil(policy.max_weight * fraction - 1e-9)))
    absolute = min(bytes_present, policy.full_bytes) / policy.full_bytes
    share = min(1.0, bytes_present / pod_bytes) if pod_bytes > 0 else absolute
    fraction = policy.share * share + (1.0 - policy.share) * absolute
    # The epsilon keeps exact products (100 * 0.25) from rounding up past their value.
    return max(1, min(policy.max_weight, math.ceil(policy.max_weight * fraction - 1e-9)))


def lack_weight(bytes_present: int, best: int, policy: ScoringPolicy) -> int:
    """Linear in bytes, `max_weight` per `lack_bytes`, anchored so that the best node gets
    `max_weight * min(1, best / lack_bytes)`: the NodeAffinity score a node loses against the
    best one (the baseline term makes the gap absolute) is proportional to the bytes it lacks
    beyond it, up to `lack_bytes`, whatever the pod's size. So a difference worth a pull
    outweighs the scheduler's spreading score, and a small one does not."""
    low = max(0, best - policy.lack_bytes)
    fraction = min(1.0, (bytes_present - low) / policy.lack_bytes)
    if fraction <= 0:
        return 0
    return max(1, min(policy.max_weight, math.ceil(policy.max_weight * fraction - 1e-9)))


def linear_weight(bytes_present: int, policy: ScoringPolicy, pod_bytes: int) -> float:
    """`weight_for` without its floor, rounding and cap: linear in bytes up to `full_bytes`,
    so that the weights of disjoint parts of a pod add up (label terms, labelcover.py)."""
    absolute = min(bytes_present, policy.full_bytes) / policy.full_bytes
    share = bytes_present / pod_bytes if pod_bytes > 0 else absolute
    return policy.max_weight * (policy.share * share + (1.0 - policy.share) * absolute)


def spread_weight(weight: int, extra_siblings: int, policy: ScoringPolicy) -> int:
    """A node's weight once it holds `extra_siblings` more of the pod's siblings than the
    least-loaded candidate: lowered by `spread_step` each, never below 1 (it still saves
    bytes). Ties between equal holders then go to the emptier one."""
    if weight <= 0 or extra_siblings <= 0:
        return weight
    return max(1, weight - policy.spread_step * extra_siblings)


class WeightLevel(NamedTuple, Generic[T]):
    """One preferred term: every member gets `weight` (most bytes first). A NamedTuple, as
    TermPlan: a review builds several (a frozen dataclass's __init__ costs four times as
    much)."""

    weight: int
    members: tuple[T, ...]


class TermPlan(NamedTuple, Generic[T]):
    levels: tuple[WeightLevel[T], ...]
    baseline_weight: int  # 0: no baseline term

    @property
    def top_weight(self) -> int:
        return self.levels[0].weight


def plan_terms(
    scored: Sequence[tuple[int, int, T]], policy: ScoringPolicy
) -> TermPlan[T] | Reason:
    """Terms for `(weight, bytes_present, member)` triples covering every candidate node.

    Returns the plan, or why there is nothing to express: BELOW_THRESHOLD (no positive
    weight), NO_PREFERENCE (every candidate would get the same weight)."""
    by_weight: dict[int, list[tuple[int, T]]] = {}
    for weight, bytes_present, member in scored:
        by_weight.setdefault(weight, []).append((bytes_present, member))
    positive = sorted((w for w in by_weight if w > 0), reverse=True)
    if not positive:
        return Reason.BELOW_THRESHOLD
    if len(by_weight) == 1:
        return Reason.NO_PREFERENCE
    levels: list[WeightLevel[T]] = []
    for w in positive[: policy.max_terms]:
        members = by_weight[w]
        # Most bytes first; the sort is stable (reverse too): equal bytes keep the caller's order.
        members.sort(key=_first, reverse=True)
        levels.append(WeightLevel(weight=w, members=tuple([m for _, m in members])))
    top = levels[0].weight
    baseline = 100 - top if policy.baseline and top < 100 else 0
    return TermPlan(levels=tuple(levels), baseline_weight=baseline)
