"""Candidates honour the pod's own node selection: terms are spent only on nodes its
nodeSelector and required node affinity allow, the spread guard's floor is taken over those
nodes only, and the decision memo never answers one selection with another's entry."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson
import pytest

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
from webhook.config import Settings
from webhook.core.admission import parse_review
from webhook.core.decide import Decision, Siblings, decide
from webhook.core.index import LayerIndex
from webhook.core.nodeselect import REQUIRED
from webhook.core.pods import DECISION_ANNOTATION
from webhook.core.reasons import Reason
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.registry.catalog import StaticCatalog
from webhook.serving.mutate import Mutator, Outcome
from webhook.serving.wiring import build_parts

APP = image("registry.example.com/team/app:v1", {AMD64: [("base", 80 * MiB), ("code", 20 * MiB)]})
CATALOG = StaticCatalog([APP])
POLICY = ScoringPolicy()  # share 1: a node holding the whole pod weighs 100
OWNER = "3b0e3c58-5f7e-4c2e-9a57-rs0000000003"

# Four label sets, each on a holder of the pod's image and on an empty twin: any selection by
# labels keeps a holder and a node holding nothing, so there is a preference to express.
LABELS: dict[str, dict[str, str]] = {
    "a8": {"pool": "a", "cpus": "8", "gpu": "nvidia"},
    "a16": {"pool": "a", "cpus": "16"},
    "b64": {"pool": "b", "cpus": "64"},
    "bare": {},
}
HOLDERS = sorted(LABELS)
ALL = sorted([*HOLDERS, *(f"e-{n}" for n in HOLDERS)])


def nodes() -> list[dict[str, Any]]:
    return ([node_object(name, [APP], labels=labels) for name, labels in LABELS.items()]
            + [node_object(f"e-{name}", labels=labels) for name, labels in LABELS.items()])


def selecting(node_selector: Any = None, terms: Any = None) -> dict[str, Any]:
    obj = pod([APP.ref])
    if node_selector is not None:
        obj["spec"]["nodeSelector"] = node_selector
    if terms is not None:
        obj["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": terms}}}
    return obj


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def candidate_names(index: LayerIndex, decision: Decision) -> list[str]:
    return sorted(n.name for n in index.nodes() if index.in_mask(n.name, decision.candidates))


def named_in_patch(obj: dict[str, Any], decision: Decision) -> list[str]:
    """The hostnames the validated patch prefers above the baseline."""
    patched = apply_patch(obj, list(decision.patch))
    validate_pod(patched)
    raw = weight_by_hostname(patched, ALL)
    baseline = min(raw.values())
    return sorted(name for name, weight in raw.items() if weight > baseline)


@pytest.mark.parametrize(
    ("node_selector", "terms", "selected"),
    [
        (None, None, ALL),
        ({"pool": "a"}, None, ["a16", "a8", "e-a16", "e-a8"]),
        ({"pool": "a", "gpu": "nvidia"}, None, ["a8", "e-a8"]),
        (None, [{"matchExpressions": [expr("pool", "In", "b")]}], ["b64", "e-b64"]),
        (None, [{"matchExpressions": [expr("pool", "NotIn", "a")]}],
         ["b64", "bare", "e-b64", "e-bare"]),
        (None, [{"matchExpressions": [expr("gpu", "Exists")]}], ["a8", "e-a8"]),
        (None, [{"matchExpressions": [expr("gpu", "DoesNotExist")]}],
         ["a16", "b64", "bare", "e-a16", "e-b64", "e-bare"]),
        (None, [{"matchExpressions": [expr("cpus", "Gt", "8")]}],
         ["a16", "b64", "e-a16", "e-b64"]),
        (None, [{"matchExpressions": [expr("cpus", "Lt", "16")]}], ["a8", "e-a8"]),
        (None, [{"matchFields": [expr("metadata.name", "NotIn", "a8")]}],
         [n for n in ALL if n != "a8"]),
        (None, [{"matchExpressions": [expr("kubernetes.io/hostname", "In", "b64", "e-bare")]}],
         ["b64", "e-bare"]),
        # terms ORed
        (None, [{"matchExpressions": [expr("pool", "In", "b")]},
                {"matchExpressions": [expr("gpu", "Exists")]}], ["a8", "b64", "e-a8", "e-b64"]),
        # nodeSelector AND required affinity
        ({"pool": "a"}, [{"matchExpressions": [expr("cpus", "Lt", "10")]}], ["a8", "e-a8"]),
    ],
)
def test_terms_name_only_nodes_the_pod_selects(
    node_selector: Any, terms: Any, selected: list[str]
) -> None:
    _, index = inventory(nodes(), CATALOG)
    obj = selecting(node_selector, terms)
    decision = decide(obj, [APP], index, POLICY, salt="s")
    assert decision.patched, decision.reason
    assert candidate_names(index, decision) == selected
    assert named_in_patch(obj, decision) == [n for n in selected if n in HOLDERS]
    # the terms the webhook appends prefer nodes; the pod's own requirement stays as written
    patched = apply_patch(obj, list(decision.patch))
    assert patched["spec"].get("nodeSelector") == node_selector
    if terms is not None:
        assert patched["spec"]["affinity"]["nodeAffinity"][REQUIRED] == {
            "nodeSelectorTerms": terms}


async def review_outcome(mutator: Mutator, obj: dict[str, Any], n: int = 0) -> Outcome:
    uid = f"0f8c5a2e-1111-4b3c-9d7e-{n:012d}"
    return await mutator.review(parse_review(orjson.dumps(review(obj, uid=uid))))


@pytest.mark.parametrize(
    "obj",
    [
        selecting({"pool": "nowhere"}),
        selecting(None, [{"matchExpressions": [expr("gpu", "Exists"), expr("pool", "In", "b")]}]),
        selecting(None, []),  # no term: nothing
        selecting(None, [{}]),  # an empty term: nothing
        selecting(None, [{"matchExpressions": [expr("cpus", "Gt", "many")]}]),  # unparsable
        selecting(None, [{"matchExpressions": [expr("pool", "Near", "a")]}]),  # unknown op
        # wrong JSON types (the API server rejects such a pod after admission)
        selecting(["pool=a"]),
        selecting({"pool": 1}),
        selecting(None, {"matchExpressions": []}),
        selecting(None, [{"matchExpressions": "pool In a"}]),
        selecting(None, [{"matchExpressions": [{"key": "pool", "operator": "In",
                                                "values": "a"}]}]),
        selecting(None, ["pool"]),
        {**pod([APP.ref]), "spec": {**pod([APP.ref])["spec"],
                                    "affinity": {"nodeAffinity": {REQUIRED: "pool=a"}}}},
    ],
)
async def test_a_selection_that_matches_no_node_gets_no_patch(obj: dict[str, Any]) -> None:
    """No node can take the pod: no patch, the `no_nodes` reason, no error."""
    inv, _ = inventory(nodes(), CATALOG)
    outcome = await review_outcome(Mutator([CATALOG], inv, POLICY), obj)
    assert (outcome.result, outcome.reason, outcome.patch) == ("skipped", Reason.NO_NODES, ())


async def test_a_malformed_term_does_not_spoil_a_valid_one() -> None:
    """Terms are ORed: a term the scheduler cannot parse selects nothing, the others still
    select."""
    inv, _ = inventory(nodes(), CATALOG)
    obj = selecting(None, [{"matchExpressions": [{"key": "pool", "operator": "In",
                                                  "values": [7]}]},
                           {"matchExpressions": [expr("pool", "In", "b")]}])
    outcome = await review_outcome(Mutator([CATALOG], inv, POLICY), obj)
    assert outcome.result == "patched"
    assert [t["preference"]["matchExpressions"][0]["values"]
            for t in preferred_terms(apply_patch(obj, list(outcome.patch)))] == [["b64"]]


def test_the_spread_floor_is_taken_over_the_nodes_the_pod_selects() -> None:
    """Every node of pool a holds one sibling; pool b's node holds none, but the pod selects
    pool a only. The scheduler's skew domain is the nodes the pod can land on (eligible
    nodes), so the floor is 1 and no pool-a node is above it: the two holders tie at the top
    (one of them gets the tie-break term). Counting pool b's node would make the floor 0,
    put every pool-a node one sibling above it (spread_step lower, 90) and leave the pool-b
    holder, which the pod cannot use, the best node."""
    objects = [node_object("a-0", [APP], labels={"pool": "a"}),
               node_object("a-1", [APP], labels={"pool": "a"}),
               node_object("a-empty", labels={"pool": "a"}),
               node_object("b-0", [APP], labels={"pool": "b"})]
    _, index = inventory(objects, CATALOG)
    obj = selecting({"pool": "a"})
    counts = {"a-0": 1, "a-1": 1, "a-empty": 1}
    # Co-location off: the floor alone is under test (it would count sibling nodes as holders).
    decision = decide(obj, [APP], index, replace(POLICY, colocate=False), salt="s",
                      siblings=Siblings(OWNER, counts, 3))
    assert decision.patched and decision.spread is not None
    assert (decision.spread.floor, dict(decision.spread.extra), decision.spread.excluded) == (
        1, {}, frozenset())
    patched = apply_patch(obj, list(decision.patch))
    validate_pod(patched)
    raw = weight_by_hostname(patched, ["a-0", "a-1", "a-empty", "b-0"])
    assert sorted([raw["a-0"], raw["a-1"]]) == [100, 100 + POLICY.spread_step]
    assert (raw["a-empty"], raw["b-0"]) == (0, 0)


def mutators() -> tuple[Mutator, Mutator]:
    inv, _ = inventory(nodes(), CATALOG)
    return Mutator([CATALOG], inv, POLICY), Mutator([CATALOG], inv, POLICY, memo_entries=0)


def summary(outcome: Outcome) -> tuple[Any, ...]:
    return (outcome.result, outcome.reason, orjson.dumps(list(outcome.patch)), outcome.terms)


async def test_the_memo_never_answers_one_selection_with_another() -> None:
    """Replicas of one image and tolerations but different selections: each is scored on its
    own nodes, as a Mutator without the memo scores it; the same selection (written in
    another order) is a hit."""
    with_memo, without = mutators()
    asked = [selecting({"pool": "a"}), selecting({"pool": "b"}), pod([APP.ref]),
             selecting(None, [{"matchExpressions": [expr("pool", "In", "b")]}]),
             selecting(None, [{"matchExpressions": [expr("pool", "NotIn", "b")]}]),
             selecting(None, [{"matchFields": [expr("metadata.name", "In", "a8")]},
                              {"matchFields": [expr("metadata.name", "In", "e-a8")]}]),
             selecting(None, [{"matchFields": [expr("metadata.name", "In", "a16")]},
                              {"matchFields": [expr("metadata.name", "In", "e-a16")]}]),
             selecting({"pool": "a", "gpu": "nvidia"}), selecting({"gpu": "nvidia", "pool": "a"})]
    named = []
    for n, obj in enumerate(asked):
        outcome = await review_outcome(with_memo, obj, n)
        assert summary(outcome) == summary(await review_outcome(without, obj, n))
        assert outcome.result == "patched", obj
        patched = apply_patch(obj, list(outcome.patch))
        named.append(sorted(h for t in preferred_terms(patched)
                            for h in t["preference"]["matchExpressions"][0].get("values", [])))
    assert named == [["a16", "a8"], ["b64"], HOLDERS, ["b64"], ["a16", "a8", "bare"], ["a8"],
                     ["a16"], ["a8"], ["a8"]]
    assert (with_memo.memo.misses, with_memo.memo.hits) == (len(asked) - 1, 1)


async def test_the_demo_inventory_with_a_zone_selector() -> None:
    """The embedded demo inventory (real layer data): python:3.11-slim is held whole by
    demo-python (zone a) and in part by demo-node (zone b). A pod pinned to zone b gets terms
    for demo-node only."""
    parts = build_parts(Settings(demo=True))
    mutator = Mutator(parts.sources, parts.inventory, ScoringPolicy(share=1.0))
    free = pod(["python:3.11-slim"])
    pinned = pod(["python:3.11-slim"],
                 spec={"nodeSelector": {"topology.kubernetes.io/zone": "demo-zone-b"}})
    tops = []
    for n, obj in enumerate((free, pinned)):
        outcome = await review_outcome(mutator, obj, n)
        assert outcome.result == "patched"
        patched = apply_patch(obj, list(outcome.patch))
        validate_pod(patched)
        decision = orjson.loads(patched["metadata"]["annotations"][DECISION_ANNOTATION])
        tops.append([entry["node"] for entry in decision["top"]])
    assert tops[0][0] == "demo-python.cluster.internal"
    assert tops[1] == ["demo-node.cluster.internal"]
