"""Co-location: a node where a pod's siblings run or were steered counts as holding the pod's
layers (one template), and a burst finding no warm node seeds one node and fills it up to the
spread guard's limit before seeding the next, so n replicas pull on about n / limit nodes."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import pytest

from tests.helpers import (
    AMD64,
    Clock,
    apply_patch,
    image,
    inventory,
    lack_weight_of,
    node_object,
    pod,
    weight_by_hostname,
)
from tests.unit.replica_cluster import APP, CATALOG, OWNER, decision_of, replica, run
from webhook.core.decide import Siblings, decide
from webhook.core.pods import pending_placement
from webhook.core.reasons import Reason
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.core.spread import guard_limit
from webhook.inventory.siblings import SiblingTracker
from webhook.registry.catalog import StaticCatalog
from webhook.serving.mutate import Mutator

COLD = [f"cold-{i}" for i in range(8)]
POLICY = ScoringPolicy()


def cold_cluster(policy: ScoringPolicy = POLICY) -> tuple[Mutator, SiblingTracker]:
    """Eight nodes, none holding any layer of APP."""
    inv, _ = inventory([node_object(n) for n in COLD], CATALOG)
    tracker = SiblingTracker()
    return Mutator([CATALOG], inv, policy, siblings=tracker), tracker


async def burst(mutator: Mutator, count: int) -> list[dict[str, Any]]:
    decisions = []
    for n in range(count):
        obj = replica(n)
        decisions.append(decision_of(obj, await run(mutator, obj, n)))
    return decisions


async def test_a_cold_burst_fills_each_seeded_node_to_the_guard_limit() -> None:
    """Every pending replica is counted on the one node its decision named (a seeded node
    has no equal), so the counts are the scheduler's and the guard fills a node to maxSkew."""
    mutator, tracker = cold_cluster()
    limit = guard_limit(3, unconfirmed=False)
    assert limit == 3
    decisions = await burst(mutator, 2 * limit)
    tops = [d["top"][0]["node"] for d in decisions]
    # Each node named first takes `limit` replicas in a row, then the next is seeded.
    assert Counter(tops) == {tops[0]: limit, tops[limit]: limit}
    assert tops[:limit] == [tops[0]] * limit and tops[0] != tops[limit]
    assert dict(tracker.counts(OWNER)) == {tops[0]: limit, tops[limit]: limit}


async def test_without_colocation_a_cold_burst_gets_no_terms() -> None:
    mutator, tracker = cold_cluster(replace(POLICY, colocate=False))
    obj = replica(0)
    outcome = await run(mutator, obj, 0)
    assert outcome.reason is Reason.BELOW_THRESHOLD and not outcome.patch
    # Unconfirmed until its bind is seen, but counted on no node.
    assert tracker.pending == 1 and tracker.unconfirmed(OWNER) == 1
    assert not tracker.watch_behind()  # its stored pod cannot echo it: it is not waited for
    assert dict(tracker.counts(OWNER)) == {}


async def test_a_pod_without_an_owner_is_not_seeded() -> None:
    mutator, tracker = cold_cluster()
    outcome = await run(mutator, pod([APP.ref]), 0)
    assert outcome.reason is Reason.BELOW_THRESHOLD and tracker.pending == 0


def test_a_sibling_node_weighs_as_a_full_holder_less_the_spread_step() -> None:
    nodes = ["holder", "sibling", "empty"]
    _, index = inventory([node_object("holder", [APP]), node_object("sibling"),
                          node_object("empty")], CATALOG)
    obj = replica(0)
    decision = decide(obj, [APP], index, POLICY, salt="s",
                      siblings=Siblings(OWNER, {"sibling": 1}, 3))
    assert decision.patched
    raw = weight_by_hostname(apply_patch(obj, list(decision.patch)), nodes)
    baseline = raw["empty"]
    assert raw["holder"] - baseline == 100
    assert raw["sibling"] - baseline == 100 - POLICY.spread_step


def test_a_pod_smaller_than_min_bytes_is_not_seeded() -> None:
    _, index = inventory([node_object(n) for n in COLD], CATALOG)
    decision = decide(replica(0), [APP], index, replace(POLICY, min_bytes=APP_BYTES + 1),
                      salt="s", siblings=Siblings(OWNER, {}, 3))
    assert decision.reason is Reason.BELOW_THRESHOLD
    at_floor = decide(replica(0), [APP], index, replace(POLICY, min_bytes=APP_BYTES),
                      salt="s", siblings=Siblings(OWNER, {}, 3))
    assert at_floor.patched  # exactly min_bytes is enough


