"""Workloads for the evaluation on the real scheduler: a node set and a timed list of
Deployment operations, generated from the real layer data. Pure.

Two kinds (`ScenarioConfig.kind`):
- `steady`: Deployments arrive one after another and grow one replica at a time, each new
  replica created well after the previous one is bound (the webhook has seen every bind);
- `bursts`: Deployments are created or scaled up by 10-30 replicas at once (the ReplicaSet
  controller creates them in slow-start batches, all reviewed before any is bound), some get
  a rolling update to a new version of their image, some are deleted.
Images: 60 % of Deployments run an app image built FROM an official image (the official
base's real layers + a dependency layer + a code layer that changes with each version), the
rest an official image; bases drawn by Zipf popularity, as the simulator's generator does.
Nodes hold 2 popular official images each at the start.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from webhook.core.layers import ImageLayers, Platform
from webhook.sim.workload import AMD64, GiB, MiB, NodeSpec, derived_image

Kind = Literal["steady", "bursts"]
KINDS: tuple[Kind, ...] = ("steady", "bursts")


@dataclass(frozen=True, slots=True)
class Action:
    """One API operation at `at` wall seconds after the run starts."""

    at: float
    op: Literal["create", "scale", "update", "delete"]
    deployment: str
    replicas: int = 0  # create, scale
    image: str = ""  # create, update
    cpu_milli: int = 250  # create
    memory: int = 256 * MiB  # create


@dataclass(frozen=True, slots=True)
class Scenario:
    kind: Kind
    seed: int
    nodes: tuple[NodeSpec, ...]
    actions: tuple[Action, ...]  # by time
    images: tuple[ImageLayers, ...]  # app images (besides the official catalog)

    @property
    def duration(self) -> float:
        return self.actions[-1].at if self.actions else 0.0


@dataclass(frozen=True, slots=True)
class ScenarioConfig:
    kind: Kind = "bursts"
    seed: int = 1
    nodes: int = 30
    zones: int = 3
    warm_images: int = 2
    deployments: int = 12  # created over the run
    app_share: float = 0.6
    zipf_s: float = 1.1
    # steady: replicas per Deployment (1 + geometric, mean) and the gap between two pods
    mean_replicas: float = 5.0
    max_replicas: int = 12
    pod_gap: float = 0.3  # wall seconds between two pod creations (all Deployments)
    # bursts: replicas per scale-up, the gap between two operations
    burst: tuple[int, int] = (10, 30)
    op_gap: float = 2.5  # wall seconds
    scale_ups: int = 4  # scale-ups of an existing Deployment
    updates: int = 3  # rolling updates to a new version
    deletes: int = 2
    node_cpu_milli: int = 8000
    node_memory: int = 32 * GiB
    requests: tuple[tuple[int, int], ...] = field(default=(
        (100, 128 * MiB), (250, 256 * MiB), (250, 512 * MiB), (500, 512 * MiB)))


# The default run (`layer-locality evaluate`): both kinds, 5 repeats each, stock and opted in,
# within 10 minutes on a 2-core machine (each run starts a fresh cluster: about 10 s).
PRESETS: dict[Kind, ScenarioConfig] = {
    "steady": ScenarioConfig(kind="steady", deployments=20, pod_gap=0.15),
    "bursts": ScenarioConfig(kind="bursts", deployments=8, scale_ups=3, updates=2, deletes=1,
                             op_gap=1.2),
}


class _Images:
    """Official bases by Zipf popularity and versioned app images built FROM them."""

    def __init__(self, official: Sequence[ImageLayers], config: ScenarioConfig,
                 rng: random.Random) -> None:
        platform = Platform.parse(AMD64)
        self.bases = [i for i in sorted(official, key=lambda i: i.ref) if i.for_platform(platform)]
        if not self.bases:
            raise ValueError("no linux/amd64 images to build a workload from")
        order = list(range(len(self.bases)))
        rng.shuffle(order)
        self.weights = [0.0] * len(self.bases)
        for rank, i in enumerate(order, start=1):
            self.weights[i] = 1.0 / rank**config.zipf_s
        self.rng = rng
        self.config = config
        self.custom: dict[str, ImageLayers] = {}
        self._apps: dict[str, tuple[ImageLayers, int]] = {}  # name -> base, deps size
        self._versions: dict[str, int] = {}

    def base(self) -> ImageLayers:
        return self.bases[self.rng.choices(range(len(self.bases)), self.weights)[0]]

    def for_new_deployment(self, name: str) -> str:
        if self.rng.random() >= self.config.app_share:
            return self.base().ref
        self._apps[name] = (self.base(), int(self.rng.lognormvariate(math.log(30 * MiB), 0.8)))
        return self.new_version(name)

    def new_version(self, name: str) -> str:
        """The app's next version (a new code layer); an official image's Deployment moves
        to another official image."""
        if name not in self._apps:
            return self.base().ref
        base, deps = self._apps[name]
        version = self._versions[name] = self._versions.get(name, 0) + 1
        ref = f"registry.example.com/team/{name}:v{version}"
        code = int(self.rng.lognormvariate(math.log(5 * MiB), 1.0))
        self.custom[ref] = derived_image(ref, base, [(f"{name} deps", deps),
                                                     (f"{name} code v{version}", code)])
        return ref


def generate(config: ScenarioConfig, official: Sequence[ImageLayers]) -> Scenario:
    rng = random.Random(f"{config.kind}/{config.seed}")
    images = _Images(official, config, rng)
    zones = [f"zone-{chr(ord('a') + z)}" for z in range(config.zones)]
    nodes = tuple(
        NodeSpec(name=f"node-{n:03d}", zone=zones[n % len(zones)],
                 cpu_milli=config.node_cpu_milli, memory=config.node_memory,
                 images=tuple(sorted({images.base().ref for _ in range(config.warm_images)})))
        for n in range(config.nodes))
    actions = _steady(config, images, rng) if config.kind == "steady" \
        else _bursts(config, images, rng)
    return Scenario(config.kind, config.seed, nodes, tuple(actions),
                    tuple(images.custom.values()))


def _steady(config: ScenarioConfig, images: _Images, rng: random.Random) -> list[Action]:
    """Deployments interleaved; every pod its own operation, `pod_gap` apart."""
    p = 1 / config.mean_replicas
    wanted = {f"steady-{d:02d}": min(config.max_replicas,
                                     1 + int(math.log(1 - rng.random()) / math.log(1 - p)))
              for d in range(config.deployments)}
    have: dict[str, int] = {}
    actions: list[Action] = []
    active: list[str] = []
    queue = list(wanted)
    t = 0.0
    while queue or active:
        # A new Deployment joins while fewer than 3 grow at once, or at random.
        if queue and (len(active) < 3 or rng.random() < 0.2):
            name = queue.pop(0)
            cpu, memory = rng.choice(config.requests)
            actions.append(Action(t, "create", name, 1, images.for_new_deployment(name),
                                  cpu, memory))
            have[name] = 1
            if wanted[name] > 1:
                active.append(name)
        else:
            name = rng.choice(active)
            have[name] += 1
            actions.append(Action(t, "scale", name, have[name]))
            if have[name] >= wanted[name]:
                active.remove(name)
        t = round(t + config.pod_gap, 3)
    return actions


def _bursts(config: ScenarioConfig, images: _Images, rng: random.Random) -> list[Action]:
    """Creations of 10-30 replicas, scale-ups by as many, rolling updates, deletions."""
    low, high = config.burst
    ops = (["create"] * config.deployments + ["scale"] * config.scale_ups
           + ["update"] * config.updates + ["delete"] * config.deletes)
    first, rest = ops[:2], ops[2:]  # start with two creations: the others need a Deployment
    rng.shuffle(rest)
    created: list[str] = []
    live: dict[str, int] = {}
    actions: list[Action] = []
    t = 0.0
    for op in [*first, *rest]:
        if op != "create" and not live:
            op = "create"
        if op == "create":
            name = f"burst-{len(created):02d}"
            created.append(name)
            cpu, memory = rng.choice(config.requests)
            live[name] = rng.randint(low, high)
            actions.append(Action(t, "create", name, live[name],
                                  images.for_new_deployment(name), cpu, memory))
        elif op == "scale":
            name = rng.choice(sorted(live))
            live[name] += rng.randint(low, high)
            actions.append(Action(t, "scale", name, live[name]))
        elif op == "update":
            name = rng.choice(sorted(live))
            actions.append(Action(t, "update", name, image=images.new_version(name)))
        else:
            name = rng.choice(sorted(live))
            del live[name]
            actions.append(Action(t, "delete", name))
        t = round(t + config.op_gap, 3)
    return actions
