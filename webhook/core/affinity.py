"""Weighted hostnames -> preferred node-affinity terms -> JSON Patch operations. Pure.

Only `add` operations, on paths that exist: missing `affinity`, `nodeAffinity`, the preferred
list or `annotations` are added whole; an existing preferred list is appended to. Everything
the pod already has is kept verbatim: a pod where one of those fields is present with another
type is skipped before this point (`pods.unexpected_field`), and `affinity_patch` refuses it too.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

from webhook.core.admission import PatchOperation
from webhook.core.layerlabels import LAYER_LABEL_PREFIX
from webhook.core.objects import HOSTNAME_LABEL, mapping
from webhook.core.pods import DECISION_ANNOTATION, PREFERRED, unexpected_field

__all__ = ["PREFERRED", "PreferredTerm", "affinity_patch", "annotation_op", "escape_pointer"]


class NodeSelectorRequirement(TypedDict, total=False):
    key: str
    operator: str
    values: list[str]


class NodeSelectorTerm(TypedDict):
    matchExpressions: list[NodeSelectorRequirement]


class PreferredSchedulingTerm(TypedDict):
    weight: int
    preference: NodeSelectorTerm


@dataclass(frozen=True, slots=True)
class PreferredTerm:
    """A term naming `hostnames`; with `label` (a layer label key) instead, one matching
    every node that carries the label, but the `not_in` hostnames. Neither: the baseline
    term, which matches every node."""

    weight: int
    hostnames: tuple[str, ...]
    label: str = ""
    not_in: tuple[str, ...] = ()

    @property
    def baseline(self) -> bool:
        return not self.hostnames and not self.label

    def matches(self, hostname: str, layer_labels: Collection[str]) -> bool:
        """Whether a node (its hostname label, its layer labels' short ids) matches, as the
        scheduler evaluates the term."""
        if self.label:
            return (self.label[len(LAYER_LABEL_PREFIX):] in layer_labels
                    and hostname not in self.not_in)
        return not self.hostnames or hostname in self.hostnames

    def to_object(self) -> PreferredSchedulingTerm:
        expressions: list[NodeSelectorRequirement]
        if self.label:
            expressions = [{"key": self.label, "operator": "Exists"}]
            if self.not_in:
                expressions.append({"key": HOSTNAME_LABEL, "operator": "NotIn",
                                    "values": list(self.not_in)})
        elif not self.hostnames:
            expressions = [{"key": HOSTNAME_LABEL, "operator": "Exists"}]
        else:
            expressions = [{"key": HOSTNAME_LABEL, "operator": "In",
                            "values": list(self.hostnames)}]
        return {"weight": self.weight, "preference": {"matchExpressions": expressions}}


def escape_pointer(token: str) -> str:
    """RFC 6901: '~' -> '~0', '/' -> '~1'."""
    return token.replace("~", "~0").replace("/", "~1")


def affinity_patch(
    pod: Mapping[str, Any], terms: Sequence[PreferredTerm], decision: str
) -> list[PatchOperation]:
    """Operations that append `terms` and set the decision annotation on `pod`."""
    field = unexpected_field(pod)
    if field is not None:  # never replace what the user wrote
        raise ValueError(f"{field} has an unexpected type")
    objects = [term.to_object() for term in terms]
    ops: list[PatchOperation] = []
    spec = mapping(pod.get("spec"))
    affinity = spec.get("affinity")
    node_affinity = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
    preferred = node_affinity.get(PREFERRED) if isinstance(node_affinity, dict) else None
    if objects:
        if not isinstance(affinity, dict):
            ops.append(_add("/spec/affinity", {"nodeAffinity": {PREFERRED: objects}}))
        elif not isinstance(node_affinity, dict):
            ops.append(_add("/spec/affinity/nodeAffinity", {PREFERRED: objects}))
        elif not isinstance(preferred, list):
            ops.append(_add(f"/spec/affinity/nodeAffinity/{PREFERRED}", objects))
        else:
            ops.extend(_add(f"/spec/affinity/nodeAffinity/{PREFERRED}/-", o) for o in objects)
    ops.append(annotation_op(pod, DECISION_ANNOTATION, decision))
    return ops


def annotation_op(pod: Mapping[str, Any], key: str, value: str) -> PatchOperation:
    """The operation that sets annotation `key` on `pod` (metadata and annotations created
    when absent; the caller has checked they are objects when present)."""
    metadata = pod.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if not isinstance(metadata, dict):
        return _add("/metadata", {"annotations": {key: value}})
    if not isinstance(annotations, dict):
        return _add("/metadata/annotations", {key: value})
    return _add(f"/metadata/annotations/{escape_pointer(key)}", value)


def _add(path: str, value: Any) -> PatchOperation:
    return {"op": "add", "path": path, "value": value}
