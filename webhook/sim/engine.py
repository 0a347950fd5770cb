"""The discrete-event replay: create (admission) -> schedule -> bind -> pulls -> run -> end.

One run replays a trace under one policy on a fresh world; every policy sees the same trace
and the same seeds. Pods are created in steps (creation.py: slow-start bursts): each pod of a
step passes admission (the policy's `admit`, once), then the scheduler places them one by one.
Pods that fit nowhere wait in FIFO order and are retried, unchanged, whenever a pod ends
(resources freed). Binds, pod ends and node status changes go to the webhook's watches
(watch.py), which deliver them late. Deterministic for a given trace, seed and configuration.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

from webhook.core.layers import Platform
from webhook.core.pods import pod_images
from webhook.core.scoring import ScoringPolicy
from webhook.registry.catalog import StaticCatalog
from webhook.sim.creation import (
    CreationConfig,
    Step,
    admission_object,
    created_object,
    plan_steps,
    spreading_owner,
)
from webhook.sim.lossprobe import LossProbe, decision_of
from webhook.sim.outcomes import image_pulls
from webhook.sim.policies import Policy, PolicyFactory, make_policy
from webhook.sim.results import RunResult, SweepPoint
from webhook.sim.scheduler import PodView, Scheduler
from webhook.sim.view import ViewConfig
from webhook.sim.watch import BindAccount, BoundPod, SimWatch, StoredPod
from webhook.sim.workload import PodSpec, Trace
from webhook.sim.world import ImageBook, World, WorldConfig

SAMPLE_SECONDS = 300.0
_CREATE, _PULLED, _STATUS, _FINISH, _SAMPLE = range(5)


@dataclass(frozen=True, slots=True)
class SimConfig:
    seed: int = 1  # scheduler tie-breaks
    world: WorldConfig = field(default_factory=WorldConfig)
    scoring: ScoringPolicy = field(default_factory=ScoringPolicy)  # the webhook's calibration
    percentage_of_nodes_to_score: int = 0  # 0: adaptive
    view: ViewConfig = field(default_factory=ViewConfig)  # what the webhook sees, and when
    creation: CreationConfig = field(default_factory=CreationConfig)  # bursts
    # Attribute every placement's lost bytes to a cause (lossprobe.py; RunResult.losses).
    explain: bool = False


def book_for(trace: Trace, base: StaticCatalog) -> ImageBook:
    catalog = StaticCatalog(base.images())
    for image in trace.images:
        catalog.add(image)
    return ImageBook(catalog)


class _Replay:
    def __init__(self, trace: Trace, placer: Policy, world: World, watch: SimWatch,
                 config: SimConfig) -> None:
        self.trace = trace
        self.placer = placer
        self.world = world
        self.watch = watch
        self.config = config
        self.result = RunResult(policy=placer.name, pods=len(trace.pods))
        self.platforms = {n.platform for n in world.nodes.values()}
        self.events: list[tuple[float, int, int, Any]] = []
        self.seq = 0
        self.objects: dict[int, dict[str, Any]] = {}  # the created pods
        self.views: dict[int, PodView] = {}
        self.pending: list[int] = []
        self.waited: set[int] = set()
        self.replicas: dict[str, int] = {}
        for spec in trace.pods:
            if spec.kind == "Deployment":
                self.replicas[spec.workload] = self.replicas.get(spec.workload, 0) + 1
        self.status_seen = {n.name: n.status_version for n in world.nodes.values()}
        scheduler = getattr(placer, "scheduler", None)
        self.probe = LossProbe(world, scheduler, getattr(placer, "index", None)) \
            if config.explain and isinstance(scheduler, Scheduler) else None

    def push(self, t: float, kind: int, data: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, data))

    def run(self) -> RunResult:
        for step in plan_steps(self.trace.pods, self.config.creation):
            self.push(step.time, _CREATE, step)
        end_arrivals = max((p.arrival for p in self.trace.pods), default=0.0)
        t = SAMPLE_SECONDS
        while t <= end_arrivals:
            self.push(t, _SAMPLE, None)
            t += SAMPLE_SECONDS
        while self.events:
            now, _, kind, data = heapq.heappop(self.events)
            if kind == _CREATE:
                self.create(data, now)
            elif kind == _FINISH:
                self.finish(data, now)
            elif kind == _PULLED:
                node, ref = data
                self.world.pulled(node, ref, now)  # may garbage-collect
                self.status_changed(node, now)
                self.push(self.world.status_time(node, now), _STATUS, data)
            elif kind == _STATUS:
                self.world.report(*data)
                self.status_changed(data[0], now)
            else:
                nodes = self.world.nodes.values()
                self.result.sample_cpu([n.req_cpu / n.spec.cpu_milli for n in nodes])
        self.result.bytes_pulled = self.world.bytes_pulled
        self.result.waited = len(self.waited)
        self.result.unscheduled = len(self.pending)
        for name in ("reviews", "patched"):
            setattr(self.result, name, getattr(self.placer, name, 0))
        self.result.reasons = dict(getattr(self.placer, "reasons", {}))
        if self.probe is not None:
            self.result.losses = self.probe.losses
        return self.result

    def create(self, step: Step, now: float) -> None:
        """Every CREATE of the step passes admission before the scheduler sees any of them."""
        for i in step.pods:
            spec = self.trace.pods[i]
            obj = created_object(self.placer.admit(admission_object(spec), now, spec.replica),
                                 spec)
            if self.probe is not None:
                self.probe.admitted(i, decision_of(self.placer))
            self.objects[i] = obj
            self.views[i] = PodView.of(obj, self.pod_layers(spec))
            if self.watch.active:
                metadata = obj["metadata"]
                self.watch.pod_stored(now, StoredPod(
                    metadata["uid"], self.views[i].owner,
                    dict(metadata.get("annotations") or {})))
        for i in step.pods:
            if not self.attempt(i, now):
                self.pending.append(i)
                self.waited.add(i)

    def attempt(self, i: int, now: float) -> bool:
        spec, result = self.trace.pods[i], self.result
        placed = self.placer.schedule(self.views[i], now)
        if placed.node is None:
            return False
        if self.probe is not None:
            self.probe.placing(i, self.views[i], placed)
        owner = spreading_owner(spec)
        target = self.world.nodes[placed.node]
        layers = self.views[i].layers.get(target.platform, {})
        present = target.bytes_present(layers) if self.watch.active else 0  # before the bind
        pod_run, pulls = self.world.bind(spec, owner, placed.node, now)
        result.scheduled += 1
        result.placements[spec.name] = placed.node
        result.bytes_needed += pod_run.bytes_needed
        pull_time = pod_run.ready_at - now
        result.pull_times.append(pull_time)
        if pull_time > 0:
            result.cold_starts += 1
        if pod_run.bytes_pulled:
            result.timeline.append((now, self.world.bytes_pulled))
        if owner is not None:
            heat = self.world.nodes[placed.node].owner_counts[owner]
            result.max_heat = max(result.max_heat, heat)
            if heat > result.max_skew:  # the skew can pass it only where the heat does
                floor = min(node.owner_counts.get(owner, 0)
                            for node in self.world.nodes.values())
                result.max_skew = max(result.max_skew, heat - floor)
            if self.replicas.get(spec.workload, 0) > 1:
                previous = result.heat_by_workload.get(spec.workload, 0)
                result.heat_by_workload[spec.workload] = max(previous, heat)
        for end, node, ref in pulls:
            self.push(end, _PULLED, (node, ref))
        self.push(pod_run.ready_at + spec.duration, _FINISH, (i, pod_run, owner))
        if self.watch.active:
            metadata = self.objects[i]["metadata"]
            self.watch.pod_bound(now, BoundPod(
                uid=metadata["uid"], name=metadata["name"], owner=self.views[i].owner,
                node=placed.node, annotations=dict(metadata.get("annotations") or {}),
                images=tuple(pod_images(self.objects[i])), pod=self.objects[i],
                pulls=image_pulls(target, pod_run, now),
                account=BindAccount(present, sum(layers.values()))))
        return True

    def finish(self, data: tuple[int, Any, str | None], now: float) -> None:
        i, pod_run, owner = data
        self.world.finish(pod_run, owner, now)
        if self.watch.active:
            self.watch.pod_gone(now, self.objects[i]["metadata"]["uid"])
        still: list[int] = []
        for j in self.pending:
            if not self.attempt(j, now):
                still.append(j)
        self.pending = still

    def status_changed(self, name: str, now: float) -> None:
        node = self.world.nodes[name]
        if node.status_version != self.status_seen[name]:
            self.status_seen[name] = node.status_version
            if self.watch.active:
                self.watch.node_changed(now, self.world.node_object(node))

    def pod_layers(self, spec: PodSpec) -> dict[Platform, dict[str, int]]:
        out: dict[Platform, dict[str, int]] = {}
        for platform in self.platforms:
            layers: dict[str, int] = {}
            for ref in spec.init_images + spec.images:
                image = self.world.book.get(ref, platform)
                if image is not None:
                    layers.update(image.layers)
            out[platform] = layers
        return out


def run(trace: Trace, policy: str | PolicyFactory, base: StaticCatalog,
        config: SimConfig = SimConfig(), book: ImageBook | None = None) -> RunResult:
    """Replay `trace` under `policy` (a name, or a factory for tests and new policies)."""
    world = World(trace.nodes, book or book_for(trace, base), config.world)
    watch = SimWatch(config.view.watch_delay, config.view.watch_jitter, config.seed)
    placer = make_policy(policy, world, watch, config.seed, config.scoring,
                         config.percentage_of_nodes_to_score, config.view) \
        if isinstance(policy, str) else policy(world, watch)
    try:
        return _Replay(trace, placer, world, watch, config).run()
    finally:
        placer.close()


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


MiB = 1 << 20
DEFAULT_SWEEP: tuple[tuple[str, Mapping[str, Any]], ...] = (
    # Relative to the run's calibration (the webhook's defaults unless flags say otherwise).
    ("default", {}),
    ("absolute", {"share": 0.0}),  # the first release: bytes up to full_bytes
    ("absolute-full250", {"share": 0.0, "full_bytes": 250 * MiB}),
    ("blend", {"share": 0.5}),
    ("share-nobase", {"baseline": False}),
    ("absolute-nobase", {"share": 0.0, "baseline": False}),
    ("step0", {"spread_step": 0}),
    ("step30", {"spread_step": 30}),
    ("max-nodes10", {"max_nodes": 10}),
    ("w50", {"max_weight": 50}),
    ("no-guard", {"spread_guard": False}),
    # What the view costs: no delays (every bind seen at once, every image known), a slow
    # watch, a registry that answers within the review budget.
    ("instant", {"watch_delay": 0.0, "registry_delay": 0.0}),
    ("watch5s", {"watch_delay": 5.0}),
    ("registry0.2s", {"registry_delay": 0.2}),
    # One webhook replica (the manifests ship two, sharing their reviews through the pod watch).
    ("one-replica", {"replicas": 1}),
)
_VIEW_KNOBS = frozenset(f.name for f in fields(ViewConfig))


def sweep(trace: Trace, base: StaticCatalog, config: SimConfig = SimConfig(),
          points: Sequence[tuple[str, Mapping[str, Any]]] = DEFAULT_SWEEP,
          progress: Callable[[str], None] | None = None) -> list[SweepPoint]:
    """The webhook under several calibrations (ScoringPolicy knobs) and views (ViewConfig
    knobs: watch_delay, registry_delay); unnamed knobs keep `config`'s values."""
    book = book_for(trace, base)
    out = []
    for label, knobs in points:
        if progress:
            progress(label)
        scoring = replace(config.scoring,
                          **{k: v for k, v in knobs.items() if k not in _VIEW_KNOBS})
        view = replace(config.view, **{k: v for k, v in knobs.items() if k in _VIEW_KNOBS})
        cfg = replace(config, scoring=scoring, view=view)
        out.append(SweepPoint(label, scoring, view, run(trace, "webhook", base, cfg, book)))
    return out
