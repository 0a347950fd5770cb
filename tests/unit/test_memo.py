"""The decision memo (webhook/core/memo.py): a Mutator with it and one without answer every review
identically, whatever happens in between (node changes, binds, pending reservations); replicas
of one template hit it; it stays within its bounds."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import AMD64, ARM64, image, node_object, pod, review
from webhook.core.admission import parse_review
from webhook.core.decide import finish
from webhook.core.index import LayerIndex
from webhook.core.memo import PrepareMemo
from webhook.core.nodes import node_from_object
from webhook.core.prepare import listing_bytes, spent_bytes
from webhook.core.scoring import MIN_PATCH_BYTES, MiB, ScoringPolicy
from webhook.core.spend import SALT_BUCKETS
from webhook.inventory.memory import StaticInventory
from webhook.inventory.siblings import SiblingTracker
from webhook.inventory.static import build_index, node_layers
from webhook.registry.catalog import StaticCatalog
from webhook.serving.metrics import Metrics
from webhook.serving.mutate import Mutator, Outcome

BASE = [("base", 50 * MiB)]
IMAGES = [
    image("r.example.com/t/a:1", {AMD64: [*BASE, ("a", 30 * MiB)], ARM64: [("a-arm", 70 * MiB)]}),
    image("r.example.com/t/b:1", {AMD64: [*BASE, ("b", 40 * MiB)]}),
    image("r.example.com/t/c:1", {AMD64: [("c", 90 * MiB)]}),
    image("r.example.com/t/d:1", {AMD64: [*BASE, ("a", 30 * MiB), ("d", 25 * MiB)]}),
]
CATALOG = StaticCatalog(IMAGES)
TAINT = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}
TOLERATIONS = [[], [{"key": "dedicated", "operator": "Equal", "value": "batch",
                     "effect": "NoSchedule"}]]
TEMPLATES = [[0], [1], [0, 2], [3], [1, 3], [2]]  # image indices of each pod template
NODES = 10
OWNERS = 3


def node(n: int, held: int, taint: bool = False, cordon: bool = False) -> dict[str, Any]:
    platform = ARM64 if n == NODES - 1 else AMD64
    # the pool follows what the node holds too: a node update can move it to another pool
    return node_object(f"n{n}", [IMAGES[k] for k in range(len(IMAGES)) if held >> k & 1],
                       platform=platform, unschedulable=cordon, taints=[TAINT] if taint else [],
                       labels={"pool": f"p{(n + held) % 3}"})


# The pod's own node selection: none, a nodeSelector, required affinity on labels, on names.
SELECTIONS: list[dict[str, Any]] = [
    {},
    {"nodeSelector": {"pool": "p0"}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "pool", "operator": "NotIn", "values": ["p1"]}]}]}}}},
    {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [f"n{n}"]}]}
            for n in range(0, NODES, 2)]}}}},
]


def replica(template: int, owner: int | None, toleration: int, skew: int | None,
            selection: int = 0) -> dict[str, Any]:
    spec: dict[str, Any] = {"tolerations": TOLERATIONS[toleration], **SELECTIONS[selection]}
    if skew is not None:
        spec["topologySpreadConstraints"] = [{"maxSkew": skew, "topologyKey":
                                              "kubernetes.io/hostname",
                                              "whenUnsatisfiable": "ScheduleAnyway"}]
    obj = pod([IMAGES[k].ref for k in TEMPLATES[template]], spec=spec)
    metadata = obj["metadata"]
    del metadata["name"]
    metadata["generateName"] = f"t{template}-"
    if owner is not None:
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                        "name": f"rs{owner}", "uid": f"owner-{owner}",
                                        "controller": True}]
    return obj


@dataclass
class World:
    """One inventory and sibling tracker, and a Mutator on them."""

    index: LayerIndex
    tracker: SiblingTracker = field(default_factory=lambda: SiblingTracker(clock=lambda: 0.0))
    mutator: Mutator | None = None


def world(held: list[int], memo_entries: int, policy: ScoringPolicy) -> World:
    index, _ = build_index([node_from_object(node(n, h)) for n, h in enumerate(held)], CATALOG)
    built = World(index)
    built.mutator = Mutator([CATALOG], StaticInventory(index), policy, siblings=built.tracker,
                            memo_entries=memo_entries)
    return built


def summary(outcome: Outcome) -> tuple[Any, ...]:
    decision = outcome.decision
    extra = () if decision is None else (decision.preferred, decision.left_out, decision.cut,
                                         decision.pod_bytes, decision.candidates)
    return (outcome.result, outcome.reason, orjson.dumps(list(outcome.patch)), outcome.terms,
            *extra)


REVIEW = st.tuples(st.just("review"), st.integers(0, len(TEMPLATES) - 1),
                   st.one_of(st.none(), st.integers(0, OWNERS - 1)), st.integers(0, 1),
                   st.one_of(st.none(), st.integers(1, 4)), st.booleans(),
                   st.integers(0, len(SELECTIONS) - 1))
NODE = st.tuples(st.just("node"), st.integers(0, NODES - 1), st.integers(0, 15), st.booleans(),
                 st.booleans())
REMOVE = st.tuples(st.just("remove"), st.integers(0, NODES - 1))
BOUND = st.tuples(st.just("bound"), st.integers(0, 20), st.integers(0, OWNERS - 1),
                  st.integers(0, NODES - 1))
GONE = st.tuples(st.just("gone"), st.integers(0, 20))
OPS = st.lists(st.one_of(REVIEW, REVIEW, REVIEW, NODE, REMOVE, BOUND, GONE), max_size=40)


def apply(target: World, op: tuple[Any, ...], uid: str) -> tuple[Any, ...] | None:
    kind = op[0]
    if kind == "review":
        _, template, owner, toleration, skew, dry_run, selection = op
        body = orjson.dumps(review(replica(template, owner, toleration, skew, selection),
                                   uid=uid, dry_run=dry_run))
        assert target.mutator is not None
        return summary(asyncio.run(target.mutator.review(parse_review(body))))
    if kind == "node":
        _, n, held, taint, cordon = op
        info = node_from_object(node(n, held, taint, cordon))
        target.index.upsert(info, node_layers(info, CATALOG).layers)
    elif kind == "remove":
        target.index.remove(f"n{op[1]}")
    elif kind == "bound":
        target.tracker.bound(f"pod-{op[1]}", f"owner-{op[2]}", f"n{op[3]}")
    else:
        target.tracker.gone(f"pod-{op[1]}")
    return None


@settings(max_examples=150, deadline=None)
@given(held=st.lists(st.integers(0, 15), min_size=NODES, max_size=NODES), ops=OPS,
       memo_entries=st.sampled_from([1, 2, 2048]), max_nodes=st.sampled_from([2, 100]))
def test_the_memo_never_changes_an_answer(
    held: list[int], ops: list[tuple[Any, ...]], memo_entries: int, max_nodes: int
) -> None:
    """Random reviews (replicas of a few templates, with and without owners, tolerations,
    skews and node selections, dry runs) interleaved with node changes, removals, binds and
    deletions: the same answers, reservations included, with the memo as without it."""
    policy = ScoringPolicy(max_nodes=max_nodes)
    with_memo, without = world(held, memo_entries, policy), world(held, 0, policy)
    for k, op in enumerate(ops):
        uid = f"0f8c5a2e-1111-4b3c-9d7e-{k:012d}"
        assert apply(with_memo, op, uid) == apply(without, op, uid), op
    assert with_memo.tracker.counts("owner-0") == without.tracker.counts("owner-0")
    assert with_memo.mutator is not None and without.mutator is not None
    memo = with_memo.mutator.memo
    assert memo.hits + memo.misses == without.mutator.memo.misses  # asked as often


async def test_replicas_hit_the_memo_and_still_see_their_siblings() -> None:
    """Replicas of one template share the scoring, but each sees the reservations of the ones
    before it: the burst's top preferences spread over the holders."""
    held = [0b0001] * 4 + [0] * (NODES - 4)
    target = world(held, 2048, ScoringPolicy())
    assert target.mutator is not None
    tops = []
    for k in range(4):
        body = orjson.dumps(review(replica(0, 0, 0, None), uid=f"uid-{k}"))
        outcome = await target.mutator.review(parse_review(body))
        assert outcome.decision is not None and outcome.decision.top is not None
        tops.append(outcome.decision.top.node.name)
    assert (target.mutator.memo.hits, target.mutator.memo.misses) == (3, 1)
    assert len(set(tops)) == 4  # each replica's reservation moved the next one on
    # A node change is a new inventory version: the next replica is scored afresh.
    info = node_from_object(node(5, 0b0001))
    target.index.upsert(info, node_layers(info, CATALOG).layers)
    await target.mutator.review(parse_review(orjson.dumps(review(replica(0, 0, 0, None)))))
    assert target.mutator.memo.misses == 2


