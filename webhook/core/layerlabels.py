"""Layer labels: the Node labels the node agent writes, one per large layer the node holds,
and what the webhook's preferred terms match. Pure; the agent and the webhook share it.

A term naming a node set by label costs about a hundred bytes whatever the cluster's size,
and every holder of the layer gets credit wherever the scheduler's sample falls, where a
term naming hostnames grows with the names and misses the nodes it leaves out.

The rule every agent applies alike, with no plan to agree on: a label for each distinct
layer of the node's images of at least `LabelRule.min_bytes`, the largest first, at most
`LabelRule.max_labels` of them. The key is the layer's content address, shortened:
`layer-locality.io/l.<the first 16 hex digits of its sha256>`; the value is its
compressed size in MiB, rounded up (for people: the webhook reads the size from its
inventory). Content-addressed keys never change meaning: a node's label changes only when
it gains or loses that layer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

LABEL_DOMAIN = "layer-locality.io/"  # every key the product writes on objects it does not own
LAYER_LABEL_PREFIX = LABEL_DOMAIN + "l."
SHORT_HEX = 16  # 64 bits of the digest: collisions among a cluster's layers are negligible
MiB = 1 << 20
_HEX = frozenset("0123456789abcdef")
_ALGORITHM = "sha256:"


@dataclass(frozen=True, slots=True)
class LabelRule:
    """Which layers a node labels. The defaults keep a node of 50 images (the kubelet's
    `nodeStatusMaxImages`) to a few dozen labels, at most about 3 KB on the Node."""

    min_bytes: int = 16 * MiB
    max_labels: int = 64

    def __post_init__(self) -> None:
        if self.min_bytes < 1:
            raise ValueError("the label rule's min_bytes must be at least 1")
        if not 0 <= self.max_labels <= 200:
            raise ValueError("the label rule's max_labels must be within 0..200")


def short_id(digest: str) -> str | None:
    """`sha256:<64 hex>` -> its first SHORT_HEX hex digits; None for another form."""
    if not digest.startswith(_ALGORITHM):
        return None
    hexpart = digest[len(_ALGORITHM):]
    if len(hexpart) != 64 or not _HEX.issuperset(hexpart):
        return None
    return hexpart[:SHORT_HEX]


def layer_label(digest: str) -> str | None:
    """The label key for a layer digest; None when the digest is not a sha256 digest."""
    short = short_id(digest)
    return None if short is None else LAYER_LABEL_PREFIX + short


def is_layer_label(key: str) -> bool:
    return key.startswith(LAYER_LABEL_PREFIX)


def label_short_id(key: str) -> str | None:
    """The short id a layer label key names; None for any other key (or a malformed one)."""
    if not key.startswith(LAYER_LABEL_PREFIX):
        return None
    short = key[len(LAYER_LABEL_PREFIX):]
    if len(short) != SHORT_HEX or not _HEX.issuperset(short):
        return None
    return short


def label_value(size: int) -> str:
    """The label's value: the layer's size in MiB, rounded up (at least 1)."""
    return str(max(1, -(-size // MiB)))


def node_layer_labels(layers: Mapping[str, int] | Iterable[tuple[str, int]],
                      rule: LabelRule = LabelRule()) -> dict[str, str]:
    """The layer labels a node holding `layers` (digest -> compressed size) carries under
    `rule`: the largest qualifying layers first, ties by digest, at most `max_labels`. Two
    digests that share a short id (never seen in practice) keep the larger layer's label."""
    pairs = layers.items() if isinstance(layers, Mapping) else layers
    ranked = sorted(((size, digest) for digest, size in pairs if size >= rule.min_bytes),
                    key=lambda item: (-item[0], item[1]))
    labels: dict[str, str] = {}
    for size, digest in ranked:
        if len(labels) >= rule.max_labels:
            break
        key = layer_label(digest)
        if key is not None and key not in labels:
            labels[key] = label_value(size)
    return labels


def label_changes(current: Mapping[str, str] | None,
                  desired: Mapping[str, str]) -> dict[str, str | None]:
    """The `metadata.labels` part of a JSON merge patch taking a Node's layer labels from
    `current` (all its labels) to `desired` (layer labels only): a value for each label to
    add or change, None for each to remove. Labels that are not layer labels are never
    touched; an empty answer means nothing to write."""
    current = current or {}
    changes: dict[str, str | None] = {
        key: None for key in current if is_layer_label(key) and key not in desired}
    for key, value in desired.items():
        if not is_layer_label(key):
            raise ValueError(f"not a layer label: {key!r}")
        if current.get(key) != value:
            changes[key] = value
    return changes
