"""Where a round's pods landed, for bench.controlplane (pure).

Read back from the API server: each pod's terms, decision annotation and node. Judged two ways:
- as the product's telemetry judges a bind (webhook.telemetry.binds: the webhook's terms, its
  baseline weight, the bound node's hostname and layer labels): TOP, PREFERRED or OTHER;
- by bytes, whatever the terms said: the bytes of the pod's layers on the bound node against
  the most any candidate holds (candidates as the webhook counts them: not cordoned, every
  blocking taint tolerated). A stock round is judged by bytes too: the baseline.

The bench knows every node's images (its layers) and the layer labels its stand-in agent set,
so no Node is read back: at 5,000 nodes that would be 90 MB per round.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.core.images import try_parse
from webhook.core.layers import ImageLayers, Layer, Platform
from webhook.core.nodes import Taint, node_from_object
from webhook.core.objects import items, mapping
from webhook.core.pods import (
    DECISION_ANNOTATION,
    PREFERRED,
    decision_document,
    pod_images,
    pod_tolerations,
)
from webhook.core.prepare import pod_layers
from webhook.core.tolerations import tolerates_all
from webhook.registry.catalog import StaticCatalog
from webhook.telemetry.binds import (
    BindOutcome,
    baseline_weight,
    bytes_present,
    classify,
    decision_facts,
    webhook_terms,
)

AMD64 = Platform.of("linux", "amd64")


@dataclass(frozen=True, slots=True)
class NodeView:
    """What a bind is judged against: the node's hostname label, its layer labels (short
    ids), the layers it holds, and whether a pod without tolerations of its taints fits."""

    name: str
    hostname: str
    layer_labels: frozenset[str]
    layers: frozenset[str]
    unschedulable: bool
    taints: tuple[Taint, ...]

    def candidate(self, tolerations: Sequence[Mapping[str, Any]]) -> bool:
        return not self.unschedulable and tolerates_all(tolerations, self.taints)


def node_view(item: Mapping[str, Any], layers: Iterable[str],
              labels: Mapping[str, str] | None = None) -> NodeView:
    """`item`: the Node as created; `labels`: its labels now, when an agent changed them."""
    metadata = mapping(item.get("metadata"))
    node = node_from_object(dict(item, metadata=dict(
        metadata, labels=dict(labels if labels is not None else mapping(metadata.get("labels"))))))
    return NodeView(node.name, node.hostname, frozenset(node.layer_labels), frozenset(layers),
                    node.unschedulable, node.taints)


def node_views(items: Iterable[Mapping[str, Any]], by_ref: Mapping[str, ImageLayers],
               labels: Mapping[str, Mapping[str, str]]) -> dict[str, NodeView]:
    """Each node item as binds are judged: the layers of its images (`names[1]`: the tag the
    bench's catalog knows), its labels now (`labels`: by node, where an agent set them)."""
    views = {}
    for item in items:
        name = str(mapping(item.get("metadata")).get("name"))
        held = {layer.digest
                for image in node_tags(item) for layer in _layers(by_ref[image])}
        views[name] = node_view(item, held, labels.get(name))
    return views


def node_tags(item: Mapping[str, Any]) -> list[str]:
    """The tags of a bench node's images."""
    return [str(image["names"][1]) for image in items(mapping(item.get("status")).get("images"))]


def _layers(image: ImageLayers) -> tuple[Layer, ...]:
    manifest = image.for_platform(AMD64)
    return manifest.layers if manifest is not None else ()


def pod_layer_sizes(pod: Mapping[str, Any], catalog: StaticCatalog) -> dict[str, int]:
    """The pod's distinct layers (digest -> size), as the webhook looks its images up."""
    found: list[ImageLayers] = []
    for reference in pod_images(pod):
        ref = try_parse(reference)
        image = catalog.cached(ref) if ref is not None else None
        if image is not None:
            found.append(image)
    return pod_layers(found, [AMD64]).get(AMD64, {})


def most_bytes(layers: Mapping[str, int], nodes: Iterable[NodeView],
               tolerations: Sequence[Mapping[str, Any]]) -> int:
    """The most bytes of `layers` any candidate node holds."""
    return max((bytes_present(layers, n.layers) for n in nodes if n.candidate(tolerations)),
               default=0)


@dataclass(frozen=True, slots=True)
class Placed:
    """One bound pod."""

    steered: bool  # carries terms of the webhook's (its decision says so)
    outcome: BindOutcome | None  # the telemetry's; None when not steered
    label_terms: int
    hostname_terms: int
    hostnames: int  # distinct hostnames the webhook's terms name
    named: bool  # the node is among them
    decision_top: bool  # the node is in the decision's `top`
    added_bytes: int  # the preferred terms' JSON and the decision annotation
    present: int  # bytes of the pod on its node
    best: int  # the most bytes on any candidate

    @property
    def ratio(self) -> float:
        """Bytes on its node over the most on any candidate; 1 when no candidate holds any."""
        return self.present / self.best if self.best else 1.0


def place(pod: Mapping[str, Any], node: NodeView, layers: Mapping[str, int],
          best: int) -> Placed:
    """Judge pod's bind to `node`; `layers`: the pod's, `best`: most_bytes for its kind."""
    facts = decision_facts(pod)
    annotation = mapping(mapping(pod.get("metadata")).get("annotations")).get(
        DECISION_ANNOTATION)
    preferred = items(mapping(mapping(mapping(pod.get("spec")).get("affinity")).get(
        "nodeAffinity")).get(PREFERRED))
    present = bytes_present(layers, node.layers)
    if facts is None or not facts.steered:
        return Placed(False, None, 0, 0, 0, False, False, 0, present, best)
    terms = webhook_terms(pod, facts.terms)
    outcome = classify(terms, node.hostname, node.layer_labels,
                       baseline_weight(pod, facts.terms))
    names = frozenset().union(*(t.hostnames for t in terms if not t.label))
    top = {e.get("node") for e in items(mapping(decision_document(pod)).get("top"))
           if isinstance(e, Mapping)}
    return Placed(
        steered=bool(terms), outcome=outcome if terms else None,
        label_terms=sum(1 for t in terms if t.label),
        hostname_terms=sum(1 for t in terms if not t.label),
        hostnames=len(names), named=node.hostname in names, decision_top=node.name in top,
        # As the bench counted before labels: what the API server stores beyond a stock pod.
        added_bytes=len(orjson.dumps(preferred)) + len(annotation if isinstance(
            annotation, str) else ""),
        present=present, best=best)


def judge(pods: Iterable[Mapping[str, Any]], nodes: Mapping[str, NodeView],
          catalog: StaticCatalog) -> list[Placed]:
    """Every bound pod of `pods` on a node of `nodes`. The candidates' best is computed once
    per image set and tolerations (a Deployment's pods share them)."""
    bests: dict[bytes, tuple[dict[str, int], int]] = {}
    out: list[Placed] = []
    for pod in pods:
        node = nodes.get(str(mapping(pod.get("spec")).get("nodeName") or ""))
        if node is None:
            continue
        tolerations = pod_tolerations(pod)
        key = orjson.dumps([pod_images(pod), tolerations])
        if key not in bests:
            layers = pod_layer_sizes(pod, catalog)
            bests[key] = (layers, most_bytes(layers, nodes.values(), tolerations))
        layers, best = bests[key]
        out.append(place(pod, node, layers, best))
    return out


def summary(placed: Sequence[Placed], pods: int) -> dict[str, Any]:
    """A round's placement figures. Counts over steered pods unless said otherwise."""
    steered = [p for p in placed if p.steered]
    outcomes = {o.value: sum(1 for p in steered if p.outcome is o) for o in BindOutcome}

    def mean(values: Sequence[float]) -> float | None:
        return sum(values) / len(values) if values else None

    def share(part: int, whole: int) -> float | None:
        return part / whole if whole else None

    most = sum(1 for p in placed if p.present >= p.best)
    most_steered = sum(1 for p in steered if p.present >= p.best)
    return {
        "pods": pods, "bound": len(placed), "steered": len(steered),
        "outcomes": outcomes,
        # Kept from before labels; now the telemetry's TOP (the same rule for hostname terms).
        "on_top_weight_node": outcomes[BindOutcome.TOP.value],
        "top_share": share(outcomes[BindOutcome.TOP.value], len(steered)),
        "on_named_node": sum(1 for p in steered if p.named),
        "on_decision_top": sum(1 for p in steered if p.decision_top),
        "terms": {"label_only": sum(1 for p in steered if p.label_terms and not p.hostname_terms),
                  "hostname_only": sum(1 for p in steered
                                       if p.hostname_terms and not p.label_terms),
                  "both": sum(1 for p in steered if p.label_terms and p.hostname_terms)},
        "label_terms_mean": mean([p.label_terms for p in steered]) or 0.0,
        "hostnames_mean": mean([p.hostnames for p in steered]) or 0.0,
        "added_bytes_mean": mean([p.added_bytes for p in steered]) or 0.0,
        # By bytes, every bound pod (steered or not):
        "on_most_bytes_node": most, "on_most_bytes_share": share(most, len(placed)),
        "on_most_bytes_share_steered": share(most_steered, len(steered)),
        "present_ratio_mean": mean([p.ratio for p in placed]),
        "present_ratio_mean_steered": mean([p.ratio for p in steered]),
    }

