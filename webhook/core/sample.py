"""kube-scheduler's sample of feasible nodes (schedule_one.go numFeasibleNodesToFind), pure.

Above 100 nodes the scheduler stops filtering once it has found this many feasible nodes
(from a start that rolls on between pods) and scores only those; a preference for a node
outside the sample is not seen. The simulator emulates it (sim/scheduler.py); the decision
weighs whether a hostname is worth its bytes by the share of candidates the sample holds.
"""

from __future__ import annotations

MIN_FEASIBLE_NODES_TO_FIND = 100
MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND = 5


def num_feasible_nodes_to_find(num_all_nodes: int, percentage: int = 0) -> int:
    """schedule_one.go numFeasibleNodesToFind (`percentage` 0: adaptive, the default)."""
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND:
        return num_all_nodes
    if percentage == 0:
        percentage = 50 - num_all_nodes // 125
        percentage = max(percentage, MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    num = num_all_nodes * percentage // 100
    return max(num, MIN_FEASIBLE_NODES_TO_FIND)


def sampled_share(nodes: int, candidates: int, percentage: int = 0) -> float:
    """The share of `candidates` (of a cluster of `nodes`) one scheduling cycle scores, at
    most 1, with the scheduler's default (adaptive) percentage unless told otherwise."""
    if candidates <= 0:
        return 1.0
    return min(1.0, num_feasible_nodes_to_find(nodes, percentage) / candidates)
