"""The discrete-event replay: arrivals -> (webhook) -> scheduler -> bind -> pulls -> run -> end.

One run replays a trace under one policy on a fresh world; every policy sees the same trace
and the same seeds. Pods that fit nowhere wait in FIFO order and are retried whenever a pod
ends (resources freed). Deterministic for a given trace, seed and configuration.
"""

from __future__ import annotations

import heapq
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.catalog import StaticCatalog
from webhook.layers import ImageLayers, Platform
from webhook.scoring import ScoringPolicy
from webhook.sim.policies import make_policy
from webhook.sim.scheduler import PodView
from webhook.sim.workload import PodSpec, Trace
from webhook.sim.world import ImageBook, World, WorldConfig

SAMPLE_SECONDS = 300.0
_ARRIVE, _PULLED, _STATUS, _FINISH, _SAMPLE = range(5)


@dataclass(frozen=True, slots=True)
class SimConfig:
    seed: int = 1  # scheduler tie-breaks
    world: WorldConfig = field(default_factory=WorldConfig)
    scoring: ScoringPolicy = field(default_factory=ScoringPolicy)  # the webhook's calibration
    percentage_of_nodes_to_score: int = 0  # 0: adaptive


@dataclass(slots=True)
class RunResult:
    policy: str
    pods: int = 0
    scheduled: int = 0
    bytes_pulled: int = 0
    bytes_needed: int = 0  # sum of the pods' image sizes (what a cold cluster would pull)
    pull_times: list[float] = field(default_factory=list)
    cold_starts: int = 0  # pods that waited for a pull
    waited: int = 0  # pods that failed at least one scheduling attempt
    unscheduled: int = 0  # never placed
    max_heat: int = 0  # max pods of one workload on one node (Deployments)
    heat_by_workload: dict[str, int] = field(default_factory=dict)
    util_spread: list[float] = field(default_factory=list)  # stdev of node cpu allocation
    util_mean: list[float] = field(default_factory=list)  # mean node cpu allocation
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (time, cum bytes)
    patched: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    placements: dict[str, str] = field(default_factory=dict)  # pod -> node

    def percentile(self, q: float) -> float:
        return percentile(self.pull_times, q)

    @property
    def mean_pull(self) -> float:
        return statistics.fmean(self.pull_times) if self.pull_times else 0.0

    @property
    def mean_heat(self) -> float:
        """Mean over multi-replica Deployments of the most pods on one node."""
        values = list(self.heat_by_workload.values())
        return statistics.fmean(values) if values else 0.0

    @property
    def mean_util_spread(self) -> float:
        return statistics.fmean(self.util_spread) if self.util_spread else 0.0

    @property
    def mean_util(self) -> float:
        return statistics.fmean(self.util_mean) if self.util_mean else 0.0


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def book_for(trace: Trace, base: StaticCatalog) -> ImageBook:
    catalog = StaticCatalog(base.images())
    for image in trace.images:
        catalog.add(image)
    return ImageBook(catalog)


def pod_object(spec: PodSpec) -> dict[str, Any]:
    """The Pod the workload's controller would create (what the API server sends to /mutate)."""
    metadata: dict[str, Any] = {"name": spec.name, "namespace": "default",
                                "labels": {"app": spec.workload}}
    if spec.kind == "Deployment":
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                        "name": f"{spec.workload}-rs",
                                        "uid": f"uid-{spec.workload}", "controller": True}]
    elif spec.kind == "Job":
        metadata["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                        "name": spec.workload,
                                        "uid": f"uid-{spec.workload}", "controller": True}]
    requests = {"cpu": f"{spec.cpu_milli}m", "memory": str(spec.memory)}

    def containers(images: Sequence[str], prefix: str) -> list[dict[str, Any]]:
        return [{"name": f"{prefix}{i}", "image": image,
                 "resources": {"requests": dict(requests)}} for i, image in enumerate(images)]

    pod_spec: dict[str, Any] = {"containers": containers(spec.images, "c")}
    if spec.init_images:
        pod_spec["initContainers"] = containers(spec.init_images, "init")
    if spec.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in spec.tolerations]
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def spreading_owner(spec: PodSpec) -> str | None:
    """The owner the default topology spreading counts (ReplicaSet-owned pods only)."""
    return f"uid-{spec.workload}" if spec.kind == "Deployment" else None


