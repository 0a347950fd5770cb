"""The spread guard's inputs: maxSkew from the pod, and which nodes one more sibling keeps
within it."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    assert state.max_skew == skew and dict(state.counts) == counts


@pytest.mark.parametrize(
    ("counts", "skew", "unconfirmed", "replicas", "extra", "excluded"),
    [
        # Every review confirmed: no headroom, a node fills up to maxSkew itself (3 here:
        # a third sibling on "a" makes 3 - 0 = 3, a fourth would make 4).
        ({"a": 3, "b": 1}, 3, False, 1, {"b": 1}, {"a"}),
        ({"a": 2, "b": 1}, 3, False, 1, {"a": 2, "b": 1}, set()),
        # Two webhook replicas with unconfirmed reviews: each keeps to half of the
        # headroom-reduced limit, (5 - 1) // 2 = 2 here, and 1 with maxSkew 3.
        ({"a": 2, "b": 1}, 5, True, 2, {"b": 1}, {"a"}),
        ({"a": 2, "b": 1}, 3, True, 2, {}, {"a", "b"}),
        # Confirmed, the replicas make no difference: the counts are exact.
        ({"a": 2, "b": 1}, 3, False, 2, {"a": 2, "b": 1}, set()),
    ],
)
def test_spread_state_with_confirmed_reviews_and_replicas(
    counts: dict[str, int], skew: int, unconfirmed: bool, replicas: int,
    extra: dict[str, int], excluded: set[str],
) -> None:
    state = spread_state(counts, list(counts), 5, skew, unconfirmed, replicas)
    assert (state.floor, dict(state.extra), set(state.excluded)) == (0, extra, excluded)


COUNTS = st.dictionaries(st.sampled_from("abcdefg"), st.integers(0, 9), max_size=7)


@settings(max_examples=200)
@given(counts=COUNTS, empty=st.integers(0, 3), skew=st.integers(1, 7),
       unconfirmed=st.booleans(), replicas=st.integers(1, 3))
def test_spread_state_properties(counts: dict[str, int], empty: int, skew: int,
                                 unconfirmed: bool, replicas: int) -> None:
    """Properties, not the formula: the floor is the least loaded candidate's count (0 while
    one holds none); a node is excluded only if every node with as many siblings or more is;
    the least loaded node is never excluded; the others are `extra` by their distance to the
    floor; a larger maxSkew, confirmed reviews and fewer replicas never exclude more. The
    `empty` candidates have no entry in `counts`; others may have 0 (no sibling either)."""
    candidates = [*counts, *(f"empty-{k}" for k in range(empty))]
    total = len(candidates)

    def state_of(skew: int = skew, unconfirmed: bool = unconfirmed,
                 replicas: int = replicas) -> frozenset[str]:
        return spread_state(counts, candidates, total, skew, unconfirmed, replicas).excluded

    state = spread_state(counts, candidates, total, skew, unconfirmed, replicas)
    assert set(state.closed_by) == state.excluded  # each closed node says why
    assert dict(state.counts) == {name: count for name, count in counts.items() if count}
    assert state.floor == (min(counts.values()) if counts and not empty else 0)
    assert all(state.floor <= count for count in counts.values())
    for a, b in itertools.permutations(counts, 2):
        if a in state.excluded and counts[b] >= counts[a]:
            assert b in state.excluded
    assert not state.excluded & {n for n, c in counts.items() if c == state.floor}
    assert not state.excluded & set(state.extra)
    for name, count in counts.items():
        if name not in state.excluded:
            assert state.extra.get(name, 0) == count - state.floor
    assert state_of(skew=skew + 1) <= state.excluded
    assert state_of(unconfirmed=False) <= state.excluded
    assert state_of(replicas=replicas + 1) >= state.excluded


def test_nodes_that_cannot_take_the_pod_do_not_count() -> None:
    # "c" is cordoned or tainted for this pod: its siblings neither raise the floor nor count.
    state = spread_state({"a": 3, "b": 3, "c": 0}, ["a", "b"], 2, 3)
    assert state.floor == 3 and not state.excluded and "c" not in state.counts


def test_each_closed_node_says_why() -> None:
    """`closed_by`: "counts" when the node's siblings (bound, pending, or maybe there) reach
    maxSkew; "headroom" when only the room kept while a pending sibling may be anywhere closes
    it; "replicas" when only other replicas' unseen reviews, their share of the room, or a
    last place kept for another does. maxSkew 3, an empty candidate (floor 0) throughout."""
    def why(counts: dict[str, int], unconfirmed: bool = False,
            **extra: Any) -> dict[str, str]:
        state = spread_state(counts, list(counts), len(counts) + 1, 3, unconfirmed, **extra)
        assert set(state.closed_by) == state.excluded
        return dict(state.closed_by)

    assert why({"a": 3, "b": 2, "c": 1}, maybe={"c": 2}) == {"a": "counts", "c": "counts"}
    assert why({"a": 3, "b": 2}, unconfirmed=True) == {"a": "counts", "b": "headroom"}
    assert why({"b": 2}, in_flight={"b": 1}) == {"b": "replicas"}
    assert why({"b": 1}, unconfirmed=True, share=2) == {"b": "replicas"}
    assert why({"b": 2}, last_place=lambda node: False) == {"b": "replicas"}
    assert why({"b": 2}, last_place=lambda node: True) == {}
