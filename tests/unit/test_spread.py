"""The spread guard's inputs: maxSkew from the pod, and which nodes one more sibling keeps
within it."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.spread import DEFAULT_HOST_MAX_SKEW, guard_limit, host_max_skew, spread_state

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def constrained(*constraints: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"topologySpreadConstraints": list(constraints)}}


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        ({}, DEFAULT_HOST_MAX_SKEW),
        (constrained({"topologyKey": HOST, "maxSkew": 1}), 1),
        (constrained({"topologyKey": HOST, "maxSkew": 2}, {"topologyKey": HOST, "maxSkew": 5}), 2),
        # Only a zone constraint: the scheduler applies none per host; we keep the default guard.
        (constrained({"topologyKey": ZONE, "maxSkew": 1}), DEFAULT_HOST_MAX_SKEW),
        (constrained({"topologyKey": HOST, "maxSkew": 0}), DEFAULT_HOST_MAX_SKEW),  # invalid
        (constrained({"topologyKey": HOST, "maxSkew": "2"}), DEFAULT_HOST_MAX_SKEW),
        ({"spec": {"topologySpreadConstraints": "bogus"}}, DEFAULT_HOST_MAX_SKEW),
    ],
)
def test_host_max_skew(pod: dict[str, Any], expected: int) -> None:
    assert host_max_skew(pod) == expected


@pytest.mark.parametrize(("skew", "limit"), [(1, 1), (2, 1), (3, 2), (5, 4)])
def test_the_guard_keeps_one_pod_of_headroom_under_the_schedulers_skew(
    skew: int, limit: int
) -> None:
    assert guard_limit(skew) == limit


@pytest.mark.parametrize(
    ("counts", "total", "skew", "floor", "extra", "excluded"),
    [
        # Five candidates, siblings on two: the floor is 0 (empty nodes remain). With maxSkew 3
        # the guard prefers a node only while one more sibling keeps count + 1 - floor <= 2.
        ({"a": 3, "b": 1}, 5, 3, 0, {"b": 1}, {"a"}),
        ({"a": 2, "b": 1}, 5, 3, 0, {"b": 1}, {"a"}),
        ({"a": 1, "b": 1}, 5, 3, 0, {"a": 1, "b": 1}, set()),
        # Every candidate holds siblings: the floor rises with the least loaded.
        ({"a": 3, "b": 2, "c": 2}, 3, 3, 2, {"a": 1}, set()),
        ({"a": 4, "b": 2, "c": 2}, 3, 3, 2, {}, {"a"}),
        # maxSkew 1 (no headroom below it): a node with one sibling is full while any
        # candidate is empty.
        ({"a": 1}, 2, 1, 0, {}, {"a"}),
        ({}, 4, 3, 0, {}, set()),
    ],
)
def test_spread_state(counts: dict[str, int], total: int, skew: int, floor: int,
                      extra: dict[str, int], excluded: set[str]) -> None:
    state = spread_state(counts, list(counts), total, skew)
    assert (state.floor, dict(state.extra), set(state.excluded)) == (floor, extra, excluded)
    for name, count in counts.items():  # the rule, restated with the scheduler's skew
        assert (name in state.excluded) == (count + 1 - floor > max(1, skew - 1))


def test_nodes_that_cannot_take_the_pod_do_not_count() -> None:
    # "c" is cordoned or tainted for this pod: its siblings neither raise the floor nor count.
    state = spread_state({"a": 3, "b": 3, "c": 0}, ["a", "b"], 2, 3)
    assert state.floor == 3 and not state.excluded and "c" not in state.counts