def test_with_no_floor_a_one_byte_pod_is_seeded() -> None:
    tiny = image("registry.example.com/team/tiny:v1", {AMD64: [("one", 1)]})
    _, index = inventory([node_object(n) for n in COLD[:3]], StaticCatalog([tiny]))
    obj = replica(0)
    obj["spec"]["containers"][0]["image"] = tiny.ref
    decision = decide(obj, [tiny], index, replace(POLICY, min_bytes=0), salt="s",
                      siblings=Siblings(OWNER, {}, 3))
    assert decision.patched and decision.pod_bytes == 1


@pytest.mark.parametrize("excluded", [0, 1])
def test_the_seed_skips_nodes_the_guard_excludes(excluded: int) -> None:
    _, index = inventory([node_object(n) for n in COLD[:2]], CATALOG)
    full = guard_limit(3)
    decision = decide(replica(0), [APP], index, POLICY, salt="s",
                      siblings=Siblings(OWNER, {COLD[excluded]: full}, 3))
    assert decision.patched and decision.top is not None
    assert decision.top.node.name == COLD[1 - excluded]
    assert [node.name for node in decision.named] == [COLD[1 - excluded]]


APP_BYTES = 100 * (1 << 20)


def test_unconfirmed_counts_pending_reviews_per_owner_without_the_askers_own() -> None:
    tracker = SiblingTracker()
    tracker.reserve(OWNER, "a", "t1")
    tracker.reserve(OWNER, "b", "t2")
    tracker.reserve("other", "a", "t3")
    assert tracker.unconfirmed(OWNER) == 2 and tracker.unconfirmed(OWNER, "t1") == 1
    assert tracker.unconfirmed(OWNER, "t3") == 2  # another owner's token changes nothing
    tracker.bound("uid-1", OWNER, "a", token="t1")
    tracker.release("t2")
    assert tracker.unconfirmed(OWNER) == 0 and tracker.unconfirmed("other") == 1


async def test_confirmed_siblings_fill_a_node_to_max_skew_pending_ones_one_less() -> None:
    """Steady arrivals: every earlier replica is seen bound, so the counts are exact and the
    node holding two may take the third (the scheduler's own limit, the oracle's packing).
    While a review is unconfirmed (a burst) the guard keeps one sibling of headroom."""
    mutator, tracker = cold_cluster()
    tracker.bound("uid-1", OWNER, COLD[0])
    tracker.bound("uid-2", OWNER, COLD[0])
    first = decision_of(replica(10), await run(mutator, replica(10), 10))
    assert first["top"][0]["node"] == COLD[0]  # bound siblings only: fills to 3
    second = decision_of(replica(11), await run(mutator, replica(11), 11))
    # Now one review is pending: COLD[0] (2 bound + 1 pending) is at the limit either way,
    # and with headroom a node holding 2 would be closed too.
    assert second["top"][0]["node"] != COLD[0]
    assert tracker.unconfirmed(OWNER) == 2


def echo(trackers: list[SiblingTracker], obj: dict[str, Any], outcome: Any, n: int) -> None:
    """The pod watch of every replica shows the pod the API server stored, not bound yet."""
    stored = apply_patch(obj, list(outcome.patch))
    placement = pending_placement(stored)
    for tracker in trackers:
        tracker.seen_pending(f"pod-{n}", OWNER, placement.token, placement.node, placement.by,
                             placement.also)


async def two_replicas(policy: ScoringPolicy = POLICY, clock: Any = None,
                       ) -> tuple[list[Mutator], list[SiblingTracker]]:
    inv, _ = inventory([node_object(n) for n in COLD], CATALOG)
    extra = {"clock": clock} if clock is not None else {}
    trackers = [SiblingTracker(replica=name, **extra) for name in ("aaaa0001", "bbbb0002")]
    return [Mutator([CATALOG], inv, policy, siblings=t) for t in trackers], trackers


