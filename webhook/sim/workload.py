"""Workloads for the simulator: the trace format, a loader, and a seeded generator.

Trace JSON (`layer-locality simulate --trace FILE`; `--write-trace FILE` writes the generated one):

    {"version": 1,
     "images": [ ...catalog entries, the `--catalog` format (webhook/registry/catalog.py) ],
     "nodes": [{"name": "node-00", "zone": "zone-a", "cpu": "8", "memory": "32Gi",
                "pods": 110, "platform": "linux/amd64", "bandwidth": "40MiB",
                "disk": "60GiB", "labels": {}, "taints": [{"key": "k", "value": "v",
                "effect": "PreferNoSchedule"}], "unschedulable": false,
                "images": ["docker.io/library/debian:bullseye"]}],
     "pods": [{"name": "web-1-0", "workload": "web-1", "kind": "Deployment",
               "arrival": 12.5, "duration": 600, "images": ["docker.io/library/nginx:1.23"],
               "initImages": [], "cpu": "500m", "memory": "512Mi",
               "tolerations": [], "nodeSelector": {}}]}

`images` adds to the embedded catalog (built from ../shared/data/official-images-amd64.json):
custom images (an app built FROM an official image) go there. Node `images` are preloaded (held
and reported at time 0). Times are seconds. `kind` is `Deployment` (pods get a ReplicaSet owner,
so the scheduler's default topology spreading applies, as for real Deployments), `Job` or `Pod`
(no default spreading: no Service/ReplicaSet/StatefulSet selects them). Every field but `name`,
`arrival`, `images` (pods) and `name` (nodes) has the default shown by `NodeSpec`/`PodSpec`.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.core.layers import ImageLayers, Layer, Platform, PlatformLayers
from webhook.registry.catalog import catalog_document, parse_catalog

MiB = 1 << 20
GiB = 1 << 30
AMD64 = "linux/amd64"
TRACE_VERSION = 1


@dataclass(frozen=True, slots=True)
class TaintSpec:
    key: str
    value: str
    effect: str  # NoSchedule | NoExecute | PreferNoSchedule


@dataclass(frozen=True, slots=True)
class NodeSpec:
    name: str
    zone: str = "zone-a"
    cpu_milli: int = 8000
    memory: int = 32 * GiB
    max_pods: int = 110
    platform: str = AMD64
    bandwidth: float = 40 * MiB  # bytes/s from the registry
    disk: int = 60 * GiB  # image filesystem (compressed bytes, see world.py)
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[TaintSpec, ...] = ()
    unschedulable: bool = False
    images: tuple[str, ...] = ()  # preloaded


@dataclass(frozen=True, slots=True)
class PodSpec:
    name: str
    workload: str
    arrival: float
    images: tuple[str, ...]
    kind: str = "Deployment"
    duration: float = 600.0
    init_images: tuple[str, ...] = ()
    cpu_milli: int = 500
    memory: int = 512 * MiB
    tolerations: tuple[Mapping[str, Any], ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    replica: int | None = None  # the webhook replica that reviewed it (observed traces)


@dataclass(frozen=True, slots=True)
class Trace:
    nodes: tuple[NodeSpec, ...]
    pods: tuple[PodSpec, ...]  # sorted by arrival
    images: tuple[ImageLayers, ...] = ()  # custom images besides the embedded catalog


class TraceError(ValueError):
    """The trace file is not in the documented format."""


# -- quantities ------------------------------------------------------------------------------

_QTY = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*$")
_BIN = {"": 1, "k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4,
        "ki": 1 << 10, "mi": 1 << 20, "gi": 1 << 30, "ti": 1 << 40,
        "kb": 1000, "mb": 1000**2, "gb": 1000**3,
        "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40, "b": 1}


def parse_cpu(value: object) -> int:
    """Kubernetes CPU quantity -> millicores (`500m`, `2`, `0.5`)."""
    text = str(value).strip()
    if text.endswith("m"):
        return int(float(text[:-1]))
    return round(float(text) * 1000)


def parse_bytes(value: object) -> int:
    """Kubernetes memory quantity or size (`512Mi`, `1Gi`, `40MiB`, `1000`) -> bytes."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return int(value)
    match = _QTY.match(str(value))
    if not match or match.group(2).lower() not in _BIN:
        raise TraceError(f"not a quantity: {value!r}")
    return int(float(match.group(1)) * _BIN[match.group(2).lower()])


# -- trace file ------------------------------------------------------------------------------


def load_trace(raw: object) -> Trace:
    """Validate a decoded trace document."""
    if not isinstance(raw, Mapping):
        raise TraceError("trace: expected an object")
    try:
        images = tuple(parse_catalog({"images": raw.get("images", [])}, source="trace"))
        nodes = tuple(_node(n) for n in _list(raw.get("nodes"), "nodes"))
        pods = tuple(sorted((_pod(p) for p in _list(raw.get("pods"), "pods")),
                            key=lambda p: p.arrival))
    except (KeyError, TypeError, ValueError) as exc:
        raise TraceError(f"trace: {exc}") from exc
    if not nodes:
        raise TraceError("trace: no nodes")
    if len({n.name for n in nodes}) != len(nodes) or len({p.name for p in pods}) != len(pods):
        raise TraceError("trace: duplicate node or pod names")
    return Trace(nodes=nodes, pods=pods, images=images)


