"""What the live inventory keeps of each pod between its events, and the keys its
reflectors file objects under. Pure."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class BoundPod:
    """What the inventory keeps of a bound pod between its events (one per pod: keep small)."""

    node: str
    finished: bool  # phase Succeeded or Failed


def node_key(obj: Mapping[str, Any]) -> str | None:
    name = (obj.get("metadata") or {}).get("name")
    return name if isinstance(name, str) and name else None


def uid_key(obj: Mapping[str, Any]) -> str | None:
    metadata = obj.get("metadata") or {}
    uid = metadata.get("uid")
    if isinstance(uid, str) and uid:
        return uid
    name = metadata.get("name")  # the API server always sets uid; stand-ins may not
    return f"{metadata.get('namespace')}/{name}" if isinstance(name, str) else None


class BoundPods:
    """One BoundPod per (node, finished), shared by all the pods in that state: 30 pods a node
    then cost a dict entry each, not an object each. Bounded: cleared when a cluster's node
    churn has filled it (entries are only a cache; pods keep theirs). One per inventory."""

    def __init__(self, limit: int = 200_000) -> None:
        self._shared: dict[tuple[str, bool], BoundPod] = {}
        self._limit = limit

    def of(self, obj: Mapping[str, Any]) -> BoundPod | None:
        """The pod's state, or None when it is not bound to a node."""
        node = (obj.get("spec") or {}).get("nodeName")
        if not isinstance(node, str) or not node:
            return None
        phase = (obj.get("status") or {}).get("phase")
        key = (node, phase in ("Succeeded", "Failed"))
        pod = self._shared.get(key)
        if pod is None:
            if len(self._shared) >= self._limit:
                self._shared.clear()
            pod = self._shared[key] = BoundPod(node=sys.intern(node), finished=key[1])
        return pod
