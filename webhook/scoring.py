"""Bytes already present on a node -> preferred-term weight. Pure.

Calibration (README "How it works"): the NodeAffinity plugin max-normalises the summed weights
of matching preferred terms per scheduling cycle, so only ratios survive. A baseline term that
matches every node, with weight `100 - top`, pins the best node at 100 and a node holding
nothing at `100 - top`: the score gap is then `top`, an absolute value proportional to the bytes
the best node saves. Weights are linear in bytes up to `full_bytes` (default 1000 MiB, the
ImageLocality per-container cap) and zero below `min_bytes` (default 23 MiB, its floor).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

MiB = 1 << 20
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class ScoringPolicy:
    min_bytes: int = 23 * MiB
    full_bytes: int = 1000 * MiB
    max_weight: int = 100  # weight of a node holding full_bytes or more
    baseline: bool = True
    max_terms: int = 10  # weighted terms per pod, baseline not included
    max_nodes: int = 100  # hostnames over all terms of one pod

    def __post_init__(self) -> None:
        if not 1 <= self.max_weight <= 100:
            raise ValueError("max_weight must be within 1..100")
        if self.min_bytes < 0 or self.full_bytes <= 0:
            raise ValueError("min_bytes must be >= 0 and full_bytes > 0")
        if self.max_terms < 1 or self.max_nodes < 1:
            raise ValueError("max_terms and max_nodes must be >= 1")


def weight_for(bytes_present: int, policy: ScoringPolicy) -> int:
    """0 below the floor, else ceil(max_weight * min(bytes, full) / full): monotonic, >= 1."""
    if bytes_present <= 0 or bytes_present < policy.min_bytes:
        return 0
    capped = min(bytes_present, policy.full_bytes)
    return max(1, -(-policy.max_weight * capped // policy.full_bytes))


@dataclass(frozen=True, slots=True)
class WeightLevel(Generic[T]):
    """One preferred term: every group in `members` gets `weight` (largest overlap first)."""

    weight: int
    members: tuple[T, ...]


@dataclass(frozen=True, slots=True)
class TermPlan(Generic[T]):
    levels: tuple[WeightLevel[T], ...]
    baseline_weight: int  # 0: no baseline term

    @property
    def top_weight(self) -> int:
        return self.levels[0].weight


def plan_terms(groups: Sequence[tuple[int, T]], policy: ScoringPolicy) -> TermPlan[T] | str:
    """Weights for `(bytes_present, group)` pairs covering every candidate node.

    Returns the plan, or the reason there is nothing to express: `below_threshold` (no node
    holds `min_bytes`), `no_preference` (every candidate would get the same weight)."""
    by_weight: dict[int, list[tuple[int, T]]] = {}
    for bytes_present, group in groups:
        by_weight.setdefault(weight_for(bytes_present, policy), []).append((bytes_present, group))
    positive = sorted((w for w in by_weight if w > 0), reverse=True)
    if not positive:
        return "below_threshold"
    if len(by_weight) == 1:
        return "no_preference"
    levels = tuple(
        WeightLevel(
            weight=w,
            members=tuple(g for _, g in sorted(by_weight[w], key=lambda item: -item[0])),
        )
        for w in positive[: policy.max_terms]
    )
    top = levels[0].weight
    baseline = 100 - top if policy.baseline and top < 100 else 0
    return TermPlan(levels=levels, baseline_weight=baseline)
