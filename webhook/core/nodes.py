"""The facts about a Node that scoring needs, read from a Node object (dict form). Pure."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from webhook.core.layerlabels import LAYER_LABEL_PREFIX, label_short_id
from webhook.core.layers import Platform
from webhook.core.objects import HOSTNAME_LABEL, items, mapping

# Effects that keep a pod off a node unless tolerated; PreferNoSchedule only lowers a score.
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


class Labels(Mapping[str, str]):
    """A node's labels other than `kubernetes.io/hostname` (unique per node: NodeInfo.hostname
    holds it), frozen and hashable. Nodes of one pool share all the others, so one object
    serves every node with the same mapping (`_interned`): a node holds a reference.

    `has_hostname`: whether the node carries the hostname label at all (NodeInfo.hostname
    falls back to the node name when it does not; a selector must still see it absent)."""

    __slots__ = ("_hash", "_items", "has_hostname")

    def __init__(self, items: Mapping[str, str], has_hostname: bool = True) -> None:
        self._items = dict(items)
        self.has_hostname = has_hostname
        self._hash = hash((frozenset(self._items.items()), has_hostname))

    def __getitem__(self, key: str) -> str:
        return self._items[key]

    def get(self, key: str, default: Any = None) -> Any:  # the fast path selectors use
        return self._items.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Labels):
            return NotImplemented
        return (self._hash == other._hash and self.has_hostname == other.has_hostname
                and self._items == other._items)

    def __repr__(self) -> str:
        return f"Labels({self._items!r}, has_hostname={self.has_hostname})"


NO_LABELS = Labels({}, has_hostname=False)
HOSTNAME_ONLY = Labels({}, has_hostname=True)  # the default: NodeInfo.hostname is the label


@dataclass(frozen=True, slots=True)
class NodeInfo:
    name: str
    hostname: str  # the kubernetes.io/hostname label value: what affinity terms can match
    platform: Platform
    unschedulable: bool
    taints: tuple[Taint, ...]  # blocking taints only
    images: tuple[tuple[str, ...], ...]  # status.images[].names, one tuple per image
    labels: Labels = HOSTNAME_ONLY  # without the hostname label (shared: `_interned`)
    # The node agent's layer labels (layerlabels.py), as their short ids, sorted: kept apart
    # from `labels`, which nodes of a pool share, since each node's set is its own.
    layer_labels: tuple[str, ...] = ()
    # Whether a live agent vouches for `layer_labels` (its Lease, in live mode): the
    # scheduler matches them either way, the decision credits only what is vouched for.
    labels_trusted: bool = True

    @property
    def schedulable(self) -> bool:
        return not self.unschedulable

    def all_labels(self) -> Mapping[str, str]:
        """Every label of the node, the hostname label included (a view: built per call)."""
        return _WithHostname(self.labels, self.hostname) if self.labels.has_hostname else (
            self.labels)


class _WithHostname(Mapping[str, str]):
    """A node's shared `Labels` plus its own hostname label."""

    __slots__ = ("_hostname", "_labels")

    def __init__(self, labels: Labels, hostname: str) -> None:
        self._labels, self._hostname = labels, hostname

    def __getitem__(self, key: str) -> str:
        return self._hostname if key == HOSTNAME_LABEL else self._labels[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self._hostname if key == HOSTNAME_LABEL else self._labels.get(key, default)

    def __contains__(self, key: object) -> bool:
        return key == HOSTNAME_LABEL or key in self._labels

    def __iter__(self) -> Iterator[str]:
        yield HOSTNAME_LABEL
        yield from self._labels

    def __len__(self) -> int:
        return len(self._labels) + 1


# The names of one image are the same on every node that holds it: one tuple for all of
# them (50 images x 5,000 nodes are ~1,000 distinct tuples). A cache: cleared when full.
_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}
_MAX_NAMES = 100_000


_T = TypeVar("_T")


def _one_of(cache: dict[_T, _T], value: _T, limit: int) -> _T:
    """The cached object equal to `value` (cached now if none); the cache is cleared when
    it holds `limit`."""
    found = cache.get(value)
    if found is None:
        if len(cache) >= limit:
            cache.clear()
        found = cache[value] = value
    return found


def _shared(names: tuple[str, ...]) -> tuple[str, ...]:
    return _one_of(_NAMES, names, _MAX_NAMES)


def _image_names(image: object) -> tuple[str, ...] | None:
    """An image's names as one shared tuple of interned strings (a name that is not a string
    left out); None for an entry without names."""
    names = mapping(image).get("names")
    if not isinstance(names, list) or not names:
        return None
    given = tuple(names)
    try:  # met on another node (nearly always): the shared tuple, no name looked at
        found = _NAMES.get(given)
    except TypeError:  # a name that is a list or an object: not a string, left out below
        found = None
    return found if found is not None else _shared(
        tuple(sys.intern(n) for n in given if isinstance(n, str)))


# Label sets the same way: most nodes of a pool share every label but the hostname, which
# `Labels` leaves out (tracemalloc, 5,000 nodes of 10 labels in 24 distinct sets: 10 bytes a
# node, mostly the NodeInfo's reference; a label unique to each node makes every set
# distinct: about 510 bytes a node). A cache: cleared when full.
_LABEL_SETS: dict[Labels, Labels] = {}
_MAX_LABEL_SETS = 20_000


def _interned(labels: Mapping[str, Any]) -> Labels:
    hostname = labels.get(HOSTNAME_LABEL)
    has_hostname = isinstance(hostname, str) and bool(hostname)  # as NodeInfo.hostname
    if not labels or (has_hostname and len(labels) == 1):
        return HOSTNAME_ONLY if has_hostname else NO_LABELS
    candidate = Labels({sys.intern(k): sys.intern(v) for k, v in labels.items()
                        if isinstance(k, str) and isinstance(v, str)
                        and not (has_hostname and k == HOSTNAME_LABEL)
                        and not k.startswith(LAYER_LABEL_PREFIX)}, has_hostname)
    if not candidate:
        return HOSTNAME_ONLY if has_hostname else NO_LABELS
    return _one_of(_LABEL_SETS, candidate, _MAX_LABEL_SETS)


def layer_label_ids(labels: Mapping[str, Any]) -> tuple[str, ...]:
    """The short ids of the node's layer labels, sorted and interned (a malformed key under
    the prefix is left out: no term the webhook writes could name it)."""
    found = [short for key in labels if isinstance(key, str)
             if (short := label_short_id(key)) is not None]
    if not found:
        return ()
    found.sort()
    return tuple(map(sys.intern, found))


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
    images = tuple(names for image in items(status.get("images"))
                   if (names := _image_names(image)) is not None)
    return NodeInfo(
        name=sys.intern(name),
        hostname=sys.intern(hostname) if isinstance(hostname, str) and hostname else name,
        platform=Platform.of(str(os_name), str(arch), str(info.get("variant") or "")),
        unschedulable=bool(spec.get("unschedulable")),
        taints=taints,
        images=images,
        labels=_interned(labels),
        layer_labels=layer_label_ids(labels),
    )
