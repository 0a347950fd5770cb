"""The facts about a Node that scoring needs, read from a Node object (dict form). Pure."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.layers import Platform
from webhook.objects import HOSTNAME_LABEL, items, mapping

# Effects that keep a pod off a node unless tolerated; PreferNoSchedule only lowers a score.
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    hostname: str  # the kubernetes.io/hostname label value: what affinity terms can match
    platform: Platform
    unschedulable: bool
    taints: tuple[Taint, ...]  # blocking taints only
    images: tuple[tuple[str, ...], ...]  # status.images[].names, one tuple per image

    @property
    def schedulable(self) -> bool:
        return not self.unschedulable


# The names of one image are the same on every node that holds it: one tuple for all of
# them (50 images x 5,000 nodes are ~1,000 distinct tuples). A cache: cleared when full.
_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}
_MAX_NAMES = 100_000


def _shared(names: tuple[str, ...]) -> tuple[str, ...]:
    found = _NAMES.get(names)
    if found is None:
        if len(_NAMES) >= _MAX_NAMES:
            _NAMES.clear()
        found = _NAMES[names] = names
    return found


class NodeError(ValueError):
    """The object is not a usable Node."""


def node_from_object(node: Mapping[str, Any]) -> NodeInfo:
    """Extract a NodeInfo from a Node as the API returns it (JSON-decoded)."""
    metadata = mapping(node.get("metadata"))
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise NodeError("node without metadata.name")
    labels = mapping(metadata.get("labels"))
    spec = mapping(node.get("spec"))
    status = mapping(node.get("status"))
    info = mapping(status.get("nodeInfo"))
    os_name = info.get("operatingSystem") or labels.get("kubernetes.io/os") or "linux"
    arch = info.get("architecture") or labels.get("kubernetes.io/arch") or "amd64"
    hostname = labels.get(HOSTNAME_LABEL)
    taints = tuple(
        Taint(key=str(t.get("key", "")), value=str(t.get("value") or ""), effect=str(t["effect"]))
        for t in items(spec.get("taints"))
        if isinstance(t, Mapping) and t.get("effect") in BLOCKING_EFFECTS
    )
    images = tuple(
        _shared(tuple(sys.intern(n) for n in names if isinstance(n, str)))
        for names in (mapping(i).get("names") for i in items(status.get("images")))
        if isinstance(names, list) and names
    )
    return NodeInfo(
        name=sys.intern(name),
        hostname=sys.intern(hostname) if isinstance(hostname, str) and hostname else name,
        platform=Platform.of(str(os_name), str(arch), str(info.get("variant") or "")),
        unschedulable=bool(spec.get("unschedulable")),
        taints=taints,
        images=images,
    )
