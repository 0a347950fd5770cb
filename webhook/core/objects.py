"""Reading decoded Kubernetes objects (JSON dicts) safely. Pure.

Objects come from users and the wire: any field may be missing or of the wrong type. These
helpers answer an empty value instead of raising, so callers read fields in one expression.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

HOSTNAME_LABEL = "kubernetes.io/hostname"  # the node label preferred terms select on
_EMPTY: Mapping[str, Any] = {}


def mapping(value: object) -> Mapping[str, Any]:
    # JSON-decoded objects are dicts; the exact check is several times cheaper than the
    # Mapping ABC, and this runs dozens of times per review.
    return value if isinstance(value, dict) else _EMPTY


def items(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def text(value: object) -> str:
    return value if isinstance(value, str) else ""


def pod_template(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The pod template of a workload (Deployment, StatefulSet, DaemonSet, ReplicaSet, Job:
    `spec.template`; CronJob: `spec.jobTemplate.spec.template`), or None."""
    spec = mapping(obj.get("spec"))
    if obj.get("kind") == "CronJob":
        spec = mapping(mapping(spec.get("jobTemplate")).get("spec"))
    template = spec.get("template")
    return template if isinstance(template, dict) else None
