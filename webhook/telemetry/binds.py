"""A bound pod against the decision it carries: did the scheduler follow it? Pure.

The webhook appends to `spec.affinity.nodeAffinity.preferredDuringScheduling...` (decide.py):
one `kubernetes.io/hostname In [...]` term per weight level, most bytes first; when several
equal nodes tie for the top and siblings are tracked, a tie-break term naming one of them with
a small weight (`spread_step`); and a baseline `kubernetes.io/hostname Exists` term that
matches every node. Only the last `terms` entries of the list are the webhook's (the
annotation says how many; a decision written before that field existed counts every hostname
term, so a pod's own hostname terms would be mistaken for the webhook's).

Outcome of a bind, by the node's `kubernetes.io/hostname` label value:
- `top`: named by the highest-weight level term;
- `preferred`: named by another of the webhook's terms;
- `other`: not named (the baseline matches every node and says nothing).
The tie-break term is recognised by naming a strict subset of another term's nodes (level
terms are disjoint): its node is in the top level, and it is not a level of its own even when
its weight exceeds the top level's.

Decisions with layer-label terms (format 4, core/labelled.py) add up: a node's score is the
sum of the webhook's terms it matches (a label term by the node's layer labels, less its
`NotIn` hostnames), and it is `top` when that sum reaches the decision's top weight, which
the baseline term says (`100 - baseline`; no baseline: the top is 100). The same rule gives
the same outcomes as above for hostname terms, whose levels are disjoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from webhook.core.holdout import Group
from webhook.core.layerlabels import label_short_id
from webhook.core.objects import HOSTNAME_LABEL, items, mapping
from webhook.core.pods import PREFERRED, decision_document

_GROUPS = frozenset({Group.STEERED.value, Group.HOLDOUT.value})  # pods in the experiment


class BindOutcome(StrEnum):
    TOP = "top"
    PREFERRED = "preferred"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class DecisionFacts:
    """What the decision annotation says that a bind is measured against."""

    pod_bytes: int  # the pod's bytes (largest platform) at review time
    mean_bytes: int | None  # mean bytes present over the candidates at review time
    terms: int | None  # preferred terms the webhook appended; None: not recorded
    group: str = ""  # the holdout's group (steered, holdout); "": not in the experiment
    workload: str = ""  # the workload's hash, when in the experiment
    steered: bool = True  # carries the webhook's terms (not held out, not skipped)


@dataclass(frozen=True, slots=True)
class WebhookTerm:
    """One of the webhook's terms: naming `hostnames`, or (`label`: a layer label's short
    id) every node carrying the label but the `not_in` hostnames."""

    weight: int
    hostnames: frozenset[str]
    label: str = ""
    not_in: frozenset[str] = frozenset()

    def matches(self, hostname: str, layer_labels: Set[str]) -> bool:
        if self.label:
            return self.label in layer_labels and hostname not in self.not_in
        return hostname in self.hostnames


def decision_facts(pod: Mapping[str, Any]) -> DecisionFacts | None:
    """The pod's decision, or None when it carries none (or one this code cannot read)."""
    doc = decision_document(pod)
    if doc is None:
        return None
    terms = doc.get("terms")
    mean = doc.get("meanBytes")
    group = doc.get("group")
    group = group if isinstance(group, str) and group in _GROUPS else ""
    workload = doc.get("workload")
    return DecisionFacts(_count(doc.get("podBytes")),
                         mean if isinstance(mean, int) and mean >= 0 else None,
                         terms if isinstance(terms, int) and terms > 0 else None,
                         group, workload if isinstance(workload, str) else "",
                         group != Group.HOLDOUT and "skipped" not in doc)


def webhook_terms(pod: Mapping[str, Any], appended: int | None) -> list[WebhookTerm]:
    """The webhook's hostname and label terms on the pod, tie-break left out, baseline
    ignored."""
    terms = [term for term in map(_webhook_term, _appended(pod, appended)) if term is not None]
    return [term for term in terms
            if term.label or not any(term.hostnames < other.hostnames for other in terms
                                     if not other.label)]


def baseline_weight(pod: Mapping[str, Any], appended: int | None) -> int | None:
    """The weight of the webhook's baseline term (`kubernetes.io/hostname Exists`); None
    when it appended none."""
    for term in map(mapping, _appended(pod, appended)):
        expressions = items(mapping(term.get("preference")).get("matchExpressions"))
        weight = term.get("weight")
        if (len(expressions) == 1 and isinstance(weight, int)
                and mapping(expressions[0]).get("key") == HOSTNAME_LABEL
                and mapping(expressions[0]).get("operator") == "Exists"):
            return weight
    return None


def classify(terms: list[WebhookTerm], hostname: str, layer_labels: Set[str] = frozenset(),
             baseline: int | None = None) -> BindOutcome:
    """`layer_labels`: the bound node's (short ids); `baseline`: the weight of the
    webhook's baseline term, None when it has none (or it is not known)."""
    if not terms:
        return BindOutcome.OTHER
    score = sum(term.weight for term in terms if term.matches(hostname, layer_labels))
    if not score:
        return BindOutcome.OTHER
    if baseline is not None:
        top = 100 - baseline
    elif any(term.label for term in terms):
        top = 100
    else:  # levels are disjoint: the best one is the top
        top = max(term.weight for term in terms)
    return BindOutcome.TOP if score >= top else BindOutcome.PREFERRED


def bytes_present(layers: Mapping[str, int], held: Set[str]) -> int:
    """Bytes of `layers` (digest -> size) among the digests a node holds."""
    return sum(size for digest, size in layers.items() if digest in held)


def _appended(pod: Mapping[str, Any], appended: int | None) -> list[Any]:
    """The preferred terms the webhook appended (the last `appended`; all when unknown)."""
    affinity = mapping(mapping(mapping(pod.get("spec")).get("affinity")).get("nodeAffinity"))
    preferred = items(affinity.get(PREFERRED))
    if appended is not None:
        preferred = preferred[-appended:] if appended <= len(preferred) else []
    return preferred


def _webhook_term(term: object) -> WebhookTerm | None:
    """`{weight, preference: {matchExpressions: [hostname In [...]]}}`, or a label term
    (`<layer label> Exists`, optionally `hostname NotIn [...]`); None for anything else."""
    term = mapping(term)
    preference = mapping(term.get("preference"))
    expressions = [mapping(e) for e in items(preference.get("matchExpressions"))]
    weight = term.get("weight")
    if not expressions or preference.get("matchFields") or not isinstance(weight, int):
        return None
    first = expressions[0]
    short = label_short_id(str(first.get("key")))
    if short is not None and first.get("operator") == "Exists":
        rest = expressions[1:]
        if len(rest) > 1 or any(e.get("key") != HOSTNAME_LABEL or e.get("operator") != "NotIn"
                                for e in rest):
            return None
        return WebhookTerm(weight, frozenset(), short, frozenset(
            v for e in rest for v in items(e.get("values")) if isinstance(v, str)))
    if len(expressions) != 1 or first.get("key") != HOSTNAME_LABEL or (
            first.get("operator") != "In"):
        return None
    return WebhookTerm(weight, frozenset(v for v in items(first.get("values"))
                                         if isinstance(v, str)))


def _count(value: object) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
