"""The sibling tracker: bound pods from the watch, pending reviews, expiry, relist."""

from __future__ import annotations

from webhook.inventory.siblings import SiblingTracker


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_bound_pods_count_per_owner_and_node() -> None:
    tracker = SiblingTracker()
    tracker.bound("p1", "rs-a", "n1")
    tracker.bound("p2", "rs-a", "n1")
    tracker.bound("p3", "rs-a", "n2")
    tracker.bound("p4", "rs-b", "n1")
    assert dict(tracker.counts("rs-a")) == {"n1": 2, "n2": 1}
    assert dict(tracker.counts("rs-b")) == {"n1": 1}
    assert dict(tracker.counts("nobody")) == {}
    tracker.bound("p1", "rs-a", "n1")  # the same event again (a resync) changes nothing
    assert dict(tracker.counts("rs-a")) == {"n1": 2, "n2": 1}
    tracker.gone("p1")
    tracker.gone("p1")
    tracker.gone("p3")
    assert dict(tracker.counts("rs-a")) == {"n1": 1}
    tracker.gone("p2")
    tracker.gone("p4")
    assert tracker.owners == 0 and tracker.bound_pods == 0  # nothing left behind


def test_pending_is_released_by_its_bind_wherever_the_pod_lands() -> None:
    tracker = SiblingTracker()
    tracker.reserve("rs-a", "n1", "tok1")
    tracker.reserve("rs-a", "n1", "tok2")
    assert dict(tracker.counts("rs-a")) == {"n1": 2}
    # The scheduler put the first pod on n2: its pending entry goes, the bind counts on n2.
    tracker.bound("uid-1", "rs-a", "n2", token="tok1")
    assert dict(tracker.counts("rs-a")) == {"n1": 1, "n2": 1}
    tracker.bound("uid-2", "rs-a", "n1", token="tok2")
    assert dict(tracker.counts("rs-a")) == {"n1": 1, "n2": 1}
    assert tracker.pending == 0


def test_pending_expires() -> None:
    clock = Clock()
    tracker = SiblingTracker(pending_seconds=30, clock=clock)
    tracker.reserve("rs-a", "n1", "old")
    clock.now = 20
    tracker.reserve("rs-a", "n2", "new")
    clock.now = 30
    assert tracker.expire() == 1
    assert dict(tracker.counts("rs-a")) == {"n2": 1}
    clock.now = 50
    assert tracker.expire() == 1
    assert tracker.owners == 0
    tracker.bound("uid", "rs-a", "n1", token="old")  # a late bind of an expired entry
    assert dict(tracker.counts("rs-a")) == {"n1": 1}


def test_pending_is_bounded_oldest_first() -> None:
    tracker = SiblingTracker(max_pending=2)
    for i in range(3):
        tracker.reserve("rs-a", f"n{i}", f"t{i}")
    assert tracker.pending == 2
    assert dict(tracker.counts("rs-a")) == {"n1": 1, "n2": 1}


def test_a_review_does_not_see_its_own_pending_entry() -> None:
    """counts(owner, token): what a retried review (same token) saw the first time."""
    tracker = SiblingTracker()
    tracker.bound("p1", "rs-a", "n1")
    tracker.reserve("rs-a", "n1", "tok1")
    tracker.reserve("rs-a", "n2", "tok2")
    tracker.reserve("rs-b", "n3", "tok3")
    assert dict(tracker.counts("rs-a", "tok1")) == {"n1": 1, "n2": 1}
    assert dict(tracker.counts("rs-a", "tok2")) == {"n1": 2}
    assert dict(tracker.counts("rs-a", "tok3")) == {"n1": 2, "n2": 1}  # another owner's
    assert dict(tracker.counts("rs-a", "unknown")) == dict(tracker.counts("rs-a")) == {
        "n1": 2, "n2": 1}
    assert dict(tracker.counts("rs-b", "tok3")) == {}
    assert dict(tracker.counts("rs-a")) == {"n1": 2, "n2": 1}  # nothing changed