def run(trace: Trace, policy: str, base: StaticCatalog, config: SimConfig = SimConfig(),
        book: ImageBook | None = None) -> RunResult:
    book = book or book_for(trace, base)
    world = World(trace.nodes, book, config.world)
    placer = make_policy(policy, world, config.seed, config.scoring,
                         config.percentage_of_nodes_to_score)
    result = RunResult(policy=policy, pods=len(trace.pods))
    platforms = {n.platform for n in world.nodes.values()}
    events: list[tuple[float, int, int, Any]] = []
    seq = 0

    def push(t: float, kind: int, data: Any) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, data))

    for i, spec in enumerate(trace.pods):
        push(spec.arrival, _ARRIVE, i)
    end_arrivals = trace.pods[-1].arrival if trace.pods else 0.0
    t = SAMPLE_SECONDS
    while t <= end_arrivals:
        push(t, _SAMPLE, None)
        t += SAMPLE_SECONDS

    views: dict[int, tuple[dict[str, Any], PodView]] = {}
    pending: list[int] = []
    owners: dict[str, int] = {}  # replicas per Deployment
    for spec in trace.pods:
        if spec.kind == "Deployment":
            owners[spec.workload] = owners.get(spec.workload, 0) + 1

    def attempt(i: int, now: float) -> bool:
        spec = trace.pods[i]
        if i not in views:
            obj = pod_object(spec)
            views[i] = (obj, PodView.of(obj, _pod_layers(book, spec, platforms)))
        obj, view = views[i]
        placed = placer.place(obj, view, now)
        if placed.node is None:
            return False
        owner = spreading_owner(spec)
        pod_run, pulls = world.bind(spec, owner, placed.node, now)
        result.scheduled += 1
        result.placements[spec.name] = placed.node
        result.bytes_needed += pod_run.bytes_needed
        pull_time = pod_run.ready_at - now
        result.pull_times.append(pull_time)
        if pull_time > 0:
            result.cold_starts += 1
        if pod_run.bytes_pulled:
            result.timeline.append((now, world.bytes_pulled))
        if owner is not None:
            heat = world.nodes[placed.node].owner_counts[owner]
            result.max_heat = max(result.max_heat, heat)
            if owners.get(spec.workload, 0) > 1:
                previous = result.heat_by_workload.get(spec.workload, 0)
                result.heat_by_workload[spec.workload] = max(previous, heat)
        for end, node, ref in pulls:
            push(end, _PULLED, (node, ref))
        push(pod_run.ready_at + spec.duration, _FINISH, (pod_run, owner))
        return True

    waited: set[int] = set()
    while events:
        now, _, kind, data = heapq.heappop(events)
        if kind == _ARRIVE:
            if not attempt(data, now):
                pending.append(data)
                waited.add(data)
        elif kind == _FINISH:
            pod_run, owner = data
            world.finish(pod_run, owner, now)
            still: list[int] = []
            for i in pending:
                if not attempt(i, now):
                    still.append(i)
            pending = still
        elif kind == _PULLED:
            node, ref = data
            world.pulled(node, ref, now)
            push(now + config.world.status_lag, _STATUS, (node, ref))
        elif kind == _STATUS:
            world.report(*data)
        else:
            fractions = [n.req_cpu / n.spec.cpu_milli for n in world.nodes.values()]
            result.util_spread.append(statistics.pstdev(fractions))
            result.util_mean.append(statistics.fmean(fractions))
    result.bytes_pulled = world.bytes_pulled
    result.waited = len(waited)
    result.unscheduled = len(pending)
    from webhook.sim.policies import WebhookPolicy

    if isinstance(placer, WebhookPolicy):
        result.patched = placer.patched
        result.reasons = dict(placer.reasons)
    placer.close()
    return result


def _pod_layers(book: ImageBook, spec: PodSpec, platforms: set[Platform]
                ) -> dict[Platform, dict[str, int]]:
    out: dict[Platform, dict[str, int]] = {}
    for platform in platforms:
        layers: dict[str, int] = {}
        for ref in spec.init_images + spec.images:
            image = book.get(ref, platform)
            if image is not None:
                layers.update(image.layers)
        out[platform] = layers
    return out


def compare(trace: Trace, base: StaticCatalog, policies: Sequence[str],
            config: SimConfig = SimConfig(),
            progress: Callable[[str], None] | None = None) -> dict[str, RunResult]:
    book = book_for(trace, base)
    results = {}
    for name in policies:
        if progress:
            progress(name)
        results[name] = run(trace, name, base, config, book)
    return results


@dataclass(frozen=True, slots=True)
class SweepPoint:
    label: str
    scoring: ScoringPolicy
    result: RunResult


MiB = 1 << 20
DEFAULT_SWEEP: tuple[tuple[str, Mapping[str, Any]], ...] = (
    ("w10", {"max_weight": 10}),
    ("w25", {"max_weight": 25}),
    ("w50", {"max_weight": 50}),
    ("w75", {"max_weight": 75}),
    ("w100", {"max_weight": 100}),
    ("w100-nobase", {"max_weight": 100, "baseline": False}),
    ("w50-full250", {"max_weight": 50, "full_bytes": 250 * MiB}),
    ("w100-full250", {"max_weight": 100, "full_bytes": 250 * MiB}),
    ("w50-min0", {"max_weight": 50, "min_bytes": 0}),
    ("w100-min0", {"max_weight": 100, "min_bytes": 0}),
)


def sweep(trace: Trace, base: StaticCatalog, config: SimConfig = SimConfig(),
          points: Sequence[tuple[str, Mapping[str, Any]]] = DEFAULT_SWEEP,
          progress: Callable[[str], None] | None = None) -> list[SweepPoint]:
    """The webhook under several calibrations (min_bytes, full_bytes, max_weight, baseline)."""
    book = book_for(trace, base)
    out = []
    for label, knobs in points:
        if progress:
            progress(label)
        scoring = ScoringPolicy(**knobs)
        cfg = SimConfig(seed=config.seed, world=config.world, scoring=scoring,
                        percentage_of_nodes_to_score=config.percentage_of_nodes_to_score)
        out.append(SweepPoint(label, scoring, run(trace, "webhook", base, cfg, book)))
    return out


def official_images(base: StaticCatalog) -> list[ImageLayers]:
    return base.images()
