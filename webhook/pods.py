"""What the webhook reads from a Pod object (dict form), and whether to leave it alone. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SKIP_LABEL = "layer-locality.io/skip"
DECISION_ANNOTATION = "layer-locality.io/decision"
MIRROR_ANNOTATION = "kubernetes.io/config.mirror"


def pod_images(pod: Mapping[str, Any]) -> list[str]:
    """Image strings of containers and initContainers, first occurrence order, de-duplicated."""
    spec = _mapping(pod.get("spec"))
    images: dict[str, None] = {}
    for field in ("initContainers", "containers"):
        for container in _list(spec.get(field)):
            image = _mapping(container).get("image")
            if isinstance(image, str) and image:
                images.setdefault(image)
    return list(images)


def pod_tolerations(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    tolerations = _list(_mapping(pod.get("spec")).get("tolerations"))
    return [t for t in tolerations if isinstance(t, dict)]


def skip_reason(pod: Mapping[str, Any]) -> str | None:
    """Why this pod must not be touched, or None. Reasons are metric label values."""
    metadata = _mapping(pod.get("metadata"))
    labels = _mapping(metadata.get("labels"))
    annotations = _mapping(metadata.get("annotations"))
    if _mapping(pod.get("spec")).get("nodeName"):
        return "node_name_set"
    owners = _list(metadata.get("ownerReferences"))
    if any(_mapping(owner).get("kind") == "DaemonSet" for owner in owners):
        return "daemonset"
    if MIRROR_ANNOTATION in annotations:
        return "mirror_pod"
    if str(labels.get(SKIP_LABEL, "")).lower() == "true":
        return "skip_label"
    if DECISION_ANNOTATION in annotations:
        return "already_decided"
    return None


def pod_key(pod: Mapping[str, Any], fallback: str) -> str:
    """namespace/name, or namespace/generateName+fallback when the name is not yet known."""
    metadata = _mapping(pod.get("metadata"))
    name = metadata.get("name") or f"{metadata.get('generateName') or ''}{fallback}"
    return f"{metadata.get('namespace') or ''}/{name}"


def _mapping(value: object) -> Mapping[str, Any]:
    # JSON-decoded objects are dicts; the exact check is several times cheaper than the
    # Mapping ABC, and this runs dozens of times per review.
    return value if isinstance(value, dict) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []
