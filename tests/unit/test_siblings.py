"""The sibling tracker: bound pods from the watch, pending reviews, expiry, relist."""

from __future__ import annotations

from tests.helpers import Clock
from webhook.inventory.siblings import SiblingTracker


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


def test_pending_replicas_weighed_alike_count_as_the_scheduler_spreads_them() -> None:
    """A burst reviewed before any bind: each pending replica may be bound to any of the
    holders its decision weighed alike; counted fully on every one of them, 3 pending on 3
    holders would read 3 a holder and close them all. They count as the scheduler spreads
    them: at most ceil(p / k) + 1 a holder, never more than p."""
    tracker = SiblingTracker()
    holders = ("a", "b", "c")

    def guard_sum(view_owner: str, token: str | None = None) -> dict[str, int]:
        view = tracker.view(view_owner, token)
        return {n: view.counts.get(n, 0) + view.maybe.get(n, 0) for n in holders}

    tracker.reserve("rs", "a", "t1", also=("b", "c"))
    assert guard_sum("rs") == {"a": 1, "b": 1, "c": 1}  # one: on each, as before
    tracker.reserve("rs", "b", "t2", also=("a", "c"))
    assert guard_sum("rs") == {"a": 2, "b": 2, "c": 2}  # two: ceil(2/3) + 1 = 2
    tracker.reserve("rs", "c", "t3", also=("a", "b"))
    assert guard_sum("rs") == {"a": 2, "b": 2, "c": 2}  # three: 2 a holder, not 3
    assert guard_sum("rs", "t3") == {"a": 2, "b": 2, "c": 2}  # its own left out: two
    for i in range(4, 8):
        tracker.reserve("rs", "a", f"t{i}", also=("b", "c"))
    assert guard_sum("rs") == {"a": 4, "b": 4, "c": 4}  # seven: ceil(7/3) + 1
    # Entries of another group (only two holders alike) count on their own.
    tracker.reserve("rs", "a", "u1", also=("b",))
    assert guard_sum("rs") == {"a": 5, "b": 5, "c": 4}
    # Bound, they count where they are; released, they are gone.
    for i in range(1, 8):
        tracker.release(f"t{i}")
    tracker.release("u1")
    assert guard_sum("rs") == {"a": 0, "b": 0, "c": 0}
    assert not tracker._groups


def test_pending_replicas_weighed_nearly_as_much_count_there_in_full() -> None:
    """Nodes a decision weighed nearly as much (`near`) are counted in `maybe` for every
    pending replica: the scheduler takes one of them only now and then, so they are not part
    of the group the alike nodes' counts are spread over. The asking review's own entry is
    left out everywhere; a release takes the entry off every node."""
    tracker = SiblingTracker()
    for i in range(5):
        tracker.reserve("rs", "a", f"t{i}", also=("b",), near=("c",))
    view = tracker.view("rs")
    assert dict(view.maybe)["c"] == 5
    # Five on two alike holders: ceil(5 / 2) + 1 = 4 a holder, not 5.
    assert {n: view.counts.get(n, 0) + view.maybe.get(n, 0) for n in "ab"} == {"a": 4, "b": 4}
    assert tracker.view("rs", "t0").maybe.get("c") == 4
    for i in range(5):
        tracker.release(f"t{i}")
    assert dict(tracker.view("rs").maybe) == {} and not tracker._groups
