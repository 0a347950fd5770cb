"""A burst on a few nodes: every pending replica is counted, for the spread guard, on each node
its decision weighed alike or nearly as much (the scheduler may bind it to any of them), so no
assignment of a burst's pods to their decisions' nodes passes maxSkew; and when every node the
workload is on is closed, the rest go to the open node holding the most of the pod's bytes."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import AMD64, Clock, apply_patch, image, inventory, node_object
from tests.unit.replica_cluster import APP, OWNER, decision_of, replica, run
from webhook.core.decision import Siblings
from webhook.core.pods import NEAR_TOP_WEIGHT, Counted, counted_nodes, pending_placement
from webhook.core.replica_guard import guarded_spread
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.core.spread import last_place_holder, spread_state
from webhook.inventory.recent_reviews import PARTNER_MIN_SECONDS
from webhook.inventory.siblings import SiblingTracker
from webhook.registry.catalog import StaticCatalog
from webhook.serving.mutate import Mutator

# PART shares APP's 80 MiB base; OTHER shares nothing with it.
PART = image("registry.example.com/team/part:v1", {AMD64: [("base", 80 * MiB)]})
SMALL = image("registry.example.com/team/small:v1", {AMD64: [("code", 20 * MiB)]})
CATALOG = StaticCatalog([APP, PART, SMALL])


def mutator_on(nodes: dict[str, list[Any]]) -> tuple[Mutator, SiblingTracker]:
    inv, _ = inventory([node_object(name, images) for name, images in nodes.items()], CATALOG)
    tracker = SiblingTracker()
    return Mutator([CATALOG], inv, ScoringPolicy(), siblings=tracker), tracker


def test_counted_nodes_is_the_first_those_weighed_alike_then_those_near() -> None:
    """With weights (the guard's decisions): the first, the others weighed as much (whatever
    their bytes and siblings), then those weighed within NEAR_TOP_WEIGHT of the first, or
    weighed at all and holding fewer siblings than it; `alike` counts the first and its
    equals."""
    first = 2 * NEAR_TOP_WEIGHT
    top = [("a", 100, 1, first), ("b", 90, 2, first), ("c", 80, 1, first - NEAR_TOP_WEIGHT),
           ("d", 70, 1, first - NEAR_TOP_WEIGHT - 1), ("e", 60, 0, 1), ("f", 50, 0, 0)]
    assert counted_nodes(top) == Counted(("a", "b", "c", "e"), 2)
    # Bytes do not matter once weights are listed; fewer siblings bring in any weighed node.
    assert counted_nodes(top, 100) == Counted(("a", "b", "c", "e"), 2)
    # Within NEAR_TOP_WEIGHT of the first, whatever it is: all of these.
    assert counted_nodes(top[2:]) == Counted(("c", "d", "e", "f"), 1)
    assert counted_nodes([("a", 5, 0, 9), ("b", 5, 0, 8)]) == Counted(("a", "b"), 1)
    assert counted_nodes([]) == Counted((), 0)


def test_counted_nodes_without_weights_goes_by_bytes_and_siblings() -> None:
    """An older decision, or one entry without its weight: alike are those holding as many
    bytes with as many siblings as the first; near, those within a fifth of the pod's bytes
    of the first (the scheduler's other scores may choose them)."""
    top = [("a", 100, 1, None), ("b", 100, 1, None), ("c", 100, 2, None), ("d", 90, 1, None)]
    assert counted_nodes(top) == Counted(("a", "b"), 2)
    assert counted_nodes(top, 100) == Counted(("a", "b", "c", "d"), 2)
    assert counted_nodes(top, 40) == Counted(("a", "b", "c"), 2)
    assert counted_nodes(top[2:]) == Counted(("c",), 1)
    assert counted_nodes([("a", 5, None, None), ("b", 5, None, None)]) == Counted(("a", "b"), 2)
    # A weight missing on any entry: the whole list goes by bytes.
    mixed = [("a", 100, 1, 90), ("b", 100, 1, None), ("c", 95, 1, 90)]
    assert counted_nodes(mixed) == Counted(("a", "b"), 2)
    assert counted_nodes(mixed, 100) == Counted(("a", "b", "c"), 2)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), min_size=1, max_size=6),
       st.integers(1, 4))