def _list(value: object, name: str) -> list[Any]:
    if not isinstance(value, list):
        raise TraceError(f"trace: '{name}' must be a list")
    return value


def _node(doc: Mapping[str, Any]) -> NodeSpec:
    return NodeSpec(
        name=str(doc["name"]),
        zone=str(doc.get("zone", "zone-a")),
        cpu_milli=parse_cpu(doc.get("cpu", "8")),
        memory=parse_bytes(doc.get("memory", "32Gi")),
        max_pods=int(doc.get("pods", 110)),
        platform=str(Platform.parse(str(doc.get("platform", AMD64)))),
        bandwidth=float(parse_bytes(doc.get("bandwidth", "40MiB"))),
        disk=parse_bytes(doc.get("disk", "60GiB")),
        labels={str(k): str(v) for k, v in dict(doc.get("labels") or {}).items()},
        taints=tuple(TaintSpec(str(t.get("key", "")), str(t.get("value") or ""),
                               str(t["effect"])) for t in doc.get("taints") or []),
        unschedulable=bool(doc.get("unschedulable", False)),
        images=tuple(str(i) for i in doc.get("images") or []),
    )


def _pod(doc: Mapping[str, Any]) -> PodSpec:
    images = tuple(str(i) for i in doc["images"])
    if not images:
        raise TraceError(f"pod {doc.get('name')!r} without images")
    return PodSpec(
        name=str(doc["name"]),
        workload=str(doc.get("workload", doc["name"])),
        kind=str(doc.get("kind", "Deployment")),
        arrival=float(doc["arrival"]),
        duration=float(doc.get("duration", 600.0)),
        images=images,
        init_images=tuple(str(i) for i in doc.get("initImages") or []),
        cpu_milli=parse_cpu(doc.get("cpu", "500m")),
        memory=parse_bytes(doc.get("memory", "512Mi")),
        tolerations=tuple(dict(t) for t in doc.get("tolerations") or []),
        node_selector={str(k): str(v) for k, v in dict(doc.get("nodeSelector") or {}).items()},
        replica=None if doc.get("replica") is None else int(doc["replica"]),
    )


def trace_document(trace: Trace) -> dict[str, Any]:
    """The wire form of `trace` (round-trips through `load_trace`)."""
    return {
        "version": TRACE_VERSION,
        "images": catalog_document(trace.images)["images"],
        "nodes": [
            {"name": n.name, "zone": n.zone, "cpu": f"{n.cpu_milli}m", "memory": n.memory,
             "pods": n.max_pods, "platform": n.platform, "bandwidth": int(n.bandwidth),
             "disk": n.disk, "labels": dict(n.labels),
             "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in n.taints],
             "unschedulable": n.unschedulable, "images": list(n.images)}
            for n in trace.nodes
        ],
        "pods": [
            {"name": p.name, "workload": p.workload, "kind": p.kind, "arrival": p.arrival,
             "duration": p.duration, "images": list(p.images), "initImages": list(p.init_images),
             "cpu": f"{p.cpu_milli}m", "memory": p.memory, "tolerations": list(p.tolerations),
             "nodeSelector": dict(p.node_selector),
             **({} if p.replica is None else {"replica": p.replica})}
            for p in trace.pods
        ],
    }


# -- generator -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """The default generated workload (the documented run in docs/evaluation.md)."""

    seed: int = 1
    nodes: int = 40
    zones: int = 3
    node_cpu_milli: int = 8000
    node_memory: int = 32 * GiB
    bandwidth: float = 20 * MiB  # per node, bytes/s
    disk: int = 60 * GiB
    hours: float = 6.0  # arrivals happen within this window
    workloads_per_hour: float = 150.0  # Poisson arrivals of Deployments and Jobs
    deployment_share: float = 0.6  # the rest are single-pod Jobs
    mean_replicas: float = 3.0  # Deployments: 1 + geometric
    max_replicas: int = 12
    deployment_minutes: float = 90.0  # mean pod lifetime (lognormal, sigma 1)
    job_minutes: float = 4.0
    zipf_s: float = 1.1  # popularity of official images (random rank order)
    app_share: float = 0.6  # workloads running an app image built FROM an official image
    apps: int = 60  # distinct apps; each version changes only its top (code) layer
    new_version_share: float = 0.3  # a redeployed app gets a new code layer
    warm_images: int = 2  # images preloaded per node, drawn by popularity


