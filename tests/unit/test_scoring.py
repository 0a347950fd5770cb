"""Weights from bytes present, and the term plan. Expected weights are worked out from the
documented formula by hand or with fractions, never with `weight_for` itself."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.core.reasons import Reason
from webhook.core.scoring import (
    MIN_PATCH_BYTES,
    MiB,
    ScoringPolicy,
    plan_terms,
    spread_weight,
    weight_for,
)

POLICY = ScoringPolicy(share=0.0)  # the absolute scale; SHARE is the default
SHARE = ScoringPolicy(share=1.0)


def ceil_fraction(value: Fraction) -> int:
    return -(-value.numerator // value.denominator)


@given(st.integers(0, 4000 * MiB), st.integers(0, 4000 * MiB), st.integers(1, 4000 * MiB),
       st.sampled_from([0.0, 0.25, 0.5, 1.0]))
def test_weight_is_monotonic_and_bounded(a: int, b: int, pod: int, share: float) -> None:
    policy = ScoringPolicy(share=share)
    low, high = sorted((min(a, pod), min(b, pod)))
    assert weight_for(low, policy, pod) <= weight_for(high, policy, pod)
    assert 0 <= weight_for(high, policy, pod) <= policy.max_weight


def test_floor_and_cap() -> None:
    assert weight_for(POLICY.min_bytes - 1, POLICY) == 0
    assert weight_for(POLICY.min_bytes, POLICY) >= 1
    assert weight_for(POLICY.full_bytes, POLICY) == POLICY.max_weight
    assert weight_for(10 * POLICY.full_bytes, POLICY) == POLICY.max_weight
    # The floor holds in share mode too: 20 MiB is all of a 20 MiB pod, still no weight.
    assert weight_for(20 * MiB, SHARE, 20 * MiB) == 0


@given(st.integers(POLICY.min_bytes, POLICY.full_bytes))
def test_absolute_weight_is_the_ceiling_of_its_fraction(present: int) -> None:
    assert weight_for(present, POLICY) == ceil_fraction(
        Fraction(POLICY.max_weight * present, POLICY.full_bytes))


def test_worked_examples() -> None:
    # 100 MiB of a 100 MiB pod: 10 points on the absolute scale, all 100 as a share.
    assert weight_for(100 * MiB, POLICY, 100 * MiB) == 10
    assert weight_for(100 * MiB, SHARE, 100 * MiB) == 100
    # 50 of 200 MiB: a quarter of the pod; half share + half absolute = (25 + 5) / 2 = 15.
    assert weight_for(50 * MiB, SHARE, 200 * MiB) == 25
    assert weight_for(50 * MiB, ScoringPolicy(share=0.5), 200 * MiB) == 15


def test_spread_weight_lowers_but_keeps_a_holder_positive() -> None:
    policy = ScoringPolicy(spread_step=10)
    assert spread_weight(80, 0, policy) == 80
    assert spread_weight(80, 2, policy) == 60
    assert spread_weight(15, 3, policy) == 1
    assert spread_weight(0, 3, policy) == 0


def test_nothing_to_express() -> None:
    assert plan_terms([(0, 1 * MiB, "a"), (0, 0, "b")], POLICY) is Reason.BELOW_THRESHOLD
    assert plan_terms([(50, 500 * MiB, "a")], POLICY) is Reason.NO_PREFERENCE
    # Different bytes, same weight: still no preference between the candidates.
    assert plan_terms([(50, 500 * MiB - 1, "a"), (50, 500 * MiB, "b")], POLICY) is (
        Reason.NO_PREFERENCE)


def test_levels_are_best_first_and_share_equal_weights() -> None:
    plan = plan_terms(
        [(0, 0, "z"), (10, 100 * MiB, "b"), (100, 1000 * MiB, "a"), (10, 90 * MiB, "c")], POLICY)
    assert not isinstance(plan, Reason)
    assert [(lv.weight, lv.members) for lv in plan.levels] == [(100, ("a",)), (10, ("b", "c"))]
    assert plan.baseline_weight == 0  # the best node already reaches 100


def test_baseline_keeps_the_gap_absolute() -> None:
    plan = plan_terms([(0, 0, "z"), (25, 250 * MiB, "a")], POLICY)
    assert not isinstance(plan, Reason)
    assert (plan.top_weight, plan.baseline_weight) == (25, 75)
    unbased = plan_terms([(0, 0, "z"), (25, 250 * MiB, "a")], ScoringPolicy(baseline=False))
    assert not isinstance(unbased, Reason)
    assert unbased.baseline_weight == 0


def test_max_terms_keeps_the_heaviest() -> None:
    policy = ScoringPolicy(max_terms=2)
    groups = [(n * 10, n * 100 * MiB, str(n)) for n in range(0, 8)]
    plan = plan_terms(groups, policy)
    assert not isinstance(plan, Reason)
    assert [lv.members for lv in plan.levels] == [("7",), ("6",)]


@pytest.mark.parametrize(
    "kwargs",
    [{"max_weight": 0}, {"max_weight": 101}, {"full_bytes": 0}, {"max_terms": 0},
     {"max_nodes": 0}, {"min_bytes": -1}, {"lack_bytes": -1}, {"share": 1.5},
     {"spread_step": 100}],
)
def test_policy_rejects_nonsense(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="must be"):
        ScoringPolicy(**kwargs)


@pytest.mark.parametrize(
    ("field", "valid", "invalid", "message"),
    [
        ("max_weight", (1, 100), (0, 101), "max_weight must be within 1..100"),
        ("min_bytes", (0,), (-1,), "min_bytes and lack_bytes must be >= 0 and full_bytes > 0"),
        ("lack_bytes", (0,), (-1,), "min_bytes and lack_bytes must be >= 0 and full_bytes > 0"),
        ("full_bytes", (1,), (0,), "min_bytes and lack_bytes must be >= 0 and full_bytes > 0"),
        ("max_terms", (1,), (0,), "max_terms and max_nodes must be >= 1"),
        ("max_nodes", (1,), (0,), "max_terms and max_nodes must be >= 1"),
        ("share", (0.0, 1.0), (-0.01, 1.01), "share must be within 0..1"),
        ("spread_step", (0, 99), (-1, 100), "spread_step must be within 0..99"),
        ("replicas", (1,), (0,), "replicas must be >= 1"),
        ("max_patch_bytes", (MIN_PATCH_BYTES,), (MIN_PATCH_BYTES - 1,),
         f"max_patch_bytes must be >= {MIN_PATCH_BYTES}"),
    ],
)
def test_each_setting_is_checked_at_its_bounds(
    field: str, valid: tuple[Any, ...], invalid: tuple[Any, ...], message: str
) -> None:
    """The documented range of each setting, both ends: the error names the setting and the
    range (it reaches the operator as a configuration error)."""
    for value in valid:
        assert getattr(ScoringPolicy(**{field: value}), field) == value
    for value in invalid:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            ScoringPolicy(**{field: value})


@pytest.mark.parametrize(("weight", "lowered"), [
    (100, [100, 70, 40, 1]), (50, [50, 20, 1, 1]), (2, [2, 1, 1, 1]), (1, [1, 1, 1, 1]),
])
def test_each_extra_sibling_takes_a_step_and_no_weight_drops_below_1(
    weight: int, lowered: list[int]
) -> None:
    """spread_step 30, extra siblings 0, 1, 2 and 4 (hand-worked)."""
    policy = ScoringPolicy(spread_step=30)
    assert [spread_weight(weight, extra, policy) for extra in (0, 1, 2, 4)] == lowered
    assert spread_weight(0, 3, policy) == 0  # a node saving nothing stays at nothing


def test_weight_for_at_its_edges() -> None:
    """Hand-worked, full_bytes 1000 MiB: without the pod's bytes the absolute fraction counts;
    a one-byte pod with no floor is saved whole; nothing above the floor weighs under 1; a
    node cannot save more than the whole pod (the share caps at 1); 0 bytes weigh 0."""
    policy = ScoringPolicy()
    assert weight_for(100 * MiB, policy) == 10  # 100 / 1000, no pod_bytes given
    no_floor = ScoringPolicy(min_bytes=0)
    assert weight_for(1, no_floor, pod_bytes=1) == 100
    assert weight_for(0, no_floor, pod_bytes=1) == 0
    assert weight_for(23 * MiB, ScoringPolicy(share=0.0, full_bytes=10**15)) == 1
    # share 0.5: 0.5 * min(1, 200/100) + 0.5 * 200/1000 = 0.6
    assert weight_for(200 * MiB, ScoringPolicy(share=0.5), pod_bytes=100 * MiB) == 60


def test_a_plan_whose_top_weighs_100_has_no_baseline() -> None:
    plan = plan_terms([(100, 5, "a"), (0, 0, "b")], ScoringPolicy())
    assert not isinstance(plan, Reason) and plan.baseline_weight == 0
