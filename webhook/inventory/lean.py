"""Pod list pages decoded to the fields the inventory reads, not whole.

A running pod is 4-8 KB of JSON (managedFields, env, volumes, container statuses...) and
the inventory reads a few fields of it; decoding every field of 150,000 pods to keep a
handful dominated the time to sync and left the heap fragmented. msgspec decodes a page
against this projection, skipping every other field without building it, and gives back
plain dicts shaped like the originals (what webhook.core.pods and the telemetry read), so no
reader changes. A page that does not fit the projection (a field of an unexpected type) is
decoded whole instead: the readers then skip what they skip today.

Node list pages likewise (a Node with 50 images is ~15 KB of JSON; nodes.py reads its name,
labels, taints, unschedulable, nodeInfo and image names).

The readers and their fields (keep in step: tests/unit/test_lean.py checks each reader
gives the same answer on both decodings):
- live.py: metadata.uid/name/namespace (the key), spec.nodeName, status.phase;
- pods.py: pod_images (spec.containers[].image, spec.initContainers[].image), pod_owner
  (metadata.ownerReferences), decision_id (metadata.annotations);
- telemetry: decision_facts (metadata.annotations), webhook_terms (spec.affinity), the
  holdout's start time (metadata.creationTimestamp, status.phase).
"""

from __future__ import annotations

import gc
from collections.abc import Mapping
from typing import Any

import msgspec
import orjson


class _Container(msgspec.Struct, omit_defaults=True):
    image: Any = None


class _Metadata(msgspec.Struct, omit_defaults=True):
    uid: Any = None
    name: Any = None
    namespace: Any = None
    resourceVersion: Any = None
    creationTimestamp: Any = None
    annotations: Any = None
    ownerReferences: Any = None


class _Spec(msgspec.Struct, omit_defaults=True):
    nodeName: Any = None
    containers: list[_Container] | None = None
    initContainers: list[_Container] | None = None
    affinity: Any = None


class _Status(msgspec.Struct, omit_defaults=True):
    phase: Any = None


class _Pod(msgspec.Struct, omit_defaults=True):
    kind: Any = None
    apiVersion: Any = None
    metadata: _Metadata | None = None
    spec: _Spec | None = None
    status: _Status | None = None


class _PodList(msgspec.Struct):
    metadata: Any = None
    items: list[_Pod] | None = None


class _NodeMetadata(msgspec.Struct, omit_defaults=True):
    name: Any = None
    uid: Any = None
    resourceVersion: Any = None
    labels: Any = None


class _NodeSpec(msgspec.Struct, omit_defaults=True):
    unschedulable: Any = None
    taints: Any = None


class _NodeImage(msgspec.Struct, omit_defaults=True):
    names: Any = None


class _NodeStatus(msgspec.Struct, omit_defaults=True):
    nodeInfo: Any = None
    images: list[_NodeImage] | None = None


class _Node(msgspec.Struct, omit_defaults=True):
    kind: Any = None
    apiVersion: Any = None
    metadata: _NodeMetadata | None = None
    spec: _NodeSpec | None = None
    status: _NodeStatus | None = None


class _NodeList(msgspec.Struct):
    metadata: Any = None
    items: list[_Node] | None = None


_POD_LIST = msgspec.json.Decoder(_PodList)
_NODE_LIST = msgspec.json.Decoder(_NodeList)


def pod_list(data: bytes) -> Mapping[str, Any]:
    """A PodList page as a dict holding only the projected fields of each pod."""
    return _projected(_POD_LIST, data)


def node_list(data: bytes) -> Mapping[str, Any]:
    """A NodeList page as a dict holding only what node_from_object reads (metadata.name
    and labels, spec.unschedulable and taints, status.nodeInfo, status.images[].names)."""
    return _projected(_NODE_LIST, data)


def _projected(decoder: msgspec.json.Decoder[Any], data: bytes) -> Mapping[str, Any]:
    # A page is ~100,000 new objects without a cycle among them: the cycle collector would
    # run dozens of times over the growing heap for nothing (it halves the decode time).
    enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            page = decoder.decode(data)
        except msgspec.ValidationError:
            decoded: Mapping[str, Any] = orjson.loads(data)  # an unexpected shape: whole
            return decoded
        return {"metadata": page.metadata, "items": msgspec.to_builtins(page.items or [])}
    finally:
        if enabled:
            gc.enable()
