"""Webhook replicas share the spread guard's room through the pod watch: a pod stored and not
bound yet counts as pending where its decision says, whichever replica reviewed it; a replica
keeps room for the other active replicas' reviews in flight; the floor is the scheduler's (bound
pods only); while its own reviews go unseen too long, a replica falls back to its share."""

from __future__ import annotations

from typing import Any

import orjson

from tests.helpers import Clock
from tests.unit.test_live_compact import APP, CATALOG, OWNER, bound
from webhook.core.pods import (
    DECISION_ANNOTATION,
    NEAR_TOP_WEIGHT,
    PendingPlacement,
    pending_placement,
)
from webhook.core.spread import spread_state
from webhook.inventory.live import LiveInventory
from webhook.inventory.siblings import SiblingTracker, new_replica_id


def stored(name: str, decision: dict[str, Any] | None) -> dict[str, Any]:
    """A ReplicaSet's pod as the watch shows it after admission: named, not bound."""
    obj = bound(name, "", [APP.ref])
    del obj["spec"]["nodeName"]
    obj["status"] = {"phase": "Pending"}
    if decision is not None:
        obj["metadata"]["annotations"] = {DECISION_ANNOTATION: orjson.dumps(decision).decode()}
    return obj


def steered(token: str, by: str, node: str) -> dict[str, Any]:
    return {"v": 3, "id": token, "by": by, "podBytes": 1, "meanBytes": 0, "preferredNodes": 1,
            "top": [{"node": node, "bytes": 1, "siblings": 0}], "terms": 2}


# -- the decision annotation, read back ----------------------------------------------------------

def test_pending_placement_reads_the_decision_a_stored_pod_carries() -> None:
    assert pending_placement(stored("a", steered("t1", "r1", "n1"))) == \
        PendingPlacement("t1", "r1", "n1")
    # Held out (a `top` but no terms appended): pending on no node.
    held = {**steered("t2", "r1", "n1"), "terms": 0}
    assert pending_placement(stored("b", held)) == PendingPlacement("t2", "r1", "")
    assert pending_placement(stored("c", None)) == PendingPlacement(None, "", "")
    broken = stored("d", None)
    broken["metadata"]["annotations"] = {DECISION_ANNOTATION: '{"id": 5, "by": [], "top": 3}'}
    assert pending_placement(broken) == PendingPlacement(None, "", "")
    empty_top = {**steered("t3", "r2", "n1"), "top": []}
    assert pending_placement(stored("e", empty_top)) == PendingPlacement("t3", "r2", "")
    # With weights (the guard on): the nodes weighed alike, then those weighed nearly as much.
    weighed = {**steered("t4", "r2", "n1"), "top": [
        {"node": "n1", "bytes": 1, "siblings": 1, "weight": 100},
        {"node": "n2", "bytes": 1, "siblings": 1, "weight": 100},
        {"node": "n3", "bytes": 1, "siblings": 1, "weight": 100 - NEAR_TOP_WEIGHT}]}
    assert pending_placement(stored("f", weighed)) == PendingPlacement(
        "t4", "r2", "n1", ("n2",), ("n3",))


# -- the tracker -------------------------------------------------------------------------------

def test_another_replicas_stored_pod_counts_until_its_bind_wherever_it_lands() -> None:
    tracker = SiblingTracker(replica="me")
    tracker.seen_pending("uid-1", OWNER, "t1", "n1", "other")
    tracker.seen_pending("uid-1", OWNER, "t1", "n1", "other")  # the same event again
    view = tracker.view(OWNER)
    assert dict(view.counts) == {"n1": 1} and dict(view.pending) == {"n1": 1}
    assert view.unconfirmed == 1 and tracker.others() == 1
    # The scheduler bound it elsewhere: n1 loses it, n2 counts it, nothing is pending.
    tracker.bound("uid-1", OWNER, "n2", "t1")
    view = tracker.view(OWNER)
    assert dict(view.counts) == {"n2": 1} and dict(view.pending) == {}
    assert view.unconfirmed == 0
    # A late replay of the stored event does not bring the pending entry back.
    tracker.seen_pending("uid-1", OWNER, "t1", "n1", "other")
    assert dict(tracker.counts(OWNER)) == {"n2": 1} and tracker.pending == 0


