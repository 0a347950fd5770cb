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
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from webhook.core.holdout import Group
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
class HostTerm:
    weight: int
    hostnames: frozenset[str]


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


def webhook_terms(pod: Mapping[str, Any], appended: int | None) -> list[HostTerm]:
    """The webhook's hostname terms on the pod, tie-break left out, baseline ignored."""
    affinity = mapping(mapping(mapping(pod.get("spec")).get("affinity")).get("nodeAffinity"))
    preferred = items(affinity.get(PREFERRED))
    if appended is not None:
        preferred = preferred[-appended:] if appended <= len(preferred) else []
    terms = [term for term in map(_host_term, preferred) if term is not None]
    return [term for term in terms
            if not any(term.hostnames < other.hostnames for other in terms)]


def classify(terms: list[HostTerm], hostname: str) -> BindOutcome:
    if not terms:
        return BindOutcome.OTHER
    top = max(term.weight for term in terms)
    named = [term.weight for term in terms if hostname in term.hostnames]
    if not named:
        return BindOutcome.OTHER
    return BindOutcome.TOP if max(named) == top else BindOutcome.PREFERRED


def bytes_present(layers: Mapping[str, int], held: Set[str]) -> int:
    """Bytes of `layers` (digest -> size) among the digests a node holds."""
    return sum(size for digest, size in layers.items() if digest in held)


def _host_term(term: object) -> HostTerm | None:
    """`{weight, preference: {matchExpressions: [hostname In [...]]}}`, or None."""
    term = mapping(term)
    preference = mapping(term.get("preference"))
    expressions = items(preference.get("matchExpressions"))
    weight = term.get("weight")
    if len(expressions) != 1 or preference.get("matchFields") or not isinstance(weight, int):
        return None
    expression = mapping(expressions[0])
    values = items(expression.get("values"))
    if expression.get("key") != HOSTNAME_LABEL or expression.get("operator") != "In":
        return None
    return HostTerm(weight, frozenset(v for v in values if isinstance(v, str)))


def _count(value: object) -> int:
    return value if isinstance(value, int) and value >= 0 else 0
