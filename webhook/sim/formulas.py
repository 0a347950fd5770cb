"""kube-scheduler's formulas, pure (sources cited in scheduler.py; unit-tested against the Go
source in tests/unit/test_sim_scheduler.py)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from webhook.core.sample import (
    MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND as MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND,
)
from webhook.core.sample import MIN_FEASIBLE_NODES_TO_FIND as MIN_FEASIBLE_NODES_TO_FIND
from webhook.core.sample import num_feasible_nodes_to_find as num_feasible_nodes_to_find
from webhook.sim.world import NodeState

MAX_NODE_SCORE = 100
MiB = 1 << 20
MIN_THRESHOLD = 23 * MiB  # image_locality.go minThreshold
MAX_CONTAINER_THRESHOLD = 1000 * MiB  # maxContainerThreshold


def normalized_image_name(name: str) -> str:
    """image_locality.go normalizedImageName: append `:latest` when there is no tag."""
    if name.rfind(":") <= name.rfind("/"):
        name += ":latest"
    return name


# -- formulas (pure, unit-tested against the Go source) --------------------------------------


def image_locality_priority(sum_scores: int, num_containers: int) -> int:
    """image_locality.go calculatePriority."""
    max_threshold = MAX_CONTAINER_THRESHOLD * max(1, num_containers)
    sum_scores = min(max(sum_scores, MIN_THRESHOLD), max_threshold)
    return MAX_NODE_SCORE * (sum_scores - MIN_THRESHOLD) // (max_threshold - MIN_THRESHOLD)


def scaled_image_score(size: int, num_nodes: int, total_nodes: int) -> int:
    """image_locality.go scaledImageScore: `int64(float64(size) * spread)`."""
    return int(float(size) * (num_nodes / total_nodes))


def least_requested_score(requested: int, capacity: int) -> int:
    if capacity == 0 or requested > capacity:
        return 0
    return (capacity - requested) * MAX_NODE_SCORE // capacity


def balanced_score(cpu_fraction: float, mem_fraction: float) -> int:
    std = abs(min(cpu_fraction, 1.0) - min(mem_fraction, 1.0)) / 2
    return int((1 - std) * MAX_NODE_SCORE)


def default_normalize(scores: list[int], reverse: bool = False) -> list[int]:
    """helper.DefaultNormalizeScore(MaxNodeScore, reverse, scores)."""
    top = max(scores, default=0)
    if top == 0:
        return [MAX_NODE_SCORE] * len(scores) if reverse else list(scores)
    out = [MAX_NODE_SCORE * s // top for s in scores]
    return [MAX_NODE_SCORE - s for s in out] if reverse else out


def spread_normalize(scores: list[int]) -> list[int]:
    """podtopologyspread/scoring.go NormalizeScore (no ignored nodes)."""
    if not scores:
        return []
    low, high = min(scores), max(scores)
    if high == 0:
        return [MAX_NODE_SCORE] * len(scores)
    return [MAX_NODE_SCORE * (high + low - s) // high for s in scores]


def node_selector_term_matches(term: Mapping[str, Any], node: NodeState) -> bool:
    """nodeaffinity.go: every expression of a term must match; an empty term matches none."""
    expressions = term.get("matchExpressions") or []
    fields = term.get("matchFields") or []
    if not expressions and not fields:
        return False
    for req in expressions:
        if not _requirement_matches(req, node.labels):
            return False
    for req in fields:
        if req.get("key") != "metadata.name":
            return False
        if not _requirement_matches(req, {"metadata.name": node.name}):
            return False
    return True


def _requirement_matches(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    key, op = req.get("key", ""), req.get("operator", "")
    values = req.get("values") or []
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and len(values) == 1:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def round_half_away(x: float) -> float:
    """Go math.Round: half away from zero."""
    return math.floor(x + 0.5) if x >= 0 else -math.floor(-x + 0.5)
