"""Which places the spread guard holds and which nodes it closes: pending entries (not for dry
runs or pods without an owner, released by the bind, one per retried review), reviews in flight
and other replicas (a node's last place to one), a hostname shared with an excluded node, and
replicas sharing one Prepared. (Split from test_decide.py: the cluster and replicas are in
replica_cluster.py.)"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.helpers import (
    inventory,
    node_object,
    pod,
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
from webhook.core.decide import Siblings, decide
from webhook.core.scoring import ScoringPolicy
from webhook.core.spread import last_place_holder


async def test_dry_runs_and_pods_without_an_owner_hold_no_place() -> None:
    mutator, tracker = cluster()
    await run(mutator, replica(0), 0, dry_run=True)
    assert tracker.pending == 0
    orphan = pod([APP.ref])
    outcome = await run(mutator, orphan, 1)
    assert tracker.pending == 0
    assert "spread" not in decision_of(orphan, outcome)  # no owner: no guard, as before


async def test_pending_entries_are_released_by_the_bind_the_annotation_names() -> None:
    mutator, tracker = cluster()
    obj = replica(0)
    decision = decision_of(obj, await run(mutator, obj, 0))
    assert tracker.pending == 1
    tracker.bound("uid-after-naming", OWNER, "empty-2", token=decision["id"])
    assert tracker.pending == 0 and dict(tracker.counts(OWNER)) == {"empty-2": 1}


async def test_a_retried_review_is_counted_once_and_steers_as_the_first() -> None:
    """The API server may send one review (one uid) twice, e.g. after a webhook call timed
    out. Pod A's retry must not count A twice, must not see A's own pending entry as a
    sibling (that would steer the retry to another holder than the one A is counted on),
    and pod B of the same owner must then go to another holder than A."""
    mutator, tracker = cluster()
    pod_a, pod_b = replica(0), replica(1)
    first = decision_of(pod_a, await run(mutator, pod_a, 1))
    retry = decision_of(pod_a, await run(mutator, pod_a, 1))  # the same uid
    assert retry == first  # the same answer, the same decision id
    a_node = first["top"][0]["node"]
    assert tracker.pending == 1 and dict(tracker.counts(OWNER)) == {a_node: 1}
    b_node = decision_of(pod_b, await run(mutator, pod_b, 2))["top"][0]["node"]
    assert b_node in HOLDERS and b_node != a_node
    assert tracker.pending == 2 and dict(tracker.counts(OWNER)) == {a_node: 1, b_node: 1}


def test_a_node_sharing_an_excluded_nodes_hostname_is_not_named() -> None:
    """Terms name hostname labels: naming `twin` would prefer `excluded` (same label) too."""
    _, index = inventory([node_object("excluded", [APP], hostname="shared"),
                          node_object("twin", [APP], hostname="shared"),
                          node_object("other", [APP]), node_object("cold")], CATALOG)
    decision = decide(replica(0), [APP], index, replace(DEFAULTS, colocate=False), salt="s",
                      siblings=Siblings(OWNER, {"excluded": 5}, 3))
    assert decision.spread is not None and decision.spread.excluded == {"excluded"}
    assert [node.name for node in decision.named] == ["other"]


@settings(max_examples=40, deadline=None)
@given(pods=st.lists(st.tuples(st.sampled_from(["none", "owner", "excluding"]),
                               st.text(max_size=3)), min_size=1, max_size=6))
@example(pods=[("owner", ""), ("excluding", "")])  # a cached pick, then a pod it does not fit
@example(pods=[("none", ""), ("owner", ""), ("none", "")])
def test_pods_sharing_one_prepared_decide_as_alone(pods: list[tuple[str, str]]) -> None:
    """Replicas of a template share one Prepared (the memo) and its caches; each pod's
    decision is the one it would get alone, whatever pods came before it."""
    from webhook.core.decide import finish
    from webhook.core.pods import pod_tolerations
    from webhook.core.prepare import prepare

    many = [f"holder-{i}" for i in range(40)]
    _, index = inventory([node_object(n, [APP]) for n in many]
                         + [node_object(n) for n in EMPTY], CATALOG)
    obj = replica(0)
    policy = replace(DEFAULTS, max_nodes=12)  # more holders than named: picks are salted
    shared = prepare([APP], pod_tolerations(obj), index, policy)
    siblings = {"none": None, "owner": Siblings(OWNER, {}, 3),
                "excluding": Siblings(OWNER, {f"holder-{i}": 5 - i % 2 * 4
                                              for i in range(0, 40, 3)}, 3)}
    for kind, salt in pods:
        alone = prepare([APP], pod_tolerations(obj), index, policy)
        got = finish(obj, shared, index, policy, salt, siblings[kind], token="t")
        want = finish(obj, alone, index, policy, salt, siblings[kind], token="t")
        assert (got.reason, got.patch, got.cut) == (want.reason, want.patch, want.cut)


def test_the_guard_reads_the_pending_part_and_the_reviews_in_flight() -> None:
    """The floor is the bound pods': with n2's only sibling pending, the floor is 0 and n1 (2
    siblings) is at the unconfirmed limit; bound, the floor is 1 and n1 may take one more. A
    sibling another replica may be placing on n1 right now closes n1 too, unless every
    replica is known and the last-place hash makes n1 this replica's: the others keep to the
    guard's headroom there, and the reviews in flight are not counted on it."""
    _, index = inventory([node_object(n, [APP]) for n in ("n1", "n2")], CATALOG)
    obj = replica(0)
    other = "bbbb0002"
    replicas = [f"aaaa{k:04d}" for k in range(20)]
    mine = next(r for r in replicas if last_place_holder(OWNER, "n1", (r, other)) == r)
    theirs = next(r for r in replicas if last_place_holder(OWNER, "n1", (r, other)) != r)

    def excluded(policy: ScoringPolicy = DEFAULTS, **extra: Any) -> frozenset[str]:
        siblings = Siblings(OWNER, {"n1": 2, "n2": 1}, 3, unconfirmed=1, **extra)
        spread = decide(obj, [APP], index, policy, salt="s", siblings=siblings).spread
        assert spread is not None
        return spread.excluded

    assert excluded() == frozenset()
    assert excluded(pending={"n2": 1}) == {"n1"}
    flying: dict[str, Any] = {"in_flight": {"n1": 1}, "others": 1, "active": (other,)}
    assert excluded(replica=theirs, **flying) == {"n1"}
    assert excluded(replica=mine, **flying) == frozenset()
    # A replica not known yet (--replicas 3, one other active): n1 may be its, in flight.
    assert excluded(replace(DEFAULTS, replicas=3), replica=mine, **flying) == {"n1"}