def test_the_memo_is_bounded_by_entries_and_bytes() -> None:
    index, _ = build_index([node_from_object(node(n, 0b1111)) for n in range(NODES)], CATALOG)
    policy = ScoringPolicy()
    tolerations = [[{"key": f"k{k}", "operator": "Exists"}] for k in range(50)]
    by_entries = PrepareMemo(max_entries=8)
    for t in tolerations:
        by_entries.prepare(IMAGES[:1], t, index, policy)
    assert len(by_entries) == 8
    one = PrepareMemo()
    one.prepare(IMAGES[:1], [], index, policy)
    by_bytes = PrepareMemo(max_bytes=3 * one.bytes)
    for t in tolerations:
        by_bytes.prepare(IMAGES[:1], t, index, policy)
    assert len(by_bytes) == 3 and by_bytes.bytes <= 3 * one.bytes
    # The oldest went first: the newest question is still answered from memory.
    by_bytes.prepare(IMAGES[:1], tolerations[-1], index, policy)
    assert by_bytes.hits == 1
    # Another policy weighs the same groups differently (by share, not from what a node
    # lacks beyond the best): asked afresh.
    other = by_bytes.prepare(IMAGES[:1], tolerations[-1], index, ScoringPolicy(lack_bytes=0))
    assert by_bytes.hits == 1 and len(by_bytes) == 1
    assert other.groups != by_bytes.prepare(IMAGES[:1], tolerations[-1], index, policy).groups