def test_a_stored_pod_without_a_decision_is_unconfirmed_on_no_node() -> None:
    tracker = SiblingTracker(replica="me")
    tracker.seen_pending("uid-1", OWNER, None, "", "")
    assert tracker.unconfirmed(OWNER) == 1 and dict(tracker.counts(OWNER)) == {}
    tracker.gone("uid-1")  # deleted before any bind
    assert tracker.unconfirmed(OWNER) == 0 and tracker.pending == 0
    tracker.seen_pending("uid-2", OWNER, None, "", "")
    tracker.bound("uid-2", OWNER, "n3")
    assert tracker.unconfirmed(OWNER) == 0 and dict(tracker.counts(OWNER)) == {"n3": 1}


def test_this_replicas_own_review_is_counted_once_and_echoed() -> None:
    tracker = SiblingTracker(replica="me")
    tracker.reserve(OWNER, "n1", "t1")
    tracker.seen_pending("uid-1", OWNER, "t1", "n1", "me")  # the watch echoes it
    assert dict(tracker.counts(OWNER)) == {"n1": 1} and tracker.pending == 1
    assert tracker.others() == 0  # its own review makes no other replica active


def test_room_is_kept_for_the_other_active_replicas_reviews_in_flight() -> None:
    """Any other replica seen reviewing (any workload) in the last `active_seconds` may be
    reviewing this workload now: each is taken to have as many reviews in flight on a node as
    this replica has there not yet echoed by the watch."""
    clock = Clock()
    tracker = SiblingTracker(replica="me", clock=clock, active_seconds=5.0)
    tracker.reserve(OWNER, "n1", "t1")
    tracker.reserve(OWNER, "n1", "t2")
    tracker.reserve(OWNER, "n2", "t3")
    assert tracker.view(OWNER).in_flight == {}  # no other replica seen: nothing in flight
    tracker.seen_pending("uid-9", OWNER, "t9", "n5", "r2")
    tracker.seen_pending("uid-8", OWNER, "t8", "n5", "r3")
    assert tracker.others() == 2
    assert tracker.view(OWNER).in_flight == {"n1": 4, "n2": 2}  # 2 others x own unechoed
    assert tracker.view(OWNER, "t1").in_flight == {"n1": 2, "n2": 2}  # its own left out
    tracker.seen_pending("uid-1", OWNER, "t1", "n1", "me")
    assert tracker.view(OWNER).in_flight == {"n1": 2, "n2": 2}
    clock.now = 5.5  # the others not seen for longer than active_seconds
    assert tracker.others() == 0 and tracker.view(OWNER).in_flight == {}
    tracker.expire()
    # Seen reviewing another workload: active, and so taken to be reviewing this one too.
    tracker.seen_pending("uid-7", "another-owner", "t7", "n6", "r2")
    assert tracker.others() == 1 and tracker.view(OWNER).in_flight == {"n1": 1, "n2": 1}


def test_own_reviews_are_in_flight_on_every_node_they_may_land_on() -> None:
    """An own review not echoed yet may be bound to its node, or to one weighed alike or
    nearly as much: the others' reviews of the same moment are taken to be as many on each
    of them, until the watch shows it."""
    tracker = SiblingTracker(replica="me")
    tracker.reserve(OWNER, "n1", "t1", also=("n2",), near=("n3",))
    tracker.seen_pending("uid-9", "another-owner", "t9", "n5", "r2")  # one other, active
    assert tracker.view(OWNER).in_flight == {"n1": 1, "n2": 1, "n3": 1}
    assert tracker.view(OWNER, "t1").in_flight == {}  # its own left out, on every node
    tracker.seen_pending("uid-1", OWNER, "t1", "n1", "me", ("n2",), ("n3",))
    assert tracker.view(OWNER).in_flight == {}


def test_a_replica_stays_established_on_a_workload_for_the_burst() -> None:
    """The watch showing one of its own reviews makes a replica established on the workload
    for `burst_seconds` (a minute by default): a burst's reviews spread over tens of
    seconds keep it so."""
    clock = Clock()
    tracker = SiblingTracker(replica="me", clock=clock)
    tracker.reserve(OWNER, "n1", "t1")
    assert not tracker.view(OWNER).established
    tracker.seen_pending("uid-1", OWNER, "t1", "n1", "me")
    clock.now = 59.0
    assert tracker.view(OWNER).established
    clock.now = 61.0
    assert not tracker.view(OWNER).established