async def test_two_replicas_sharing_the_pod_watch_fill_nodes_as_one_replica_does() -> None:
    """Two webhook replicas alternate over one burst of a cold image; each stored pod reaches
    both replicas' pod watches before the next review. Each counts the other's pending pods,
    so together they fill each seeded node up to maxSkew and none beyond it: a node's last
    place is taken only by the replica a hash of (workload, node, replicas) picks, since
    either may be reviewing a pod of the same moment unseen; one replica alone, whose counts
    are exact, fills every node to maxSkew."""
    replicas, trackers = await two_replicas()
    tops: list[str] = []
    for n in range(8):
        obj = replica(n)
        outcome = await run(replicas[n % 2], obj, n)
        tops.append(decision_of(obj, outcome)["top"][0]["node"])
        echo(trackers, obj, outcome, n)
    # Each node's last place is one replica's: together they fill some nodes to maxSkew,
    # none beyond it, and every node at least to the headroom's limit before seeding another.
    counts = sorted(Counter(tops).values())
    assert max(counts) <= guard_limit(3, False) and sum(counts) == 8
    assert counts.count(1) <= 1  # only the last node seeded is left part-filled
    assert dict(trackers[0].counts(OWNER)) == dict(trackers[1].counts(OWNER))
    alone, _ = cold_cluster()
    single = [d["top"][0]["node"] for d in await burst(alone, 8)]
    assert sorted(Counter(single).values()) == [2, 3, 3] and guard_limit(3, False) == 3


async def test_a_replica_keeps_room_for_the_other_replicas_reviews_in_flight() -> None:
    """While its own last review is not echoed by the watch, a replica that has seen another
    replica reviewing the workload takes it that the other has as many unseen: the node it
    just preferred is full for now (1 own + 1 in flight + 1 > 2); once the echo arrives, it is
    open again. With no other replica seen, the node stays open throughout."""
    replicas, trackers = await two_replicas()
    first = replica(0)
    outcome = await run(replicas[1], first, 0)
    echo(trackers, first, outcome, 0)  # b's review, seen by both: b is active
    a = replicas[0]
    one = replica(1)
    top_one = decision_of(one, out_one := await run(a, one, 1))["top"][0]["node"]
    two = replica(2)
    top_two = decision_of(two, await run(a, two, 2))["top"][0]["node"]
    assert top_two != top_one
    assert trackers[0].view(OWNER).in_flight == {top_one: 1, top_two: 1}
    echo(trackers[:1], one, out_one, 1)
    assert trackers[0].view(OWNER).in_flight == {top_two: 1}

    alone, tracker = cold_cluster()
    tops = [d["top"][0]["node"] for d in await burst(alone, 2)]
    assert tops[0] == tops[1] and tracker.view(OWNER).in_flight == {}


async def test_blind_replicas_fall_back_to_their_share_while_the_watch_is_behind() -> None:
    """Reviews not echoed by the watch for longer than the grace: the replica cannot see the
    others' either, and keeps to its share of the room (`replicas`): one pending pod a node
    each with maxSkew 3 and two replicas. Told nothing, it fills a node to the limit."""
    async def tops_with(policy: ScoringPolicy) -> Counter[str]:
        clock = Clock()
        replicas, _ = await two_replicas(policy, clock)
        tops: Counter[str] = Counter()
        for n in range(8):
            obj = replica(n)
            tops[decision_of(obj, await run(replicas[0], obj, n))["top"][0]["node"]] += 1
            clock.now += 2.0  # no echo: the watch is behind from the second review on
        return tops

    told = await tops_with(replace(POLICY, replicas=2))
    assert max(told.values()) == guard_limit(3, True, 2) == 1
    # Alone, its own pending pods are counted where their decisions put them: exact.
    assert max((await tops_with(POLICY)).values()) == guard_limit(3, False) == 3


def test_the_guard_limit_shares_the_headroom_reduced_room_between_replicas() -> None:
    assert [guard_limit(3, True, r) for r in (1, 2, 3)] == [2, 1, 1]
    assert [guard_limit(3, False, r) for r in (1, 2, 3)] == [3, 3, 3]
    assert guard_limit(5, True, 2) == 2


BASE = image("registry.example.com/team/app-base:v1", {AMD64: [("base", 80 * (1 << 20))]})
WITH_BASE = StaticCatalog([APP, BASE])


def named_weights(obj: dict[str, Any], decision: Any, nodes: list[str]) -> dict[str, int]:
    """Each node's weight over the baseline in the decision's patch."""
    assert decision.patched, decision.reason
    raw = weight_by_hostname(apply_patch(obj, list(decision.patch)), nodes)
    baseline = min(raw.values())
    return {name: weight - baseline for name, weight in raw.items()}


def test_every_node_with_a_sibling_is_lifted_and_only_those() -> None:
    """Two cold nodes with one sibling each weigh as full holders (no spread step: no other
    node holds the pod with fewer siblings); the cold node in the first slot with none does
    not."""
    nodes = ["cold-first", "sib-1", "sib-2", "cold-last"]
    _, index = inventory([node_object(n) for n in nodes], CATALOG)
    obj = replica(0)
    decision = decide(obj, [APP], index, POLICY, salt="s",
                      siblings=Siblings(OWNER, {"sib-1": 1, "sib-2": 1}, 3))
    weights = named_weights(obj, decision, nodes)
    assert weights["cold-first"] == weights["cold-last"] == 0
    # Equal: the tie-break term (spread_step) goes to the first one named.
    assert sorted([weights["sib-1"], weights["sib-2"]]) == [100, 100 + POLICY.spread_step]


