"""Bind outcomes: the node a pod was bound to against the terms the webhook appended. The
patches come from the real decision code (decide.py), applied to the pod as the API server
would; each expectation is stated from the scenario (which nodes hold what)."""

from __future__ import annotations

from typing import Any

import orjson

from tests.helpers import AMD64, apply_patch, image, inventory, node_object, pod, validate_pod
from webhook.core.decide import Siblings, decide
from webhook.core.pods import DECISION_ANNOTATION
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.registry.catalog import StaticCatalog
from webhook.telemetry.binds import (
    BindOutcome,
    DecisionFacts,
    bytes_present,
    classify,
    decision_facts,
    webhook_terms,
)

BASE = image("registry.example.com/base:1", {AMD64: [("base", 200 * MiB)]})
APP = image("registry.example.com/app:1", {AMD64: [("base", 200 * MiB), ("app", 90 * MiB)]})
CATALOG = StaticCatalog([BASE, APP])
# Weighed by share (no lack_bytes), so a partial holder gets a level of its own: the levels
# are what is classified here, whatever formula weighs them.
SHARE = ScoringPolicy(lack_bytes=0)


def patched(obj: dict[str, Any], nodes: list[dict[str, Any]],
            siblings: Siblings | None = None, policy: ScoringPolicy = SHARE) -> dict[str, Any]:
    _, index = inventory(nodes, CATALOG)
    decision = decide(obj, [APP], index, policy, salt="s", siblings=siblings,
                      token="t0")
    assert decision.patched, decision.reason
    result = apply_patch(obj, list(decision.patch))
    validate_pod(result)
    return result


def outcome(obj: dict[str, Any], hostname: str) -> BindOutcome:
    facts = decision_facts(obj)
    assert facts is not None
    return classify(webhook_terms(obj, facts.terms), hostname)


def test_levels_by_hostname_label() -> None:
    # Two nodes hold the whole pod, one only its base; node names differ from hostnames
    # (terms select on the label value).
    nodes = [node_object("full-a", [APP], hostname="h-full-a"),
             node_object("full-b", [APP], hostname="h-full-b"),
             node_object("part", [BASE], hostname="h-part"),
             node_object("empty", hostname="h-empty")]
    obj = patched(pod([APP.ref]), nodes)
    assert outcome(obj, "h-full-a") == outcome(obj, "h-full-b") == BindOutcome.TOP
    assert outcome(obj, "h-part") == BindOutcome.PREFERRED
    assert outcome(obj, "h-empty") == BindOutcome.OTHER
    assert outcome(obj, "full-a") == BindOutcome.OTHER  # the node name is not the label
    # Weighed from what a node lacks beyond the best (live mode's default): "part" lacks the
    # 90 MiB app layer, more than lack_bytes, and is not preferred at all.
    lack = ScoringPolicy()
    assert 90 * MiB >= lack.lack_bytes
    obj = patched(pod([APP.ref]), nodes, policy=lack)
    assert outcome(obj, "h-full-a") == outcome(obj, "h-full-b") == BindOutcome.TOP
    assert outcome(obj, "h-part") == outcome(obj, "h-empty") == BindOutcome.OTHER