def test_memo_lookups_are_exported() -> None:
    metrics = Metrics()
    memo = PrepareMemo()
    metrics.watch_memo(memo)
    memo.hits, memo.misses = 7, 2
    text = metrics.render().decode()
    assert 'layer_locality_decision_memo_lookups_total{result="hit"} 7.0' in text
    assert 'layer_locality_decision_memo_lookups_total{result="miss"} 2.0' in text


@pytest.mark.parametrize("policy", [ScoringPolicy(max_nodes=5),
                                    ScoringPolicy(max_patch_bytes=MIN_PATCH_BYTES + 200)])
async def test_replicas_share_the_picks_of_at_most_salt_buckets_subsets(
    policy: ScoringPolicy,
) -> None:
    """A group too large to name whole (cut by max_nodes, or by the patch's bytes): replicas'
    picks come from one of SALT_BUCKETS cached lists or a listing of the group, the same as a
    Mutator without the memo computes afresh, and they still spread."""
    index, _ = build_index([node_from_object(node_object(f"n{n:03}", IMAGES[:1] if n else []))
                            for n in range(200)], CATALOG)
    with_memo = Mutator([CATALOG], StaticInventory(index), policy)
    without = Mutator([CATALOG], StaticInventory(index), policy, memo_entries=0)
    subsets = set()
    cuts = []
    for k in range(120):
        body = orjson.dumps(review(replica(0, None, 0, None), uid=f"uid-{k}"))
        outcome = await with_memo.review(parse_review(body))
        assert summary(outcome) == summary(await without.review(parse_review(body)))
        subsets.add(frozenset(h for term in outcome.terms for h in term.hostnames))
        cuts.append(outcome.decision is not None and outcome.decision.cut > 0)
    assert 1 < len(subsets) <= SALT_BUCKETS
    assert with_memo.memo.hits == 119
    # max_nodes cut the first case, the bytes the second (the listing's own path).
    assert all(len(subset) == 5 for subset in subsets) or all(cuts)


def test_the_memo_counts_the_picks_cached_on_its_entries() -> None:
    """finish() caches pick lists on a memo entry: the byte estimate grows with them (at the
    entry's next lookup) and the byte bound still holds."""
    index, _ = build_index([node_from_object(node(n, 0b0001)) for n in range(NODES)], CATALOG)
    policy = ScoringPolicy(max_nodes=2)
    obj = replica(0, None, 0, None)
    memo = PrepareMemo()
    prepared = memo.prepare(IMAGES[:1], [], index, policy)
    empty = memo.bytes
    for k in range(40):
        finish(obj, prepared, index, policy, salt=f"pod-{k}")
    assert 1 < len(prepared.spent) <= SALT_BUCKETS
    assert memo.prepare(IMAGES[:1], [], index, policy) is prepared
    assert prepared.listings  # the group was asked for picks by more than one pod
    assert memo.bytes == (empty + sum(map(spent_bytes, prepared.spent.values()))
                          + listing_bytes(prepared)) > empty
    bounded = PrepareMemo(max_bytes=empty + 100)
    first = bounded.prepare(IMAGES[:1], [], index, policy)
    finish(obj, first, index, policy, salt="pod-0")
    bounded.prepare(IMAGES[:1], [], index, policy)  # counted now: over the bound, dropped
    assert len(bounded) == 0 and bounded.bytes == 0
