"""Placement with the spread guard, in weights: a burst of replicas reviewed before any bind
spreads its top preference over the holders, a busier holder weighs a step below an idle one, a
holder at maxSkew gets the baseline only, and unlisted nodes weigh at most half the listed.
(Split from test_decide.py: the cluster and replicas are in replica_cluster.py.)"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import (
    AMD64,
    apply_patch,
    image,
    inventory,
    node_object,
    pod,
    preferred_terms,
    validate_pod,
    weight_by_hostname,
)
from tests.unit.replica_cluster import (
    APP,
    CATALOG,
    DEFAULTS,
    EMPTY,
    HOLDERS,
    OWNER,
    cluster,
    decision_of,
    replica,
    run,
)
from webhook.core.annotation import TOP_NODES_IN_DECISION
from webhook.core.decide import Siblings, decide
from webhook.core.pods import NEAR_TOP_WEIGHT
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.registry.catalog import StaticCatalog


async def test_a_burst_spreads_its_top_preference_over_the_holders() -> None:
    mutator, tracker = cluster()
    tops = []
    for n in range(len(HOLDERS)):
        obj = replica(n)
        outcome = await run(mutator, obj, n)
        assert outcome.result == "patched"
        tops.append(decision_of(obj, outcome)["top"][0]["node"])
    assert sorted(tops) == HOLDERS  # each replica's most preferred node is another holder
    assert dict(tracker.counts(OWNER)) == dict.fromkeys(HOLDERS, 1)


# As many holders as the decision lists: none is weighed down for being unlisted
# (test_a_node_past_the_listed_ones_weighs_at_most_half_of_theirs).
LISTED = HOLDERS[:TOP_NODES_IN_DECISION]


async def test_with_a_spread_step_a_busier_holder_is_weighted_below_an_idle_one() -> None:
    """A holder with one more sibling than equal holders is weighted `spread_step` below
    them, whether that sibling is bound or still pending."""
    async def weights(pending: bool) -> dict[str, int]:
        mutator, tracker = cluster(ScoringPolicy(spread_step=2), holders=LISTED)
        if pending:
            tracker.seen_pending("pod-1", OWNER, "tok-1", "holder-0", "another-replica")
        else:
            tracker.bound("pod-1", OWNER, "holder-0")
        obj = replica(0)
        return weight_by_hostname(apply_patch(obj, list((await run(mutator, obj, 0)).patch)),
                                  LISTED + EMPTY)

    for pending in (True, False):
        raw = await weights(pending)
        idle = sorted(raw[name] for name in LISTED[1:])
        # The idle holders tie; the one the pending entry is counted on gets a tie-break term
        # of spread_step on top, so the scheduler is nudged to where the count says it goes.
        assert idle[1] == idle[0] + 2
        assert raw["holder-0"] == idle[0] - 2 > raw["empty-0"], pending


async def test_a_busier_holder_that_no_other_node_matches_keeps_its_weight() -> None:
    """The step orders equal holders. When every node holding the pod's bytes has siblings,
    it counts from the emptiest of them: one sibling on each holder lowers nothing, and a
    holder with two is one step below one with one (not two steps, not below the empty
    nodes)."""
    async def weights(siblings: dict[str, int]) -> dict[str, int]:
        mutator, tracker = cluster(ScoringPolicy(spread_step=5), holders=LISTED)
        for name, count in siblings.items():
            for k in range(count):
                tracker.bound(f"pod-{name}-{k}", OWNER, name)
        obj = replica(0)
        return weight_by_hostname(apply_patch(obj, list((await run(mutator, obj, 0)).patch)),
                                  LISTED + EMPTY)

    alone = await weights({})
    raw = await weights({name: 2 if name == LISTED[0] else 1 for name in LISTED})
    others = [raw[name] for name in LISTED[1:]]
    assert max(others) - min(others) in (0, 5)  # the tie-break term, on one of them at most
    assert min(others) == min(alone[name] for name in LISTED)  # one sibling each: no step
    assert raw[LISTED[0]] == min(others) - 5 > raw["empty-0"]


async def test_a_node_past_the_listed_ones_weighs_at_most_half_of_theirs() -> None:
    """With the guard on, the decision lists its first TOP_NODES_IN_DECISION nodes (the
    pending pod is counted there) and weighs every other named node at most half the least
    of theirs and below the near-top bound, so the scheduler does not bind the pod to an
    unlisted node uncounted. Four equal holders: one of them is weighed down. Without the
    guard nothing is."""
    mutator, _ = cluster()
    obj = replica(0)
    outcome = await run(mutator, obj, 0)
    assert outcome.decision is not None and outcome.decision.spread is not None
    raw = weight_by_hostname(apply_patch(obj, list(outcome.patch)), HOLDERS + EMPTY)
    listed = [entry["node"] for entry in decision_of(obj, outcome)["top"]]
    assert len(listed) == TOP_NODES_IN_DECISION and set(listed) < set(HOLDERS)
    least, first = min(raw[name] for name in listed), outcome.decision.top_weight
    (unlisted,) = set(HOLDERS) - set(listed)
    # Half the least listed, and below what counted_nodes counts as near the first.
    assert raw[unlisted] == max(1, min(least // 2, first - NEAR_TOP_WEIGHT - 1)) \
        > raw["empty-0"]
    # Without the guard: four equal holders weigh alike, whichever are listed.
    _, index = inventory([node_object(n, [APP]) for n in HOLDERS]
                         + [node_object(n) for n in EMPTY], CATALOG)
    decision = decide(obj, [APP], index, DEFAULTS, salt="s")
    assert decision.spread is None
    raw = weight_by_hostname(apply_patch(obj, list(decision.patch)), HOLDERS + EMPTY)
    assert len({raw[name] for name in HOLDERS}) == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 2), min_size=4, max_size=7), st.integers(0, 3))
def test_no_unlisted_node_weighs_more_than_half_the_least_listed(
        bound: list[int], shift: int) -> None:
    """Whatever the siblings on holders and empty nodes: the named nodes after the listed
    ones weigh at most half the least listed weight (at least 1), and the weights stay in
    order."""
    nodes = [f"n{i}" for i in range(len(bound))]
    _, index = inventory([node_object(name, [APP] if (i + shift) % 3 else [])
                          for i, name in enumerate(nodes)], CATALOG)
    obj = replica(0)
    decision = decide(obj, [APP], index, DEFAULTS, salt="s",
                      siblings=Siblings(OWNER, {n: c for n, c in zip(nodes, bound, strict=True)
                                                if c}, 3))
    if not decision.patched:
        return
    weights = [score.weight for score in decision.preferred]
    assert weights == sorted(weights, reverse=True)
    listed = weights[:TOP_NODES_IN_DECISION]
    for weight in weights[TOP_NODES_IN_DECISION:]:
        assert weight <= max(1, min(listed) // 2)


async def test_a_holder_at_max_skew_is_left_out() -> None:
    mutator, tracker = cluster()
    for i in range(3):  # three siblings on holder-0, none elsewhere: one more makes skew 4
        tracker.bound(f"pod-{i}", OWNER, "holder-0")
    obj = replica(0)
    outcome = await run(mutator, obj, 0)
    raw = weight_by_hostname(apply_patch(obj, list(outcome.patch)), HOLDERS + EMPTY)
    assert raw["holder-0"] == raw["empty-0"]  # the baseline only
    assert raw["holder-1"] > raw["holder-0"]
    decision = decision_of(obj, outcome)
    assert decision["spread"] == {"maxSkew": 3, "leftOut": 1}
    assert "holder-0" not in {entry["node"] for entry in decision["top"]}


async def test_the_pods_own_hostname_constraint_sets_the_skew() -> None:
    mutator, tracker = cluster()
    tracker.bound("pod-1", OWNER, "holder-0")
    strict = {"topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
         "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]}
    obj = replica(0, spec=strict)
    decision = decision_of(obj, await run(mutator, obj, 0))
    assert decision["spread"] == {"maxSkew": 1, "leftOut": 1}


@settings(max_examples=60, deadline=None)
@given(
    some_holds=st.lists(st.sampled_from([0, 1, 2]), min_size=4, max_size=4),
    some_siblings=st.lists(st.integers(0, 5), min_size=4, max_size=4),
    step=st.integers(0, 20),
    share=st.sampled_from([0.0, 0.5, 1.0]),
    colocate=st.booleans(),
)
def test_weights_are_monotonic_in_bytes_and_respect_the_guard(
    some_holds: list[int], some_siblings: list[int], step: int, share: float, colocate: bool
) -> None:
    """Random clusters: among nodes with equal siblings more bytes never weigh less; a node
    where one more sibling exceeds maxSkew gets no weight; every patch applies and validates.
    n0 holds the whole pod and no sibling, n5 nothing and no sibling: n0 is within the guard
    and outweighs n5, so every cluster drawn is patched."""
    holds, siblings = [2, *some_holds, 0], [0, *some_siblings, 0]
    base = image("r.example.com/a/base:1", {AMD64: [("b", 60 * MiB)]})
    full = image("r.example.com/a/full:1", {AMD64: [("b", 60 * MiB), ("c", 40 * MiB)]})
    catalog = StaticCatalog([base, full])
    names = [f"n{i}" for i in range(6)]
    objects = [node_object(name, [[], [base], [full]][h]) for name, h in zip(names, holds,
                                                                             strict=True)]
    _, index = inventory(objects, catalog)
    counts = {name: c for name, c in zip(names, siblings, strict=True) if c}
    obj = pod([full.ref])
    decision = decide(obj, [full], index,
                      ScoringPolicy(share=share, spread_step=step, colocate=colocate),
                      salt="s", siblings=Siblings(OWNER, counts, 3))
    assert decision.patched, decision.reason
    patched = apply_patch(obj, list(decision.patch))
    validate_pod(patched)
    raw = weight_by_hostname(patched, names)
    # With co-location a node holding a sibling holds the pod's layers too (same template).
    present = {name: 100 if colocate and c else [0, 60, 100][h]
               for name, h, c in zip(names, holds, siblings, strict=True)}
    floor = 0  # n0 and n5 hold no sibling
    for a, b in itertools.permutations(names, 2):
        if siblings[names.index(a)] == siblings[names.index(b)] and present[a] > present[b]:
            assert raw[a] >= raw[b]
    baseline = sum(t["weight"] for t in preferred_terms(patched)
                   if t["preference"]["matchExpressions"][0]["operator"] == "Exists")
    for name, count in zip(names, siblings, strict=True):
        if count + 1 - floor > 3:
            assert raw[name] == baseline


def test_without_a_spread_step_the_emptiest_equal_holder_is_still_named_first() -> None:
    """spread_step 0: a holder with a sibling weighs as much as the idle holders (one weight
    level), but within it the idle ones come first, so the pending entry goes to an idle one."""
    _, index = inventory([node_object(n, [APP]) for n in HOLDERS]
                         + [node_object(n) for n in EMPTY], CATALOG)
    for busy in HOLDERS:
        decision = decide(replica(0), [APP], index, ScoringPolicy(spread_step=0), salt="s",
                          token="tok", siblings=Siblings(OWNER, {busy: 1}, 3))
        assert decision.top is not None and decision.top.node.name != busy
        assert decision.named[-1].name not in EMPTY  # the holders are all named