def test_the_tie_break_term_is_not_a_level_even_when_it_outweighs_the_top() -> None:
    # A 4000 MiB pod of which two nodes hold only the 200 MiB base: weighed by share the top
    # level weighs ceil(100 * 200 / 4000) = 5, and the tie-break term (spread_step = 10, on
    # one of the two equal holders, siblings tracked) weighs more: the heaviest term is not
    # the top level.
    big = image("registry.example.com/big:1",
                {AMD64: [("base", 200 * MiB), ("blob", 3800 * MiB)]})
    nodes = [node_object("hold-a", [BASE]), node_object("hold-b", [BASE]),
             node_object("empty-a"), node_object("empty-b")]
    _, index = inventory(nodes, StaticCatalog([BASE, big]))
    obj = pod([big.ref])
    decision = decide(obj, [big], index, SHARE, salt="s",
                      siblings=Siblings("owner", {}, 3), token="t1")
    result = apply_patch(obj, list(decision.patch))
    weights = [(t.weight, t.hostnames) for t in decision.terms]
    top_weight = -(-100 * 200 // 4000)  # 5
    assert (top_weight, ("hold-a", "hold-b")) in weights
    assert any(w == 10 and len(h) == 1 and w > top_weight for w, h in weights), weights
    assert outcome(result, "hold-a") == outcome(result, "hold-b") == BindOutcome.TOP
    assert outcome(result, "empty-a") == BindOutcome.OTHER


def test_terms_the_pod_brought_are_not_the_webhooks() -> None:
    own = {"weight": 100, "preference": {"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["empty"]}]}}
    obj = pod([APP.ref], spec={"affinity": {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [own]}}})
    nodes = [node_object("full", [APP]), node_object("part", [BASE]), node_object("empty")]
    result = patched(obj, nodes)
    facts = decision_facts(result)
    assert facts is not None and facts.terms == 2  # full (100), part (69); no baseline at 100
    assert outcome(result, "empty") == BindOutcome.OTHER
    assert outcome(result, "full") == BindOutcome.TOP
    # A decision without `terms` (written before the field existed): every hostname term
    # counts, so the pod's own term is taken for the webhook's (the documented limit).
    annotation = orjson.loads(result["metadata"]["annotations"][DECISION_ANNOTATION])
    del annotation["terms"]
    result["metadata"]["annotations"][DECISION_ANNOTATION] = orjson.dumps(annotation).decode()
    assert outcome(result, "empty") == BindOutcome.TOP


def test_decision_facts() -> None:
    nodes = [node_object("full", [APP]), node_object("part", [BASE]), node_object("empty")]
    obj = patched(pod([APP.ref]), nodes)
    assert decision_facts(obj) == DecisionFacts(
        pod_bytes=290 * MiB, mean_bytes=(290 + 200 + 0) * MiB // 3, terms=2)
    assert decision_facts(pod([APP.ref])) is None
    broken = pod([APP.ref], metadata={"annotations": {DECISION_ANNOTATION: "{not json"}})
    assert decision_facts(broken) is None
    old = pod([APP.ref], metadata={"annotations": {DECISION_ANNOTATION: '{"v":2,"podBytes":5}'}})
    assert decision_facts(old) == DecisionFacts(5, None, None)


def test_malformed_terms_are_ignored() -> None:
    obj = pod([APP.ref], spec={"affinity": {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            "junk", {"weight": "9"}, {"weight": 5, "preference": {"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["a"]}]}},
            {"weight": 7, "preference": {"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["a"]}]}},
        ]}}})
    terms = webhook_terms(obj, None)
    assert [(t.weight, set(t.hostnames)) for t in terms] == [(7, {"a"})]
    assert webhook_terms(obj, 10) == []  # claims more terms than the pod has: none trusted
    assert classify([], "a") == BindOutcome.OTHER


def test_bytes_present() -> None:
    assert bytes_present({"a": 5, "b": 7, "c": 11}, {"a", "c", "z"}) == 16
    assert bytes_present({}, {"a"}) == 0


def test_label_terms_add_up_to_the_top_weight_the_baseline_says() -> None:
    # 40 nodes hold the whole pod, 40 its base only, 10 nothing; all carry the agent's
    # labels, so the decision's terms match labels (core/labelled.py), not hostnames.
    from webhook.core.layerlabels import node_layer_labels
    from webhook.core.nodes import node_from_object
    from webhook.telemetry.binds import baseline_weight

    def labels(img: Any) -> dict[str, str]:
        return node_layer_labels({x.digest: x.size for x in img.platforms[AMD64].layers})

    nodes = ([node_object(f"full-{i}", [APP], labels=labels(APP)) for i in range(40)]
             + [node_object(f"base-{i}", [BASE], labels=labels(BASE)) for i in range(40)]
             + [node_object(f"empty-{i}") for i in range(10)])
    closed = "full-7"  # the spread guard closes it: the label terms leave it out
    obj = patched(pod([APP.ref]), nodes, Siblings("rs", {closed: 3}, 3, unconfirmed=0))
    facts = decision_facts(obj)
    assert facts is not None
    terms = webhook_terms(obj, facts.terms)
    assert terms and all(term.label for term in terms)
    carried = {n["metadata"]["name"]: frozenset(node_from_object(n).layer_labels)
               for n in nodes}

    def bound(name: str) -> BindOutcome:
        return classify(terms, name, carried[name], baseline_weight(obj, facts.terms))

    assert bound("full-0") == BindOutcome.TOP
    assert bound("base-0") == BindOutcome.PREFERRED
    assert bound("empty-0") == bound(closed) == BindOutcome.OTHER