def test_a_partial_holder_without_siblings_keeps_its_weight_beside_lifted_nodes() -> None:
    """A partial holder (80 of APP's 100 MiB) beside a node lifted for its sibling is weighed
    from what it lacks beyond the whole pod, as beside a full holder. Without a full holder
    it is the best node and weighs 100, until a sibling's node is lifted: the whole pod is
    then the best, and it weighs what it lacks beyond that."""
    nodes = ["full", "partial", "sibling", "cold"]
    _, index = inventory([node_object("full", [APP]), node_object("partial", [BASE]),
                          node_object("sibling"), node_object("cold")], WITH_BASE)
    obj = replica(0)
    decision = decide(obj, [APP], index, POLICY, salt="s",
                      siblings=Siblings(OWNER, {"sibling": 1}, 3))
    partial = lack_weight_of(80 * MiB, 100 * MiB, POLICY)
    assert 0 < partial < 100 - POLICY.spread_step
    assert named_weights(obj, decision, nodes) == {
        "full": 100, "partial": partial, "sibling": 100 - POLICY.spread_step, "cold": 0}
    nodes.remove("full")
    _, index = inventory([node_object(name, [BASE] if name == "partial" else [])
                          for name in nodes], WITH_BASE)
    decision = decide(obj, [APP], index, POLICY, salt="s", siblings=Siblings(OWNER, {}, 3))
    assert named_weights(obj, decision, nodes) == {"partial": 100, "sibling": 0, "cold": 0}
    decision = decide(obj, [APP], index, POLICY, salt="s",
                      siblings=Siblings(OWNER, {"sibling": 1}, 3))
    assert named_weights(obj, decision, nodes) == {"partial": partial, "sibling": 100, "cold": 0}


@pytest.mark.parametrize("warm", [False, True])
def test_every_candidate_with_equal_siblings_is_no_preference(warm: bool) -> None:
    """Each node holds one sibling (so, with co-location, all the pod's layers), the first
    one the image too or not: they are alike, and there is nothing to prefer."""
    _, index = inventory([node_object(COLD[0], [APP] if warm else []),
                          *(node_object(n) for n in COLD[1:3])], CATALOG)
    decision = decide(replica(0), [APP], index, POLICY, salt="s",
                      siblings=Siblings(OWNER, dict.fromkeys(COLD[:3], 1), 3))
    assert decision.reason is Reason.NO_PREFERENCE


def test_left_out_counts_the_weighted_nodes_the_guard_excludes() -> None:
    """Without co-location: a full and a partial holder past the guard are left out (2); a
    cold node past it weighed nothing anyway, and a holder under it is kept, at the full
    weight: no node it could be stepped below holds as many bytes."""
    names = ["full-out", "full-in", "partial-out", "cold-out", "cold-free"]
    _, index = inventory([node_object("full-out", [APP]), node_object("full-in", [APP]),
                          node_object("partial-out", [BASE]), node_object("cold-out"),
                          node_object("cold-free")], WITH_BASE)
    obj = replica(0)
    counts = {"full-out": 4, "partial-out": 4, "cold-out": 4, "full-in": 1}
    decision = decide(obj, [APP], index, replace(POLICY, colocate=False), salt="s",
                      siblings=Siblings(OWNER, counts, 3))
    assert decision.spread is not None
    assert decision.spread.excluded == {"full-out", "partial-out", "cold-out"}
    assert decision.left_out == 2
    assert [node.name for node in decision.named] == ["full-in"]
    weights = named_weights(obj, decision, names)
    assert weights["full-in"] == 100
    assert weights["full-out"] == weights["partial-out"] == 0


def test_cold_bursts_of_different_workloads_seed_different_nodes() -> None:
    """The seed is picked by the workload: with two cold nodes, twenty workloads do not all
    start on the same one (all alike by chance: 2 in a million)."""
    _, index = inventory([node_object(n) for n in COLD[:2]], CATALOG)
    seeds = set()
    for k in range(20):
        decision = decide(replica(0), [APP], index, POLICY, salt="s",
                          siblings=Siblings(f"owner-{k}", {}, 3))
        assert decision.top is not None
        seeds.add(decision.top.node.name)
    assert seeds == set(COLD[:2])
