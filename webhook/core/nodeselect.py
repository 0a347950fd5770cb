"""Which nodes a pod may run on by its own choice: `spec.nodeSelector` AND the required node
affinity (`requiredDuringSchedulingIgnoredDuringExecution`). Pure.

Semantics of k8s.io/component-helpers/scheduling/corev1/nodeaffinity (`GetRequiredNodeAffinity`,
`RequiredNodeAffinity.Match`) and k8s.io/apimachinery labels/fields selectors:

- an empty or absent nodeSelector selects every node; each of its pairs needs the label with
  exactly that value;
- an absent (or null) required affinity selects every node; a present one selects the nodes
  that match any of its `nodeSelectorTerms` (none: no node);
- a term with neither matchExpressions nor matchFields matches no node; otherwise every
  expression and every field requirement must match;
- In/NotIn/Exists/DoesNotExist as labels.Requirement (NotIn and DoesNotExist match a node
  without the label); Gt/Lt compare the label and the one value as base-10 int64s, a label
  that does not parse does not match;
- matchFields: In/NotIn with exactly one value, on the node's fields (`metadata.name`);
- a requirement the scheduler cannot parse (unknown operator, a value count the operator does
  not allow, an invalid label key or value, a Gt/Lt value that is not an integer) makes its
  term match no node. So does a field of the wrong JSON type here: the API server rejects
  such a pod after admission anyway, and the webhook must neither crash nor steer it.

`pod_selector` parses once per review into a frozen, hashable value (part of the decision
memo's key); None for the common pod that constrains nothing, so that the candidate nodes
cost no per-node work for it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.objects import HOSTNAME_LABEL, mapping

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_NAME_FIELD = "metadata.name"

_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
_QUALIFIED_NAME = re.compile(r"(?:[A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(?:\.{_DNS_LABEL})*")
_INTEGER = re.compile(r"[+-]?[0-9]+")  # strconv.ParseInt(s, 10, 64), range checked apart
_INT64 = 1 << 63


def _int64(value: str) -> int | None:
    if not _INTEGER.fullmatch(value):
        return None
    number = int(value)
    return number if -_INT64 <= number < _INT64 else None


def _label_key(key: str) -> bool:
    """validation.IsQualifiedName: [prefix/]name, name <= 63, prefix a DNS subdomain <= 253."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)
                  or "/" in prefix):
        return False
    return len(name) <= 63 and bool(_QUALIFIED_NAME.fullmatch(name))


def _label_value(value: str) -> bool:
    """validation.IsValidLabelValue: empty, or a qualified name of at most 63 characters."""
    return not value or (len(value) <= 63 and bool(_QUALIFIED_NAME.fullmatch(value)))


@dataclass(frozen=True, slots=True)
class Requirement:
    """One parsed matchExpressions or matchFields entry (valid: `_requirement` checked it)."""

    key: str
    operator: str
    values: frozenset[str] = frozenset()
    number: int = 0  # Gt/Lt: the value

    def matches(self, value: str | None) -> bool:
        """`value`: the node's label (or field); None when the node has none."""
        operator = self.operator
        if operator == "In":
            return value is not None and value in self.values
        if operator == "NotIn":
            return value is None or value not in self.values
        if operator == "Exists":
            return value is not None
        if operator == "DoesNotExist":
            return value is None
        have = _int64(value) if value is not None else None
        if have is None:
            return False
        return have > self.number if operator == "Gt" else have < self.number


@dataclass(frozen=True, slots=True)
class Term:
    """One nodeSelectorTerm: its expressions and fields ANDed. `valid` False: the scheduler
    could not parse it (or it has no requirement at all), and it matches no node."""

    expressions: tuple[Requirement, ...] = ()
    fields: tuple[Requirement, ...] = ()
    valid: bool = True

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        if not self.valid:
            return False
        for requirement in self.expressions:
            if not requirement.matches(labels.get(requirement.key)):
                return False
        for requirement in self.fields:  # fields.Set.Get: "" for a field the node lacks
            if not requirement.matches(node_name if requirement.key == _NAME_FIELD else ""):
                return False
        return True


_NO_MATCH = Term(valid=False)


