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

NodeLayers list pages and watch events too (an object is ~50 KB of JSON: 300 layers, 40
images): the spec is decoded to nodelayers.Spec, typed as the contract says, so no dict is
built per layer or image and the types need no checking in Python; apiVersion, kind and
metadata's name and resourceVersion stay plain (what the reflector and the key read). A page
or event with an object that does not fit is decoded whole: parse_node_layers then rejects
that object as it always did (tests/unit/test_nodelayers_lean.py).

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

from webhook.inventory.nodelayers import Spec


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


class _NodeLayersMetadata(msgspec.Struct):
    name: Any = None
    resourceVersion: Any = None


class _NodeLayers(msgspec.Struct):
    apiVersion: Any = None
    kind: Any = None
    metadata: _NodeLayersMetadata | None = None
    spec: Spec | None = None


class _NodeLayersList(msgspec.Struct):
    metadata: Any = None
    items: list[_NodeLayers] | None = None


class _NodeLayersEvent(msgspec.Struct):
    type: Any = None
    object: _NodeLayers | None = None


_POD_LIST = msgspec.json.Decoder(_PodList)
_NODE_LIST = msgspec.json.Decoder(_NodeList)
_NODELAYERS_LIST = msgspec.json.Decoder(_NodeLayersList)
_NODELAYERS_EVENT = msgspec.json.Decoder(_NodeLayersEvent)


def pod_list(data: bytes) -> Mapping[str, Any]:
    """A PodList page as a dict holding only the projected fields of each pod."""
    return _projected(_POD_LIST, data)


def node_list(data: bytes) -> Mapping[str, Any]:
    """A NodeList page as a dict holding only what node_from_object reads (metadata.name
    and labels, spec.unschedulable and taints, status.nodeInfo, status.images[].names)."""
    return _projected(_NODE_LIST, data)


def nodelayers_list(data: bytes) -> Mapping[str, Any]:
    """A NodeLayers list page, each object's spec decoded to nodelayers.Spec."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        try:
            page = _NODELAYERS_LIST.decode(data)
        except msgspec.ValidationError:
            decoded: Mapping[str, Any] = orjson.loads(data)  # an unexpected shape: whole
            return decoded
        return {"metadata": page.metadata, "items": [_plain(o) for o in page.items or []]}
    finally:
        if enabled:
            gc.enable()


def nodelayers_event(line: bytes) -> Mapping[str, Any]:
    """A NodeLayers watch event: an added or modified object as nodelayers_list gives it;
    any other event (a deletion, a bookmark, an error) or an object that does not fit whole."""
    try:
        event = _NODELAYERS_EVENT.decode(line)
    except msgspec.ValidationError:
        event = None
    if event is None or event.type not in ("ADDED", "MODIFIED") or event.object is None:
        decoded: Mapping[str, Any] = orjson.loads(line)
        return decoded
    return {"type": event.type, "object": _plain(event.object)}


def _plain(obj: _NodeLayers) -> dict[str, Any]:
    """The object as the readers take it: a dict whose spec is the decoded Spec (None:
    absent, which parse_node_layers rejects as it does a missing spec)."""
    out: dict[str, Any] = {}
    if obj.apiVersion is not None:
        out["apiVersion"] = obj.apiVersion
    if obj.kind is not None:
        out["kind"] = obj.kind
    metadata = obj.metadata
    if metadata is not None:
        out["metadata"] = {key: value for key, value in (
            ("name", metadata.name), ("resourceVersion", metadata.resourceVersion))
            if value is not None}
    if obj.spec is not None:
        out["spec"] = obj.spec
    return out


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
