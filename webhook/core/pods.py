"""What the webhook reads from a Pod object (dict form), and whether to leave it alone. Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import orjson

from webhook.core.objects import items, mapping
from webhook.core.reasons import Reason

SKIP_LABEL = "layer-locality.io/skip"
DECISION_ANNOTATION = "layer-locality.io/decision"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def pod_images(pod: Mapping[str, Any]) -> list[str]:
    """Image strings of containers and initContainers, first occurrence order, de-duplicated."""
    spec = mapping(pod.get("spec"))
    images: dict[str, None] = {}
    for field in ("initContainers", "containers"):
        for container in items(spec.get(field)):
            image = mapping(container).get("image")
            if isinstance(image, str) and image:
                images.setdefault(image)
    return list(images)


def pod_tolerations(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    tolerations = items(mapping(pod.get("spec")).get("tolerations"))
    return [t for t in tolerations if isinstance(t, dict)]


def skip_reason(pod: Mapping[str, Any]) -> Reason | None:
    """Why this pod must not be touched, or None."""
    metadata = mapping(pod.get("metadata"))
    labels = mapping(metadata.get("labels"))
    annotations = mapping(metadata.get("annotations"))
    if mapping(pod.get("spec")).get("nodeName"):
        return Reason.NODE_NAME_SET
    owners = items(metadata.get("ownerReferences"))
    if any(mapping(owner).get("kind") == "DaemonSet" for owner in owners):
        return Reason.DAEMONSET
    if MIRROR_ANNOTATION in annotations:
        return Reason.MIRROR_POD
    if str(labels.get(SKIP_LABEL, "")).lower() == "true":
        return Reason.SKIP_LABEL
    if DECISION_ANNOTATION in annotations:
        return Reason.ALREADY_DECIDED
    if unexpected_field(pod) is not None:
        return Reason.UNEXPECTED_TYPE
    return None


def unexpected_field(pod: Mapping[str, Any]) -> str | None:
    """The first field the patch would extend that is present with the wrong type, or None.

    An `add` on such a path would replace what the user wrote; the pod is skipped instead.
    JSON null counts as absent (the API server omits empty fields; `add` over null loses
    nothing)."""
    expected: list[tuple[str, object, type]] = []
    metadata = pod.get("metadata")
    expected.append(("metadata", metadata, dict))
    if isinstance(metadata, dict):
        expected.append(("metadata.annotations", metadata.get("annotations"), dict))
    spec = pod.get("spec")
    expected.append(("spec", spec, dict))
    if isinstance(spec, dict):
        affinity = spec.get("affinity")
        expected.append(("spec.affinity", affinity, dict))
        if isinstance(affinity, dict):
            node_affinity = affinity.get("nodeAffinity")
            expected.append(("spec.affinity.nodeAffinity", node_affinity, dict))
            if isinstance(node_affinity, dict):
                expected.append((f"spec.affinity.nodeAffinity.{PREFERRED}",
                                 node_affinity.get(PREFERRED), list))
    for path, value, kind in expected:
        if value is not None and not isinstance(value, kind):
            return path
    return None


def pod_key(pod: Mapping[str, Any], fallback: str) -> str:
    """namespace/name, or namespace/generateName+fallback when the name is not yet known."""
    metadata = mapping(pod.get("metadata"))
    name = metadata.get("name") or f"{metadata.get('generateName') or ''}{fallback}"
    return f"{metadata.get('namespace') or ''}/{name}"


def decision_document(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The decision annotation the pod carries, decoded; None when absent or unreadable."""
    raw = mapping(mapping(pod.get("metadata")).get("annotations")).get(DECISION_ANNOTATION)
    if not isinstance(raw, str):
        return None
    try:
        decision = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return decision if isinstance(decision, dict) else None


def decision_id(pod: Mapping[str, Any]) -> str | None:
    """The id of the decision the pod carries (its review's), or None."""
    token = mapping(decision_document(pod)).get("id")
    return token if isinstance(token, str) and token else None


@dataclass(frozen=True, slots=True)
class PendingPlacement:
    """Where a reviewed pod, stored and not bound yet, is expected: read by the other webhook
    replicas from their pod watch. Empty strings where the decision does not say."""

    token: str | None  # the decision's id
    by: str  # the replica that decided
    node: str  # the node it preferred most (the first of `top`; none when not steered)
    also: tuple[str, ...] = ()  # other nodes of `top` weighed alike (see `counted_nodes`)
    near: tuple[str, ...] = ()  # other nodes of `top` weighed nearly as much