@dataclass(frozen=True, slots=True)
class NodeSelector:
    """A pod's nodeSelector (label -> value, all needed) and required affinity terms (None:
    no required affinity; else any term must match)."""

    labels: tuple[tuple[str, str], ...] = ()
    terms: tuple[Term, ...] | None = None
    valid: bool = True  # False: the nodeSelector itself is malformed; matches no node

    @property
    def per_node(self) -> bool:
        """Whether the answer can differ between nodes with the same labels besides the
        hostname label: it reads the hostname label or the node's name."""
        if any(key == HOSTNAME_LABEL for key, _ in self.labels):
            return True
        return any(term.fields or any(r.key == HOSTNAME_LABEL for r in term.expressions)
                   for term in self.terms or ())

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        """Whether a node with these labels (hostname label included when `per_node`) and
        name may run the pod."""
        if not self.valid:
            return False
        for key, value in self.labels:
            if labels.get(key) != value:
                return False
        terms = self.terms
        if terms is None:
            return True
        return any(term.matches(labels, node_name) for term in terms)


MATCH_NOTHING = NodeSelector(valid=False)


def pod_selector(pod: Mapping[str, Any]) -> NodeSelector | None:
    """The pod's nodeSelector and required node affinity, parsed; None when it has neither
    (every node is allowed). Never raises: malformed parts match no node."""
    spec = mapping(pod.get("spec"))
    raw_labels = spec.get("nodeSelector")
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    required = node_affinity.get(REQUIRED) if isinstance(node_affinity, dict) else None
    if not raw_labels and required is None:  # {} and null as absent, as the scheduler does
        return None
    labels: tuple[tuple[str, str], ...] = ()
    if raw_labels:
        if not isinstance(raw_labels, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in raw_labels.items()):
            return MATCH_NOTHING
        labels = tuple(sorted(raw_labels.items()))
    terms = None
    if required is not None:
        if not isinstance(required, dict):
            return MATCH_NOTHING
        raw_terms = required.get("nodeSelectorTerms")
        if raw_terms is not None and not isinstance(raw_terms, list):
            return MATCH_NOTHING
        parsed = (_term(t) for t in raw_terms or ())
        terms = tuple(dict.fromkeys(t for t in parsed if t.valid))  # ORed: order is moot
    return NodeSelector(labels, terms)


def _term(raw: object) -> Term:
    if raw is None:
        return _NO_MATCH  # a null term selects no node
    if not isinstance(raw, dict):
        return _NO_MATCH
    raw_expressions, raw_fields = raw.get("matchExpressions"), raw.get("matchFields")
    if (raw_expressions is not None and not isinstance(raw_expressions, list)) or (
            raw_fields is not None and not isinstance(raw_fields, list)):
        return _NO_MATCH
    if not raw_expressions and not raw_fields:
        return _NO_MATCH  # an empty term selects no node
    expressions = tuple(_requirement(r, label=True) for r in raw_expressions or ())
    fields = tuple(_requirement(r, label=False) for r in raw_fields or ())
    if None in expressions or None in fields:
        return _NO_MATCH
    return Term(tuple(r for r in expressions if r is not None),
                tuple(r for r in fields if r is not None))


def _requirement(raw: object, label: bool) -> Requirement | None:
    """A requirement the scheduler would accept, or None (its term then matches no node)."""
    if not isinstance(raw, dict):
        return None
    key, operator, values = raw.get("key"), raw.get("operator"), raw.get("values")
    if values is None:
        values = []
    if (not isinstance(key, str) or not isinstance(operator, str) or not isinstance(values, list)
            or not all(isinstance(v, str) for v in values)):
        return None
    if not label:  # nodeSelectorRequirementsAsFieldSelector
        if operator not in ("In", "NotIn") or len(values) != 1:
            return None
        return Requirement(key, operator, frozenset(values))
    # nodeSelectorRequirementsAsSelector -> labels.NewRequirement
    if operator not in _OPERATORS or not _label_key(key):
        return None
    if not all(_label_value(v) for v in values):
        return None
    if operator in ("In", "NotIn"):
        return Requirement(key, operator, frozenset(values)) if values else None
    if operator in ("Exists", "DoesNotExist"):
        return None if values else Requirement(key, operator)
    number = _int64(values[0]) if len(values) == 1 else None
    return None if number is None else Requirement(key, operator, number=number)