def test_the_watch_is_behind_while_an_own_review_waits_past_the_grace() -> None:
    clock = Clock()
    tracker = SiblingTracker(replica="me", clock=clock, echo_grace=1.0, echo_timeout=5.0)
    tracker.reserve(OWNER, "n1", "t1")
    clock.now = 0.9
    assert not tracker.watch_behind()
    clock.now = 1.1
    assert tracker.watch_behind()
    tracker.seen_pending("uid-1", OWNER, "t1", "n1", "me")
    assert not tracker.watch_behind()
    tracker.reserve(OWNER, "n1", "t2")  # never stored (refused after admission)
    clock.now = 3.0
    assert tracker.watch_behind()
    clock.now = 6.2
    assert not tracker.watch_behind()  # past the timeout: taken as never stored


def test_replica_ids_differ_per_process_start() -> None:
    ids = {new_replica_id() for _ in range(50)}
    assert len(ids) == 50 and all(len(i) == 8 and int(i, 16) >= 0 for i in ids)


# -- the floor is the scheduler's --------------------------------------------------------------

def test_pending_pods_do_not_raise_the_floor() -> None:
    """Two candidates; n2 holds one sibling. Bound there, the floor is 1 and n1 (2 siblings)
    may take a third (3 + 1 - 1 <= 3 - 1 while unconfirmed); only pending there, the
    scheduler's floor is 0 and n1 is full (a pod bound elsewhere leaves n2 empty)."""
    counts = {"n1": 2, "n2": 1}
    bound_there = spread_state(counts, ["n1", "n2"], 2, 3, unconfirmed=True)
    pending_there = spread_state(counts, ["n1", "n2"], 2, 3, unconfirmed=True,
                                 pending={"n2": 1})
    assert bound_there.floor == 1 and "n1" not in bound_there.excluded
    assert pending_there.floor == 0 and "n1" in pending_there.excluded


def test_siblings_in_flight_close_a_node_before_its_count_does() -> None:
    state = spread_state({"n1": 1}, ["n1"], 4, 3, unconfirmed=True, in_flight={"n1": 1})
    assert state.excluded == {"n1"}
    assert spread_state({"n1": 1}, ["n1"], 4, 3, unconfirmed=True).excluded == frozenset()


# -- the live inventory's pod watch -------------------------------------------------------------

def test_the_live_pod_watch_counts_other_replicas_pending_pods() -> None:
    live = LiveInventory(None, [CATALOG])
    me = live.siblings.replica
    live._pod_event("ADDED", "uid-a", stored("a", steered("ta", "other", "n1")))
    live._pod_event("ADDED", "uid-b", stored("b", steered("tb", "other", "n1")))
    live._pod_event("ADDED", "uid-c", stored("c", None))
    view = live.siblings.view(OWNER)
    assert dict(view.counts) == {"n1": 2} and view.unconfirmed == 3
    assert live.siblings.others() == 1 and me != "other"
    # a: bound where it was expected; b: bound elsewhere; c: deleted before any bind.
    live._pod_event("MODIFIED", "uid-a", {**bound("a", "n1", [APP.ref]),
                                         "metadata": stored("a", steered("ta", "other", "n1"))
                                         ["metadata"]})
    live._pod_event("MODIFIED", "uid-b", {**bound("b", "n2", [APP.ref]),
                                         "metadata": stored("b", steered("tb", "other", "n1"))
                                         ["metadata"]})
    live._pod_event("DELETED", "uid-c", stored("c", None))
    view = live.siblings.view(OWNER)
    assert dict(view.counts) == {"n1": 1, "n2": 1} and dict(view.pending) == {}
    assert view.unconfirmed == 0
    # A pod deleted while still pending releases its entry (the DELETED event's object).
    live._pod_event("ADDED", "uid-d", stored("d", steered("td", "other", "n3")))
    live._pod_event("DELETED", "uid-d", stored("d", steered("td", "other", "n3")))
    assert dict(live.siblings.counts(OWNER)) == {"n1": 1, "n2": 1}
    assert live.siblings.pending == 0


def test_a_replica_seen_minutes_ago_still_counts_between_bursts() -> None:
    """A replica that reviews only the concurrent part of bursts is seen once per burst; the
    others must still know of it when the next burst starts, minutes later."""
    clock = Clock()
    tracker = SiblingTracker(replica="me", clock=clock)
    tracker.seen_pending("uid-1", OWNER, "t1", "n1", "r2")
    clock.now = 240.0
    tracker.expire()
    assert tracker.others() == 1
    clock.now = 301.0
    tracker.expire()
    assert tracker.others() == 0