def test_the_guard_leaves_open_only_nodes_within_max_skew_counting_every_maybe(
        loads: list[tuple[int, int]], max_skew: int) -> None:
    """Whatever the counts and the pods that may land on each node: a node left open takes one
    more pod without any assignment of the pending ones passing maxSkew (a burst, the floor 0:
    a node holds none)."""
    names = [f"n{i}" for i in range(len(loads))]
    counts = {n: c for n, (c, _) in zip(names, loads, strict=True) if c}
    maybe = {n: m for n, (_, m) in zip(names, loads, strict=True) if m}
    state = spread_state(counts, names, len(names) + 1, max_skew, unconfirmed=False,
                         maybe=maybe)
    for name in names:
        if name not in state.excluded:
            assert counts.get(name, 0) + maybe.get(name, 0) + 1 <= max_skew


async def test_a_burst_over_equal_holders_cannot_pass_max_skew_however_it_binds() -> None:
    """Twelve replicas, four equal holders and four empty nodes, every review before any bind:
    whichever of the nodes its decision weighed alike or nearly as much the scheduler binds
    each pod to, no node passes maxSkew (the worst case: every pod that may land on a node
    does)."""
    nodes: dict[str, list[Any]] = {f"holder-{i}": [APP] for i in range(4)}
    nodes.update({f"empty-{i}": [] for i in range(4)})
    mutator, tracker = mutator_on(nodes)
    may_land: Counter[str] = Counter()
    for n in range(12):
        obj = replica(n)
        outcome = await run(mutator, obj, n)
        assert outcome.decision is not None
        on = outcome.decision.counted_on
        placement = pending_placement(apply_patch(obj, list(outcome.patch)))
        # The other replicas read the same nodes from the annotation, alike and near apart.
        assert (placement.node, *placement.also, *placement.near) == on
        assert len(placement.also) + 1 == outcome.decision.counted_alike
        may_land.update(on)
    assert max(may_land.values()) <= 3
    view = tracker.view(OWNER)
    assert {n: view.counts.get(n, 0) + view.maybe.get(n, 0) for n in may_land} == may_land


async def test_closed_holders_send_the_rest_to_the_open_node_holding_most() -> None:
    """The workload's node is full: the next replicas go to one node holding APP's 80 MiB base
    (PART), not the one holding its 20 MiB (SMALL) nor an empty one, whatever the salt. One:
    it is named alone at the weight of a holder of the whole pod (it will be one), so the
    scheduler's first choice and the rest follow it there (the guard also counts each on the
    other partial holder, 80 of 100 MiB: the scheduler's other scores could send it there)."""
    nodes: dict[str, list[Any]] = {"full-a": [APP], "part-a": [PART], "part-b": [PART],
                                   "small": [SMALL], "empty-a": [], "empty-b": []}
    for trial in range(4):
        mutator, tracker = mutator_on(nodes)
        for k in range(3):  # bound siblings: full-a at maxSkew above the floor (0)
            tracker.bound(f"b{trial}-{k}", OWNER, "full-a")
        tops = []
        for n in range(3):
            obj = replica(100 * trial + n)
            outcome = await run(mutator, obj, 100 * trial + n)
            assert outcome.decision is not None
            top = decision_of(obj, outcome)["top"][0]
            assert outcome.decision.counted_on[0] == top["node"]
            assert top["bytes"] == 100 * MiB
            tops.append(top["node"])
        assert tops[0] in ("part-a", "part-b") and tops == [tops[0]] * 3


async def test_a_pod_given_no_node_keeps_the_guards_headroom() -> None:
    """A pending sibling stored without a decision (unresolved, too small, held out unsteered)
    may land anywhere: the guard stops a node one sibling early while the watch shows it
    pending, and fills nodes to maxSkew again once it is seen bound."""
    mutator, tracker = mutator_on({f"cold-{i}": [] for i in range(6)})
    tracker.seen_pending("uid-unsteered", OWNER, None, "", "")
    tops = []
    for n in range(6):
        obj = replica(n)
        tops.append(decision_of(obj, await run(mutator, obj, n))["top"][0]["node"])
    assert max(Counter(tops).values()) == 2
    tracker.bound("uid-unsteered", OWNER, "cold-5")
    assert tracker.view(OWNER).unplaced == 0
    obj = replica(6)
    outcome = await run(mutator, obj, 6)
    assert outcome.decision is not None and outcome.decision.spread is not None
    # The nodes holding two are open again (2 + 1 <= maxSkew): the headroom is gone.
    assert outcome.decision.spread.excluded == frozenset()
    assert {n for n, c in Counter(tops).items() if c == 2} <= set(outcome.decision.spread.counts)