def test_a_nodes_last_place_goes_to_one_replica() -> None:
    """n1 holds two bound siblings (maxSkew 3): one place left. With another replica about, a
    replica established on the workload takes it alone, or by the hash over those sharing
    it; one not established takes it only if none shares the workload, every replica is
    known (--replicas), and the hash over all the active ones picks it."""
    _, index = inventory([node_object(n, [APP]) for n in ("n1", "n2")], CATALOG)
    obj = replica(0)
    other = "bbbb0002"
    replicas = [f"aaaa{k:04d}" for k in range(20)]
    mine = next(r for r in replicas if last_place_holder(OWNER, "n1", (r, other)) == r)
    theirs = next(r for r in replicas if last_place_holder(OWNER, "n1", (r, other)) != r)

    def n1_open(me: str, policy: ScoringPolicy = DEFAULTS, **extra: Any) -> bool:
        siblings = Siblings(OWNER, {"n1": 2}, 3, unconfirmed=0, unplaced=0, others=1,
                            active=(other,), replica=me, **extra)
        spread = decide(obj, [APP], index, policy, salt="s", siblings=siblings).spread
        assert spread is not None
        assert ("n1" in spread.excluded) == (spread.closed_by.get("n1") == "replicas")
        return "n1" not in spread.excluded

    assert n1_open(theirs, established=True)
    assert n1_open(mine, established=True, sharing=(other,))
    assert not n1_open(theirs, established=True, sharing=(other,))
    assert n1_open(mine)
    assert not n1_open(theirs)
    assert not n1_open(mine, sharing=(other,))
    assert not n1_open(mine, replace(DEFAULTS, replicas=3))
