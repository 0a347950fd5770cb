"""Placement with the spread guard: siblings keep a workload within maxSkew, and a burst of
replicas reviewed before any bind spreads its top preference over the holders."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.helpers import (
    AMD64,
    apply_patch,
    image,
    inventory,
    node_object,
    pod,
    preferred_terms,
    review,
    validate_pod,
    weight_by_hostname,
)
from webhook.core.admission import parse_review
from webhook.core.annotation import TOP_NODES_IN_DECISION
from webhook.core.decide import Siblings, decide
from webhook.core.layers import Platform
from webhook.core.pods import DECISION_ANNOTATION, NEAR_TOP_WEIGHT
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.core.spread import last_place_holder
from webhook.inventory.siblings import SiblingTracker
from webhook.registry.catalog import StaticCatalog
from webhook.serving.mutate import Mutator, Outcome

APP = image("registry.example.com/team/app:v1", {AMD64: [("base", 80 * MiB), ("code", 20 * MiB)]})
CATALOG = StaticCatalog([APP])
HOLDERS = [f"holder-{i}" for i in range(4)]
EMPTY = [f"empty-{i}" for i in range(4)]
OWNER = "3b0e3c58-5f7e-4c2e-9a57-rs0000000001"


def replica(index: int, **extra: Any) -> dict[str, Any]:
    """A ReplicaSet's pod as it reaches admission: generateName, no name, no uid."""
    obj = pod([APP.ref], **extra)
    metadata = obj["metadata"]
    del metadata["name"]
    metadata.update(generateName="web-7d4b9c-", ownerReferences=[
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c", "uid": OWNER,
         "controller": True, "blockOwnerDeletion": True}])
    return obj


DEFAULTS = ScoringPolicy()


def cluster(policy: ScoringPolicy = DEFAULTS, tracker: SiblingTracker | None = None,
            holders: Sequence[str] = HOLDERS) -> tuple[Mutator, SiblingTracker]:
    inv, _ = inventory([node_object(n, [APP]) for n in holders]
                       + [node_object(n) for n in EMPTY], CATALOG)
    tracker = tracker or SiblingTracker()
    return Mutator([CATALOG], inv, policy, siblings=tracker), tracker


async def run(mutator: Mutator, obj: dict[str, Any], n: int, dry_run: bool = False) -> Outcome:
    uid = f"0f8c5a2e-1111-4b3c-9d7e-{n:012d}"
    return await mutator.review(parse_review(orjson.dumps(review(obj, uid=uid,
                                                                 dry_run=dry_run))))