def test_a_review_given_no_node_counts_until_the_watch_shows_it_and_is_never_behind() -> None:
    """This replica's own review that got no decision: its stored pod carries no id to echo
    it by, so it counts on no node for the echo grace (the watch shows the pod by its uid
    meanwhile) and never makes the watch look behind (it did, for 5 s, before: every such
    review halved the guard's room)."""
    clock = Clock(100.0)
    tracker = SiblingTracker(clock=clock, echo_grace=1.0, echo_timeout=5.0)
    tracker.reserve(OWNER, "", "no-decision")
    view = tracker.view(OWNER)
    assert (view.unconfirmed, view.unplaced, view.counts) == (1, 1, {})
    assert tracker.view(OWNER, "no-decision").unplaced == 0  # a retried review: not its own
    clock.now += 2.0
    assert not tracker.watch_behind()
    assert tracker.view(OWNER).unplaced == 0 and tracker.view(OWNER).unconfirmed == 0
    tracker.reserve(OWNER, "", "deleted")
    tracker.release("deleted")
    assert tracker.view(OWNER).unplaced == 0
    # One that carries a decision (held out, label terms): the watch's entry replaces it.
    tracker.reserve(OWNER, "", "held-out")
    tracker.seen_pending("uid-held-out", OWNER, "held-out", "", tracker.replica)
    assert (tracker.view(OWNER).unplaced, tracker.pending) == (1, 1)


def two_replicas_on(nodes: dict[str, list[Any]], **tracker: Any,
                    ) -> tuple[list[Mutator], list[SiblingTracker]]:
    """Two replicas told `--replicas 2`, each with its own tracker (nothing echoed yet;
    `tracker`: SiblingTracker's arguments, as `started` or `clock`)."""
    inv, _ = inventory([node_object(name, images) for name, images in nodes.items()], CATALOG)
    trackers = [SiblingTracker(replica=name, **tracker) for name in ("aaaa0001", "bbbb0002")]
    policy = replace(ScoringPolicy(), replicas=2)
    return [Mutator([CATALOG], inv, policy, siblings=t) for t in trackers], trackers


def echo_to(trackers: list[SiblingTracker], obj: dict[str, Any], outcome: Any, uid: str) -> None:
    placement = pending_placement(apply_patch(obj, list(outcome.patch)))
    for tracker in trackers:
        tracker.seen_pending(uid, OWNER, placement.token, placement.node, placement.by,
                             placement.also, placement.near)


async def test_two_replicas_blind_to_each_other_never_both_take_a_nodes_last_place() -> None:
    """A workload with two pods bound on `full` (maxSkew 3: one place left) and two replicas
    reviewing one pod each at the same moment, neither seeing the other's: neither takes the
    last place, so the scheduler cannot be sent a fourth pod there by both."""
    mutators, trackers = two_replicas_on({"full": [APP], "part": [PART], "empty": []})
    for tracker in trackers:
        for k in range(2):
            tracker.bound(f"bound-{k}", OWNER, "full")
    for n, mutator in enumerate(mutators):
        obj = replica(n)
        outcome = await run(mutator, obj, n)
        assert outcome.decision is not None and outcome.decision.spread is not None
        assert "full" in outcome.decision.spread.excluded
        assert "full" not in outcome.decision.counted_on


