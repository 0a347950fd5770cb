"""`layer-locality explain --pod` on a pod the scheduler has bound: where it went against what
its decision preferred, and why, in the cause words of core/causes.py. Reads the pod's own
record (its decision annotation and terms) and, when a cluster is at hand, its nodes (their
hostname labels, layer labels, how many there are) and the workload's pods per node."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from webhook.core.causes import EXPLANATIONS, BindExplanation, explain_bind
from webhook.core.index import LayerIndex
from webhook.core.objects import items, mapping
from webhook.core.pods import decision_document
from webhook.telemetry.binds import baseline_weight, decision_facts, webhook_terms


def bound_node(pod: Mapping[str, Any]) -> str:
    """The node the pod is bound to ("" when it is not)."""
    node = mapping(pod.get("spec")).get("nodeName")
    return node if isinstance(node, str) else ""


def explain_bound(pod: Mapping[str, Any], index: LayerIndex | None = None,
                  counts: Mapping[str, int] | None = None) -> BindExplanation | None:
    """The explanation of a bound pod carrying a decision; None when it carries none.
    `counts`: the workload's pods per node now (this one included), from the cluster."""
    facts = decision_facts(pod)
    doc = decision_document(pod)
    node = bound_node(pod)
    if facts is None or doc is None or not node:
        return None
    info = index.node(node) if index is not None else None
    hostname = info.hostname if info is not None else node
    labels = frozenset(info.layer_labels) if info is not None else frozenset()
    terms = webhook_terms(pod, facts.terms)
    weight: int | None = sum(t.weight for t in terms if t.matches(hostname, labels))
    if info is None and any(t.label for t in terms):
        weight = None  # label terms: the node's layer labels are not at hand
    baseline = baseline_weight(pod, facts.terms)
    top_weight = (100 - baseline if baseline is not None
                  else max((t.weight for t in terms), default=0))
    top: list[tuple[str, int, int | None]] = []
    for entry in map(mapping, items(doc.get("top"))):
        name, size, siblings = entry.get("node"), entry.get("bytes"), entry.get("siblings")
        if isinstance(name, str) and isinstance(size, int):
            top.append((name, size, siblings if isinstance(siblings, int) else None))
    siblings = next((s for name, _, s in top if name == node), None)
    if siblings is None and counts is not None:
        siblings = max(0, counts.get(node, 0) - 1)  # now, this pod aside
    return explain_bind(node, weight, top, top_weight, siblings,
                        len(index) if index is not None else 0)


def as_text(explanation: BindExplanation) -> str:
    cause = explanation.cause.value or "none"
    weight = "unknown" if explanation.weight is None else str(explanation.weight)
    return (f"bound to {explanation.node} (weight {weight}); the decision preferred "
            f"{explanation.best or 'no node'} (weight {explanation.best_weight})\n"
            f"cause: {cause}: {EXPLANATIONS[explanation.cause]}\n"
            f"  {explanation.detail}\n")


def as_json(explanation: BindExplanation) -> bytes:
    return orjson.dumps({
        "node": explanation.node, "weight": explanation.weight, "preferred": explanation.best,
        "preferredWeight": explanation.best_weight, "cause": explanation.cause.value,
        "explanation": EXPLANATIONS[explanation.cause], "detail": explanation.detail,
    }, option=orjson.OPT_INDENT_2) + b"\n"