def decision_of(obj: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
    return annotation(obj, outcome.patch)


def annotation(obj: dict[str, Any], patch: Any) -> dict[str, Any]:
    """The decision annotation of `obj` once `patch` is applied (the pod validated)."""
    patched = apply_patch(obj, list(patch))
    validate_pod(patched)
    result: dict[str, Any] = orjson.loads(patched["metadata"]["annotations"][DECISION_ANNOTATION])
    return result


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


def test_a_pod_of_the_experiment_given_no_preference_still_says_its_group() -> None:
    """in_experiment: an unsteered decision of a pod in the holdout experiment gets the
    annotation alone (its group, workload, bytes and why), and no affinity; a steered one
    or one outside the experiment is returned as it is."""
    from webhook.core.annotation import DECISION_VERSION
    from webhook.core.decide import in_experiment
    from webhook.core.holdout import Group
    from webhook.core.reasons import Reason

    _, cold = inventory([node_object(n) for n in EMPTY], CATALOG)
    obj = pod([APP.ref])
    unsteered = decide(obj, [APP], cold, DEFAULTS, salt="s")
    assert unsteered.reason is Reason.BELOW_THRESHOLD and not unsteered.patch
    for group in (Group.STEERED, Group.HOLDOUT):
        marked = in_experiment(obj, unsteered, group, "0123456789abcdef", "tok")
        assert marked.reason is Reason.BELOW_THRESHOLD and not marked.patched
        patched = apply_patch(obj, list(marked.patch))
        validate_pod(patched)
        assert "affinity" not in patched["spec"]
        assert orjson.loads(patched["metadata"]["annotations"][DECISION_ANNOTATION]) == {
            "v": DECISION_VERSION, "id": "tok", "group": group.value,
            "workload": "0123456789abcdef", "podBytes": unsteered.pod_bytes,
            "skipped": "below_threshold"}
    assert in_experiment(obj, unsteered, Group.NONE, "0123456789abcdef", "tok") is unsteered
    _, warm = inventory([node_object(n, [APP]) for n in HOLDERS]
                        + [node_object(n) for n in EMPTY], CATALOG)
    steered = decide(obj, [APP], warm, DEFAULTS, salt="s")
    assert steered.patched
    assert in_experiment(obj, steered, Group.STEERED, "0123456789abcdef", "tok") is steered
    # Held out: not patched, but it carries its own annotation (what it would have preferred).
    held = decide(obj, [APP], warm, DEFAULTS, salt="s", group=Group.HOLDOUT,
                  workload="0123456789abcdef")
    assert held.reason is Reason.HOLDOUT and held.patch
    assert in_experiment(obj, held, Group.HOLDOUT, "0123456789abcdef", "tok") is held


def test_the_annotation_carries_what_the_caller_gave() -> None:
    """decide passes its token, stand-ins, group and workload to the annotation; without
    them the annotation has none of those fields."""
    from webhook.core.holdout import Group

    _, index = inventory([node_object(n, [APP]) for n in HOLDERS]
                         + [node_object(n) for n in EMPTY], CATALOG)
    obj = pod([APP.ref])

    def annotation(decision: Any) -> dict[str, Any]:
        assert decision.patched
        patched = apply_patch(obj, list(decision.patch))
        doc: dict[str, Any] = orjson.loads(
            patched["metadata"]["annotations"][DECISION_ANNOTATION])
        return doc

    carried = annotation(decide(obj, [APP], index, DEFAULTS, salt="s", token="tok",
                                stand_ins=2, group=Group.STEERED,
                                workload="0123456789abcdef"))
    assert (carried["id"], carried["standIns"], carried["group"], carried["workload"]) == (
        "tok", 2, "steered", "0123456789abcdef")
    bare = annotation(decide(obj, [APP], index, DEFAULTS, salt="s"))
    assert not {"id", "standIns", "group", "workload"} & set(bare)


def test_each_node_named_says_how_many_siblings_it_holds() -> None:
    """With the spread guard on, the annotation's top nodes and Decision.preferred carry each
    node's sibling count, 0 for a node holding none; without it, no count at all."""
    _, index = inventory([node_object(n, [APP]) for n in HOLDERS]
                         + [node_object(n) for n in EMPTY], CATALOG)
    obj = replica(0)
    counts = {"holder-0": 1, "holder-1": 1, "holder-2": 2}
    decision = decide(obj, [APP], index, DEFAULTS, salt="s",
                      siblings=Siblings(OWNER, counts, 5))
    assert decision.patched
    preferred = [(score.node.name, score.siblings) for score in decision.preferred]
    assert preferred[0] == ("holder-3", 0)  # no sibling: the best
    assert sorted(preferred) == sorted((name, counts.get(name, 0)) for name in HOLDERS)
    doc = orjson.loads(apply_patch(obj, list(decision.patch))["metadata"]["annotations"][
        DECISION_ANNOTATION])
    assert [(entry["node"], entry["siblings"]) for entry in doc["top"]] == preferred[:3]
    unguarded = decide(obj, [APP], index, DEFAULTS, salt="s")
    doc = orjson.loads(apply_patch(obj, list(unguarded.patch))["metadata"]["annotations"][
        DECISION_ANNOTATION])
    assert doc["top"] and not any("siblings" in entry for entry in doc["top"])


def test_an_unpatched_decision_still_says_what_it_found() -> None:
    """`explain` and the holdout's annotation read an unpatched decision: the pod's bytes,
    the candidates, the groups and the spread state are there."""
    from webhook.core.reasons import Reason

    _, cold = inventory([node_object(n) for n in EMPTY], CATALOG)
    decision = decide(replica(0), [APP], cold, replace(DEFAULTS, colocate=False), salt="s",
                      siblings=Siblings(OWNER, {"empty-1": 1}, 3))
    assert decision.reason is Reason.BELOW_THRESHOLD
    assert decision.pod_bytes == 100 * MiB and decision.candidates.bit_count() == len(EMPTY)
    assert [(g.bytes_present, g.mask.bit_count()) for g in decision.groups] == [(0, 3), (0, 1)]
    assert decision.spread is not None and dict(decision.spread.counts) == {"empty-1": 1}


def test_left_out_is_0_when_the_guard_excludes_nothing() -> None:
    _, index = inventory([node_object(n, [APP]) for n in HOLDERS]
                         + [node_object(n) for n in EMPTY], CATALOG)
    obj = replica(0)
    decision = decide(obj, [APP], index, DEFAULTS, salt="s", siblings=Siblings(OWNER, {}, 3))
    assert decision.patched and decision.left_out == 0
    assert [(g.bytes_present, g.extra_siblings) for g in decision.groups] == [
        (100 * MiB, 0), (0, 0)]
    doc = orjson.loads(apply_patch(obj, list(decision.patch))["metadata"]["annotations"][
        DECISION_ANNOTATION])
    assert doc["spread"]["leftOut"] == 0


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


def test_a_held_out_pod_is_annotated_with_what_it_would_have_been_given() -> None:
    """Group HOLDOUT: no affinity, and the annotation the steered pod would carry (same
    nodes, bytes, siblings, spread, cut, id, stand-ins, workload), less the count of terms,
    and with its group."""
    from webhook.core.holdout import Group
    from webhook.core.reasons import Reason

    many = [f"holder-{i:02d}-" + "n" * 50 for i in range(60)]
    _, index = inventory([node_object(n, [APP]) for n in many]
                         + [node_object(n) for n in EMPTY], CATALOG)
    obj = replica(0)
    common: dict[str, Any] = {
        "salt": "s", "token": "tok", "stand_ins": 1, "workload": "0123456789abcdef",
        "siblings": Siblings(OWNER, {many[0]: 9, many[1]: 1}, 3)}
    steered = decide(obj, [APP], index, DEFAULTS, group=Group.STEERED, **common)
    held = decide(obj, [APP], index, DEFAULTS, group=Group.HOLDOUT, **common)
    assert steered.patched and held.reason is Reason.HOLDOUT and not held.patched
    assert held.named == steered.named and held.cut == steered.cut > 0
    assert held.preferred == steered.preferred and held.pod_bytes == steered.pod_bytes
    assert held.terms == () and steered.terms
    assert (held.candidates, held.groups, held.spread) == (
        steered.candidates, steered.groups, steered.spread)
    assert held.left_out == steered.left_out == 1
    patched = apply_patch(obj, list(held.patch))
    assert "affinity" not in patched["spec"]
    validate_pod(patched)

    def annotation(of: dict[str, Any]) -> dict[str, Any]:
        doc: dict[str, Any] = orjson.loads(of["metadata"]["annotations"][DECISION_ANNOTATION])
        return doc

    would = annotation(apply_patch(obj, list(steered.patch)))
    assert would.pop("terms") > 0
    assert annotation(patched) == {**would, "group": "holdout"}
    assert {"id", "standIns", "spread", "cut", "top", "podBytes", "meanBytes"} <= set(would)


def test_the_annotation_gives_the_candidates_mean_bytes_and_no_platform_is_a_reason() -> None:
    """meanBytes: the bytes a node picked blind to layers holds on average, floored (two
    holders of 100 MiB and an empty node: 200 MiB / 3)."""
    from webhook.core.reasons import Reason

    _, index = inventory([node_object("a", [APP]), node_object("b", [APP]),
                          node_object("c")], CATALOG)
    obj = pod([APP.ref])
    decision = decide(obj, [APP], index, DEFAULTS, salt="s")
    doc = orjson.loads(apply_patch(obj, list(decision.patch))["metadata"]["annotations"][
        DECISION_ANNOTATION])
    assert doc["meanBytes"] == 200 * MiB // 3 and isinstance(doc["meanBytes"], int)
    arm = image("registry.example.com/team/arm-only:v1",
                {Platform("linux", "arm64"): [("a", 50 * MiB)]})
    assert decide(pod([arm.ref]), [arm], index, DEFAULTS, salt="s").reason is Reason.NO_PLATFORM


def test_the_deciding_replica_is_named_in_live_mode_only() -> None:
    """`by`: the replica whose decision the pod carries, read by the other replicas from their
    pod watch; a steered pod and a held-out one name it, a static inventory (no siblings)
    writes no `by` at all."""
    from webhook.core.holdout import Group

    _, index = inventory([node_object(n, [APP]) for n in HOLDERS]
                         + [node_object(n) for n in EMPTY], CATALOG)
    obj = replica(0)
    live = Siblings(OWNER, {}, 3, replica="a1b2c3d4")
    for group in (Group.NONE, Group.STEERED, Group.HOLDOUT):
        decision = decide(obj, [APP], index, DEFAULTS, salt="s", token="tok", siblings=live,
                          group=group, workload="0123456789abcdef")
        assert annotation(obj, decision.patch)["by"] == "a1b2c3d4", group
    static = decide(obj, [APP], index, DEFAULTS, salt="s", token="tok")
    assert "by" not in annotation(obj, static.patch)



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