async def test_a_replica_alone_on_a_workload_fills_its_nodes_to_max_skew() -> None:
    """Once the watch shows this replica's own review of the workload and none of another
    replica's, it is alone on it: a node's last place is its to take. A review of another
    replica seen for the workload makes them share it (the last places are then split
    between them by a hash). A replica past its first minutes (`started` long ago)."""
    mutators, trackers = two_replicas_on({"full": [APP], "part": [PART], "empty": []},
                                         started=-math.inf)
    tracker = trackers[0]
    for k in range(2):
        tracker.bound(f"bound-{k}", OWNER, "full")
    first = replica(0)
    outcome = await run(mutators[0], first, 0)
    assert outcome.decision is not None and "full" not in outcome.decision.counted_on
    echo_to(trackers[:1], first, outcome, "uid-0")  # its own review, shown by the watch
    tracker.bound("uid-0", OWNER, outcome.decision.counted_on[0],
                  pending_placement(apply_patch(first, list(outcome.patch))).token)
    assert tracker.view(OWNER).established and tracker.view(OWNER).sharing == ()
    second = replica(1)
    outcome = await run(mutators[0], second, 1)
    assert outcome.decision is not None and outcome.decision.spread is not None
    assert "full" not in outcome.decision.spread.excluded  # its last place is open now
    other = replica(2)
    echo_to(trackers[:1], other, await run(mutators[1], other, 2), "uid-2")
    assert tracker.view(OWNER).sharing == ("bbbb0002",)


async def test_a_young_replica_new_to_a_workload_takes_no_last_place_for_a_moment() -> None:
    """In a replica's first minutes, the other replica (`--replicas 2`) not seen at work yet
    may be beginning on the same burst, blind to it for a watch lag: while its own reviews
    of the workload are new (a few of the first echo's lags, PARTNER_MIN_SECONDS at the
    least), its second and later reviews leave a node's last place free and fill at most
    one place of a node. A moment later, none of another replica's reviews seen, it is
    alone on the workload and takes the last place."""
    clock = Clock()
    mutators, trackers = two_replicas_on({"full": [APP], "part": [PART], "empty": []},
                                         clock=clock)
    tracker = trackers[0]
    for k in range(2):
        tracker.bound(f"bound-{k}", OWNER, "full")
    first = replica(0)
    outcome = await run(mutators[0], first, 0)
    assert outcome.decision is not None
    took = outcome.decision.counted_on[0]
    echo_to(trackers[:1], first, outcome, "uid-0")
    tracker.bound("uid-0", OWNER, took,
                  pending_placement(apply_patch(first, list(outcome.patch))).token)
    second = await run(mutators[0], replica(1), 1)
    assert second.decision is not None and second.decision.spread is not None
    closed = second.decision.spread.closed_by
    assert closed.get("full") == "replicas" and closed.get(took) == "replicas"
    clock.now += PARTNER_MIN_SECONDS
    third = await run(mutators[0], replica(2), 2)
    assert third.decision is not None and third.decision.spread is not None
    assert "full" not in third.decision.spread.excluded


def test_a_young_replica_keeps_no_quota_where_max_skew_does_not_split() -> None:
    """maxSkew 2 (a pod's own constraint) and three replicas, none seen yet: a node's places
    do not split between them, so the young replica's quota does not apply (its least would
    be 0 and close every node holding a sibling); the node it filled keeps its last place
    for a replica the hash could pick, were they known."""
    _, index = inventory([node_object(name) for name in ("a", "b", "c")], CATALOG)
    candidates = index.bit("a") | index.bit("b") | index.bit("c")
    siblings = Siblings(OWNER, {"a": 2, "b": 1, "c": 1}, 2, unconfirmed=0, unplaced=0,
                        recent={"me": {"a": 1}}, replica="me", young=True, new=True)
    spread = guarded_spread(siblings, index, candidates, replicas=3)
    assert spread is not None and spread.closed_by == {"a": "replicas"}, spread


def test_a_last_place_has_one_holder_whatever_order_the_replicas_are_known_in() -> None:
    replicas = ["aaaa0001", "bbbb0002", "cccc0003"]
    holders: Counter[str] = Counter()
    for k in range(60):
        node = f"node-{k}"
        picked = {last_place_holder(OWNER, node, order)
                  for order in (replicas, replicas[::-1], replicas[1:] + replicas[:1])}
        assert len(picked) == 1
        holders.update(picked)
    assert set(holders) == set(replicas) and min(holders.values()) >= 10  # spread over them
