"""Weights from bytes present, and the term plan."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.scoring import MiB, ScoringPolicy, plan_terms, weight_for

POLICY = ScoringPolicy()


@given(st.integers(0, 4000 * MiB), st.integers(0, 4000 * MiB))
def test_weight_is_monotonic_and_bounded(a: int, b: int) -> None:
    low, high = sorted((a, b))
    assert weight_for(low, POLICY) <= weight_for(high, POLICY)
    assert 0 <= weight_for(high, POLICY) <= POLICY.max_weight


def test_floor_and_cap() -> None:
    assert weight_for(POLICY.min_bytes - 1, POLICY) == 0
    assert weight_for(POLICY.min_bytes, POLICY) >= 1
    assert weight_for(POLICY.full_bytes, POLICY) == POLICY.max_weight
    assert weight_for(10 * POLICY.full_bytes, POLICY) == POLICY.max_weight


@given(st.integers(POLICY.min_bytes, POLICY.full_bytes))
def test_weight_is_proportional_to_bytes_within_one_point(present: int) -> None:
    exact = POLICY.max_weight * present / POLICY.full_bytes
    assert exact <= weight_for(present, POLICY) < exact + 1


def test_nothing_to_express() -> None:
    assert plan_terms([(1 * MiB, "a"), (0, "b")], POLICY) == "below_threshold"
    assert plan_terms([(500 * MiB, "a")], POLICY) == "no_preference"
    # Different bytes, same weight: still no preference between the candidates.
    assert plan_terms([(500 * MiB - 1, "a"), (500 * MiB, "b")], POLICY) == "no_preference"


def test_levels_are_best_first_and_share_equal_weights() -> None:
    plan = plan_terms([(0, "z"), (100 * MiB, "b"), (1000 * MiB, "a"), (100 * MiB, "c")], POLICY)
    assert not isinstance(plan, str)
    assert [(lv.weight, set(lv.members)) for lv in plan.levels] == [
        (100, {"a"}),
        (weight_for(100 * MiB, POLICY), {"b", "c"}),
    ]
    assert plan.baseline_weight == 0  # the best node already reaches 100


def test_baseline_keeps_the_gap_absolute() -> None:
    plan = plan_terms([(0, "z"), (250 * MiB, "a")], POLICY)
    assert not isinstance(plan, str)
    assert plan.top_weight + plan.baseline_weight == 100


def test_max_terms_keeps_the_heaviest() -> None:
    policy = ScoringPolicy(max_terms=2)
    groups = [(n * 100 * MiB, str(n)) for n in range(0, 8)]
    plan = plan_terms(groups, policy)
    assert not isinstance(plan, str)
    assert [lv.members for lv in plan.levels] == [("7",), ("6",)]


@pytest.mark.parametrize(
    "kwargs",
    [{"max_weight": 0}, {"max_weight": 101}, {"full_bytes": 0}, {"max_terms": 0},
     {"max_nodes": 0}, {"min_bytes": -1}],
)
def test_policy_rejects_nonsense(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be"):
        ScoringPolicy(**kwargs)