# A node weighed this much less than the first named one (its NodeAffinity score 2 x this
# many points lower) is close enough for the scheduler's other scores (PodTopologySpread above
# all: up to 2 x 100 points) to prefer it now and then.
NEAR_TOP_WEIGHT = 50
# Decisions that do not list weights (before they did): a node holding this share of the
# pod's bytes less than the first named one.
NEAR_TOP_SHARE = 0.2


class Counted(NamedTuple):
    """Where a pending pod is counted: `nodes`, the first where its decision expects it; the
    first `alike` of them weighed alike (the scheduler spreads such pods over them), the rest
    weighed nearly as much (it may take one now and then)."""

    nodes: tuple[str, ...]
    alike: int


def counted_nodes(top: Sequence[tuple[str, int, int | None, int | None]],
                  pod_bytes: int = 0) -> Counted:
    """The nodes a pending pod may be bound to, from its decision's `top` list of (node,
    bytes present, siblings, weight), best first: the first; every other weighed as much
    (only a tie-break term sets the first apart); then every other weighed within
    NEAR_TOP_WEIGHT of it, or weighed at all and holding fewer siblings (the scheduler's
    spreading score, up to 2 x 100 points, favours it the more siblings the first holds).
    Without weights (older decisions): alike holding as many bytes with as many siblings,
    near within NEAR_TOP_SHARE of `pod_bytes` of the first's bytes.
    The reviewing replica and the others reading the annotation apply this one rule, so they
    count the pod on the same nodes."""
    if not top:
        return Counted((), 0)
    _, first_bytes, first_siblings, first_weight = top[0]
    alike: list[str] = []
    near: list[str] = []
    if first_weight is not None and all(weight is not None for *_, weight in top):
        for name, _, siblings, weight in top:
            if weight == first_weight:
                alike.append(name)
            elif weight is not None and (weight >= first_weight - NEAR_TOP_WEIGHT or (
                    weight > 0 and siblings is not None and first_siblings is not None
                    and siblings < first_siblings)):
                near.append(name)
        return Counted((*alike, *near), len(alike))
    close = first_bytes - int(pod_bytes * NEAR_TOP_SHARE)
    for name, bytes_present, siblings, _ in top:
        if bytes_present == first_bytes and siblings == first_siblings:
            alike.append(name)
        elif pod_bytes and bytes_present >= close:
            near.append(name)
    return Counted((*alike, *near), len(alike))


def pending_placement(pod: Mapping[str, Any]) -> PendingPlacement:
    """The placement the pod's decision annotation holds it to (a held-out or unsteered pod's
    names no node)."""
    decision = mapping(decision_document(pod))
    token, by = decision.get("id"), decision.get("by")
    entries: list[tuple[str, int, int | None, int | None]] = []
    if decision.get("terms"):
        for entry in map(mapping, items(decision.get("top"))):
            name, size, siblings = entry.get("node"), entry.get("bytes"), entry.get("siblings")
            weight = entry.get("weight")
            if not isinstance(name, str) or not name or not isinstance(size, int):
                break
            entries.append((name, size, siblings if isinstance(siblings, int) else None,
                            weight if isinstance(weight, int) else None))
    pod_bytes = decision.get("podBytes")
    nodes, alike = counted_nodes(entries, pod_bytes if isinstance(pod_bytes, int) else 0)
    return PendingPlacement(token if isinstance(token, str) and token else None,
                            by if isinstance(by, str) else "",
                            nodes[0] if nodes else "", nodes[1:alike], nodes[alike:])


def pod_owner(pod: Mapping[str, Any]) -> str | None:
    """The uid of the pod's controller (ReplicaSet, StatefulSet, Job...), or None.

    Controller-made pods carry it at CREATE, before they have a name or uid of their own."""
    for owner in items(mapping(pod.get("metadata")).get("ownerReferences")):
        ref = mapping(owner)
        uid = ref.get("uid")
        if ref.get("controller") is True and isinstance(uid, str) and uid:
            return uid
    return None
