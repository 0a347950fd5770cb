"""The review pipeline: pod -> images -> layers (within the time budget) -> overlap per node
(from the inventory) -> weights -> patch. The server stays thin; the steps are pure modules."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import orjson

from webhook.admission import Review
from webhook.affinity import PatchOperation, PreferredTerm, affinity_patch
from webhook.images import ImageRef, try_parse
from webhook.inventory.index import LayerIndex
from webhook.inventory.nodes import NodeInfo
from webhook.layers import ImageLayers, LayerSource, Platform, SourceChain
from webhook.pods import pod_images, pod_key, pod_tolerations, skip_reason
from webhook.scoring import ScoringPolicy, TermPlan, plan_terms

log = logging.getLogger(__name__)

DECISION_VERSION = 1
TOP_NODES_IN_DECISION = 3
_MAX_BACKGROUND = 256  # resolutions left running after a review's budget ran out


class Inventory(Protocol):
    @property
    def index(self) -> LayerIndex: ...

    @property
    def ready(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class NodeBytes:
    node: NodeInfo
    bytes_present: int


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a review did: `result` is patched | skipped; `reason` a metric label."""

    result: str
    reason: str
    patch: tuple[PatchOperation, ...] = ()
    pod: str = ""
    budget_misses: int = 0
    terms: tuple[PreferredTerm, ...] = ()
    nodes: tuple[NodeBytes, ...] = field(default=(), repr=False)
    pod_bytes: int = 0


class Mutator:
    def __init__(
        self,
        sources: Sequence[LayerSource],
        inventory: Inventory,
        policy: ScoringPolicy,
        budget_seconds: float = 0.25,
    ) -> None:
        self._sources = SourceChain(sources)
        self._inventory = inventory
        self._policy = policy
        self._budget = budget_seconds
        self._background: set[asyncio.Task[ImageLayers | None]] = set()

    async def review(self, review: Review) -> Outcome:
        reason = review.unsupported_reason()
        if reason is not None:
            return Outcome("skipped", reason)
        pod = review.object
        assert pod is not None
        key = pod_key(pod, review.uid)
        reason = skip_reason(pod)
        if reason is not None:
            return Outcome("skipped", reason, pod=key)
        # An invalid reference is left out (the API server rejects the pod anyway).
        refs = [ref for ref in map(try_parse, pod_images(pod)) if ref is not None]
        if not refs:
            return Outcome("skipped", "no_images", pod=key)
        images, misses = await self._layers(refs)
        if not images:
            return Outcome("skipped", "unresolved", pod=key, budget_misses=misses)
        outcome = decide(pod, images, self._inventory.index, self._policy, salt=key)
        return replace(outcome, pod=key, budget_misses=misses)

    async def _layers(self, refs: Sequence[ImageRef]) -> tuple[list[ImageLayers], int]:
        found: list[ImageLayers] = []
        missing: list[ImageRef] = []
        for ref in refs:
            image = self.cached(ref)
            if image is not None:
                found.append(image)
            else:
                missing.append(ref)
        if not missing or not self._sources.sources:
            return found, 0
        tasks = [asyncio.ensure_future(self._sources.resolve(ref)) for ref in missing]
        done, pending = await asyncio.wait(tasks, timeout=self._budget)
        for task in done:
            if not task.cancelled() and task.exception() is None and task.result() is not None:
                found.append(task.result())  # type: ignore[arg-type]
        for task in pending:
            # Finishing in the background warms the cache so the next pod benefits.
            if len(self._background) < _MAX_BACKGROUND:
                self._background.add(task)
                task.add_done_callback(self._background.discard)
            else:
                task.cancel()
        return found, len(pending)

    def cached(self, ref: ImageRef) -> ImageLayers | None:
        return self._sources.cached(ref)

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)


def pod_layers(
    images: Sequence[ImageLayers], platforms: Sequence[Platform]
) -> dict[Platform, dict[str, int]]:
    """Per platform, the pod's distinct layers (digest -> compressed size)."""
    result: dict[Platform, dict[str, int]] = {}
    for platform in platforms:
        layers: dict[str, int] = {}
        for image in images:
            manifest = image.for_platform(platform)
            if manifest is not None:
                for layer in manifest.layers:
                    layers[layer.digest] = layer.size
        if layers:
            result[platform] = layers
    return result


def decide(
    pod: Mapping[str, Any],
    images: Sequence[ImageLayers],
    index: LayerIndex,
    policy: ScoringPolicy,
    salt: str,
) -> Outcome:
    """Terms and patch for a pod whose images resolved to `images`. No I/O."""
    layers = pod_layers(images, list(index.platforms()))
    if not layers:
        return Outcome("skipped", "no_platform")
    candidates = index.candidates(pod_tolerations(pod))
    if not candidates:
        return Outcome("skipped", "no_nodes")
    groups = index.overlap_groups(layers, candidates)
    plan = plan_terms([(g.bytes_present, g) for g in groups], policy)
    if isinstance(plan, str):
        return Outcome("skipped", plan)
    terms, chosen = _spend(plan, index, policy.max_nodes, salt)
    if plan.baseline_weight:  # the first level always gets nodes: its weight is the top
        terms.append(PreferredTerm(weight=plan.baseline_weight, hostnames=()))
    pod_bytes = max(sum(sizes.values()) for sizes in layers.values())
    decision = _decision(pod_bytes, chosen)
    patch = affinity_patch(pod, terms, decision)
    return Outcome(
        "patched",
        "patched",
        patch=tuple(patch),
        terms=tuple(terms),
        nodes=tuple(chosen),
        pod_bytes=pod_bytes,
    )


def _spend(
    plan: TermPlan[Any], index: LayerIndex, budget: int, salt: str
) -> tuple[list[PreferredTerm], list[NodeBytes]]:
    """Hostnames per weight level, best first, at most `budget` in all."""
    terms: list[PreferredTerm] = []
    chosen: list[NodeBytes] = []
    for level in plan.levels:
        hostnames: dict[str, None] = {}
        for group in level.members:
            left = budget - len(chosen)
            for node in index.pick(group.mask, left, salt):
                chosen.append(NodeBytes(node, group.bytes_present))
                hostnames.setdefault(node.hostname)
        if hostnames:
            terms.append(PreferredTerm(weight=level.weight, hostnames=tuple(sorted(hostnames))))
        if len(chosen) >= budget:
            break
    return terms, chosen


def _decision(pod_bytes: int, chosen: Sequence[NodeBytes]) -> str:
    top = [
        {"node": c.node.name, "bytes": c.bytes_present}
        for c in chosen[:TOP_NODES_IN_DECISION]
    ]
    return orjson.dumps(
        {"v": DECISION_VERSION, "podBytes": pod_bytes, "preferredNodes": len(chosen), "top": top}
    ).decode()


