"""Place quotas: while replicas review one workload at the same moments, each fills at most
its quota of a node's places and leaves the others' unused quotas free (core/spread.py); the
reviews counted against them (inventory/recent_reviews.py); how long another replica's review
marks it at work (siblings.partner_seconds)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import Clock
from webhook.core.spread import place_quotas, shared_room, spread_state
from webhook.inventory.recent_reviews import PARTNER_LAGS, PARTNER_MIN_SECONDS, RecentReviews
from webhook.inventory.siblings import PARTNER_SECONDS, SiblingTracker


@given(st.sets(st.text("abcdef0123456789", min_size=8, max_size=8), min_size=1, max_size=4),
       st.integers(1, 6), st.text(min_size=1, max_size=12))
def test_quotas_sum_to_max_skew_and_every_replica_agrees(
        replicas: set[str], max_skew: int, node: str) -> None:
    """Whatever order a replica lists the others in, the split is the same, as even as it
    goes, and sums to maxSkew: together they never fill a node past it."""
    ordered = tuple(sorted(replicas))
    quotas = dict(place_quotas("owner", node, ordered, max_skew))
    assert dict(place_quotas("owner", node, tuple(reversed(ordered)), max_skew)) == quotas
    assert sum(quotas.values()) == max_skew and set(quotas) == replicas
    assert max(quotas.values()) - min(quotas.values()) <= 1


def test_the_larger_quota_goes_to_different_replicas_on_different_nodes() -> None:
    holders = {max(dict(place_quotas("owner", f"node-{i}", ("a", "b"), 3)).items(),
                   key=lambda item: item[1])[0] for i in range(20)}
    assert holders == {"a", "b"}


def quota_of(replica: str, node: str) -> int:
    return dict(place_quotas("owner", node, ("a", "b"), 3))[replica]


def test_the_others_unused_quota_is_kept_free_and_an_own_full_quota_closes_the_node() -> None:
    node = next(f"n{i}" for i in range(50) if quota_of("a", f"n{i}") == 2)
    # b has not reviewed here lately: its whole quota (1) is kept for it.
    reserved, spent = shared_room("owner", "a", ("b",), {}, 3)
    assert reserved(node) == quota_of("b", node) == 1 and not spent(node)
    # b's review seen here: nothing more to keep; a's two reviews fill its own quota.
    reserved, spent = shared_room("owner", "a", ("b",), {"a": {node: 2}, "b": {node: 1}}, 3)
    assert reserved(node) == 0 and spent(node)
    # Through spread_state: 1 sibling + b's unused place + this pod = 3: open; 2 + 1 + 1: not.
    reserved, spent = shared_room("owner", "a", ("b",), {"a": {node: 1}}, 3)
    open_one = spread_state({node: 1}, [node], 8, 3, unconfirmed=False, reserved=reserved,
                            quota_spent=spent, sharers=2)
    assert node not in open_one.excluded
    closed = spread_state({node: 2}, [node], 8, 3, unconfirmed=False, reserved=reserved,
                          quota_spent=spent, sharers=2)
    assert node in closed.excluded and closed.closed_by[node] == "replicas"


def test_recent_reviews_keep_own_twice_as_long_and_leave_a_retried_review_out() -> None:
    clock = Clock(100.0)
    recent = RecentReviews("me", echo_grace=1.0, clock=clock)
    recent.own("w", "t1", ("n1", "n2"))
    recent.other("w", "peer", ("n1",))
    assert recent.of("w") == {"me": {"n1": 1, "n2": 1}, "peer": {"n1": 1}}
    assert recent.of("w", "t1") == {"me": {}, "peer": {"n1": 1}}
    recent.own("w", "t1", ("n1", "n2"))  # the same review sent again: counted once
    assert recent.of("w")["me"] == {"n1": 1, "n2": 1}
    clock.now += 1.5  # past the others' window (at its least, no lag learned), not own
    assert recent.of("w") == {"me": {"n1": 1, "n2": 1}}
    clock.now += 1.0
    assert recent.of("w") == {} and len(recent) == 0
    recent.other("w2", "peer", ("n3",))
    clock.now += 5.0
    recent.expire()
    assert len(recent) == 0 and recent.of("w2") == {}


@pytest.mark.parametrize(("lag", "window"), [
    (0.0, PARTNER_MIN_SECONDS), (0.1, PARTNER_LAGS * 0.1), (0.9, 1.0)])
def test_another_replica_counts_at_work_for_a_few_watch_lags(lag: float, window: float) -> None:
    """The window follows how late the watch shows this replica's own reviews, and a review
    still waiting for its echo counts as that late already."""
    clock = Clock(100.0)
    tracker = SiblingTracker(clock=clock, replica="me")
    tracker.reserve("w", "n1", "t1")
    clock.now += lag
    assert tracker.partner_seconds() == pytest.approx(window)  # waiting: as late
    tracker.seen_pending("uid-1", "w", "t1", "n1", "me")  # the echo
    assert tracker.partner_seconds() == pytest.approx(window)
    clock.now += 600.0  # the lag learned fades
    assert tracker.partner_seconds() == pytest.approx(PARTNER_MIN_SECONDS)


def test_a_partner_is_another_replica_whose_review_of_the_workload_was_seen_in_the_window(
        ) -> None:
    clock = Clock(100.0)
    tracker = SiblingTracker(clock=clock, replica="me")
    tracker.seen_pending("uid-1", "w", "t1", "n1", "peer")
    assert set(tracker.view("w").recent) == {"peer"}
    clock.now += PARTNER_MIN_SECONDS * 1.5
    assert set(tracker.view("w").recent) == set()


def test_a_replica_seen_reviewing_the_workload_lately_stays_a_partner_between_reviews(
        ) -> None:
    """Under load a burst's reviews come a second apart: a partner whose last review has
    left the review window is still one for PARTNER_SECONDS, so the two do not drop out of
    the quotas between two reviews (the replica that does takes a last place)."""
    clock = Clock(100.0)
    tracker = SiblingTracker(clock=clock, replica="me")
    tracker.seen_pending("uid-1", "w", "t1", "n1", "peer")
    clock.now += 1.5
    view = tracker.view("w")
    assert view.recent == {} and view.lately == ("peer",)
    clock.now += PARTNER_SECONDS
    assert tracker.view("w").lately == ()