def generate(config: WorkloadConfig, official: Sequence[ImageLayers]) -> Trace:
    """A seeded workload over `official` images (the real catalog)."""
    rng = random.Random(config.seed)
    platform = Platform.parse(AMD64)
    bases = [i for i in sorted(official, key=lambda i: i.ref) if i.for_platform(platform)]
    if not bases:
        raise TraceError("no linux/amd64 images to build a workload from")
    order = list(range(len(bases)))
    rng.shuffle(order)
    base_weights = [0.0] * len(bases)
    for rank, i in enumerate(order, start=1):
        base_weights[i] = 1.0 / rank**config.zipf_s

    zones = [f"zone-{chr(ord('a') + z)}" for z in range(config.zones)]
    nodes = []
    for n in range(config.nodes):
        warm = {bases[i].ref for i in rng.choices(range(len(bases)), base_weights,
                                                  k=config.warm_images)}
        nodes.append(NodeSpec(
            name=f"node-{n:03d}", zone=zones[n % len(zones)], cpu_milli=config.node_cpu_milli,
            memory=config.node_memory, bandwidth=config.bandwidth, disk=config.disk,
            images=tuple(sorted(warm)),
        ))

    # Apps: an official base + a dependency layer (stable) + a code layer (per version).
    apps: list[tuple[str, ImageLayers, int]] = []  # (name, base, deps size)
    for a in range(config.apps):
        base = bases[rng.choices(range(len(bases)), base_weights)[0]]
        apps.append((f"app-{a:02d}", base, int(rng.lognormvariate(math.log(30 * MiB), 0.8))))
    app_weights = [1.0 / r**config.zipf_s for r in range(1, len(apps) + 1)]
    versions = [0] * len(apps)
    custom: dict[str, ImageLayers] = {}

    def app_image(a: int) -> str:
        name, base, deps = apps[a]
        if versions[a] == 0 or rng.random() < config.new_version_share:
            versions[a] += 1
        ref = f"registry.example.com/team/{name}:v{versions[a]}"
        if ref not in custom:
            code = int(rng.lognormvariate(math.log(5 * MiB), 1.0))
            custom[ref] = derived_image(ref, base, [(f"{name} deps", deps),
                                                    (f"{name} code v{versions[a]}", code)])
        return ref

    pods: list[PodSpec] = []
    t = 0.0
    w = 0
    horizon = config.hours * 3600
    rate = config.workloads_per_hour / 3600
    while True:
        t += rng.expovariate(rate)
        if t >= horizon:
            break
        w += 1
        if rng.random() < config.app_share:
            image = app_image(rng.choices(range(len(apps)), app_weights)[0])
        else:
            image = bases[rng.choices(range(len(bases)), base_weights)[0]].ref
        cpu = rng.choice((100, 250, 250, 500, 500, 1000, 2000))
        memory = rng.choice((128, 256, 512, 512, 1024, 2048)) * MiB
        deployment = rng.random() < config.deployment_share
        if deployment:
            p = 1 / config.mean_replicas
            replicas = min(config.max_replicas, 1 + int(math.log(1 - rng.random()) / math.log(1 - p)
                                                         if p < 1 else 0))
            mean, kind, name = config.deployment_minutes, "Deployment", f"deploy-{w:04d}"
        else:
            replicas, mean, kind, name = 1, config.job_minutes, "Job", f"job-{w:04d}"
        mu = math.log(mean * 60) - 0.5  # lognormal with sigma 1 and the given mean
        for r in range(replicas):
            pods.append(PodSpec(
                name=f"{name}-{r}", workload=name, kind=kind, arrival=round(t + r * 0.01, 3),
                images=(image,), duration=round(rng.lognormvariate(mu, 1.0), 1),
                cpu_milli=cpu, memory=memory,
            ))
    pods.sort(key=lambda p: p.arrival)
    return Trace(nodes=tuple(nodes), pods=tuple(pods), images=tuple(custom.values()))


def derived_image(ref: str, base: ImageLayers, layers: Sequence[tuple[str, int]],
                  platform: str = AMD64) -> ImageLayers:
    """An image built FROM `base` adding layers (label, size): digests derive from labels."""
    p = Platform.parse(platform)
    manifest = base.for_platform(p)
    assert manifest is not None
    added = tuple(Layer(_digest(label), size) for label, size in layers)
    return ImageLayers(ref=ref, digest=_digest(f"index {ref}"), platforms={
        p: PlatformLayers(digest=_digest(f"manifest {ref}"), layers=manifest.layers + added)})


def renamed(image: ImageLayers, ref: str) -> ImageLayers:
    """`image` under another name, its index and manifest digests derived from the new name
    as the generator derives them: two generated images that share a name (two seeds' apps)
    no longer share a digest once renamed apart."""
    return ImageLayers(ref=ref, digest=_digest(f"index {ref}"), platforms={
        p: PlatformLayers(digest=_digest(f"manifest {ref}"), layers=manifest.layers)
        for p, manifest in image.platforms.items()})


def _digest(label: str) -> str:
    return "sha256:" + hashlib.sha256(label.encode()).hexdigest()
