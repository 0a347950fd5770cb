"""Taint/toleration matching, as `v1.Toleration.ToleratesTaint` in k8s.io/api. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.core.nodes import Taint


def tolerates(toleration: Mapping[str, Any], taint: Taint) -> bool:
    effect = toleration.get("effect") or ""
    if effect and effect != taint.effect:
        return False
    key = toleration.get("key") or ""
    operator = toleration.get("operator") or "Equal"
    if key and key != taint.key:
        return False
    if operator == "Exists":
        return True  # an empty key with Exists tolerates every taint
    if operator == "Equal":
        return (toleration.get("value") or "") == taint.value
    return False


def tolerates_all(tolerations: Iterable[Mapping[str, Any]], taints: Iterable[Taint]) -> bool:
    tolerations = list(tolerations)
    return all(any(tolerates(t, taint) for t in tolerations) for taint in taints)
