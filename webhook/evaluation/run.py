"""One evaluation run: a fresh local cluster (webhook/devcluster), the kubelet stand-in on its
fake nodes, a scenario's Deployment operations replayed on time in one namespace (opted in or
not), until every pod runs; what happened is recorded (`RunRecord`), then everything stops.

Both modes run the same cluster, the same webhook process and the same scenario; only the
namespace's opt-in label differs, so the stock run pays the same API load."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from webhook.core.layers import Platform
from webhook.devcluster.cluster import LocalCluster, up
from webhook.devcluster.processes import ClusterError, free_port
from webhook.evaluation.balancer import Balancer, Split
from webhook.evaluation.kubelet import KubeletStandIn, PodStart, controller_of
from webhook.evaluation.pulls import PullModel, PullSettings
from webhook.evaluation.scenario import Action, Scenario
from webhook.inventory.podstate import uid_key
from webhook.inventory.reflector import DELETED, Reflector
from webhook.inventory.reflector_terms import ReflectorSettings
from webhook.registry.catalog import StaticCatalog, catalog_document
from webhook.sim.workload import parse_bytes, parse_cpu
from webhook.sim.world import ImageBook

log = logging.getLogger(__name__)
Mode = Literal["stock", "webhook"]
NAMESPACE = "evaluation"
OPT_IN = {"layer-locality.io/enabled": "true"}
DECISION = "layer-locality.io/decision"


@dataclass(slots=True)
class PodSeen:
    """A pod of the namespace as the API server showed it; times nominal."""

    uid: str
    name: str
    owner: str | None
    created: float
    cpu_milli: int
    memory: int
    images: tuple[str, ...]
    decision: dict[str, Any] | None = None
    gone: float | None = None
    node: str = ""  # where it was bound, when first seen bound
    bound: float | None = None
    running: float | None = None  # when first seen Running


@dataclass(slots=True)
class RunRecord:
    mode: Mode
    scenario: str
    seed: int
    repeat: int
    clock_scale: float
    pods: dict[str, PodSeen] = field(default_factory=dict)
    starts: list[PodStart] = field(default_factory=list)
    ends: dict[str, float] = field(default_factory=dict)
    unscheduled: int = 0
    wall_seconds: float = 0.0
    write_errors: int = 0
    settled: bool = True
    split: str = ""  # how the balancer split the reviews ("": one replica, no balancer)
    webhook_connections: list[int] = field(default_factory=list)  # per replica (balancer)
    webhook_reviews: list[int] = field(default_factory=list)  # per replica (balancer)
    reviews_per_connection: list[int] = field(default_factory=list)  # API-server connections


def node_items(scenario: Scenario, model: PullModel) -> list[dict[str, Any]]:
    """NodeList items for devcluster.nodes, preloaded images in their status."""
    items = []
    for spec in scenario.nodes:
        labels = {"topology.kubernetes.io/zone": spec.zone, **spec.labels}
        items.append({
            "metadata": {"name": spec.name, "labels": labels},
            "status": {"capacity": {"cpu": f"{spec.cpu_milli}m", "memory": str(spec.memory),
                                    "pods": str(spec.max_pods)},
                       "images": model.status_images(spec.name, 0.0)},
        })
    return items


def deployment(action: Action) -> dict[str, Any]:
    labels = {"app": action.deployment}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": action.deployment, "labels": labels},
        "spec": {
            "replicas": action.replicas, "revisionHistoryLimit": 2,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {
                # Real nodes: a deleted pod goes at once, as the stand-in ends one anyway.
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "app", "image": action.image,
                                "resources": {"requests": {
                                    "cpu": f"{action.cpu_milli}m",
                                    "memory": str(action.memory)}}}]}},
        },
    }


class _Observer:
    """Every pod of the namespace: when it appeared, its owner, requests, decision."""

    def __init__(self, core: Any, clock: Any, record: RunRecord) -> None:
        self._core = core
        self._clock = clock
        self._record = record

    def reflector(self) -> Reflector:
        return Reflector("pods (evaluation)",
                         lambda **kw: self._core.list_namespaced_pod(NAMESPACE, **kw),
                         uid_key, self._event, settings=ReflectorSettings(backoff_max=2.0))

    def _event(self, kind: str, uid: str, obj: Mapping[str, Any] | None) -> None:
        pods = self._record.pods
        now = self._clock()
        if kind == DELETED or obj is None:
            if uid in pods and pods[uid].gone is None:
                pods[uid].gone = now
            return
        metadata = obj.get("metadata") or {}
        seen = pods.get(uid)
        if seen is None:
            spec = obj.get("spec") or {}
            containers = spec.get("containers") or []
            requests = [(c.get("resources") or {}).get("requests") or {} for c in containers]
            cpu = sum(parse_cpu(r.get("cpu", "0")) for r in requests)
            memory = sum(parse_bytes(r.get("memory", "0")) for r in requests)
            raw = (metadata.get("annotations") or {}).get(DECISION)
            seen = pods[uid] = PodSeen(uid, str(metadata.get("name")), controller_of(metadata),
                                       now, cpu, memory,
                                       tuple(str(c.get("image")) for c in containers),
                                       _decision(raw))
        if metadata.get("deletionTimestamp") and seen.gone is None:
            seen.gone = now
        node = (obj.get("spec") or {}).get("nodeName")
        if node and seen.bound is None:
            seen.node, seen.bound = str(node), now
        if (obj.get("status") or {}).get("phase") == "Running" and seen.running is None:
            seen.running = now


def _decision(raw: object) -> dict[str, Any] | None:
    if not isinstance(raw, str):
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


@dataclass(frozen=True, slots=True)
class RunSettings:
    pulls: PullSettings = field(default_factory=PullSettings)
    webhook_args: tuple[str, ...] = ()
    webhook_replicas: int = 2  # as the manifests ship; >1: behind a balancer (a Service)
    split: Split = "connection"  # how the balancer splits the reviews (evaluation.balancer)
    keep: bool = False  # keep the run's directory (logs, etcd data; about 70 MB)
    settle_timeout: float = 120.0  # wall seconds after the last operation
    work_dir: Path | None = None  # default: a temporary directory
    # Called (in a thread) with the webhook processes' base URLs and the CA file that verifies
    # them, before the scenario starts: a scraper (Prometheus) can watch the run's metrics.
    on_webhooks: Callable[[Sequence[str], Path], None] | None = None
    linger_seconds: float = 0.0  # the webhooks stay up this long after the run settles


async def run_once(bin_dir: Path, scenario: Scenario, catalog: StaticCatalog, mode: Mode,
                   repeat: int, settings: RunSettings = RunSettings()) -> RunRecord:
    """A fresh cluster for one run of `scenario` in `mode`; stopped before returning."""
    started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix=f"eval-{mode}-", dir=settings.work_dir))
    full = StaticCatalog(catalog.images())
    for image in scenario.images:
        full.add(image)
    model = PullModel(ImageBook(full), settings.pulls)
    for spec in scenario.nodes:
        model.add_node(spec.name, Platform.parse(spec.platform), spec.images)
    # Live mode without --demo serves only the --catalog it is given: the official images
    # and the scenario's app images, all of them (the cluster reaches no registry).
    extra = work / "catalog.json"
    extra.write_text(json.dumps(catalog_document(full.images())))
    replicas = settings.webhook_replicas
    cluster = await asyncio.to_thread(
        up, work / "cluster", bin_dir, node_items(scenario, model), catalog=extra,
        webhook_args=list(settings.webhook_args), start_webhook=replicas <= 1)
    record = RunRecord(mode, scenario.kind, scenario.seed, repeat, settings.pulls.clock_scale)
    try:
        async with serving_webhooks(cluster, settings, record):
            await _drive(cluster, scenario, model, mode, settings, record)
            await asyncio.sleep(settings.linger_seconds)
    finally:
        await asyncio.to_thread(cluster.down)
        if not settings.keep:
            shutil.rmtree(work, ignore_errors=True)
    record.wall_seconds = time.perf_counter() - started
    return record


@contextlib.asynccontextmanager
async def serving_webhooks(cluster: LocalCluster, settings: RunSettings,
                           record: RunRecord) -> AsyncIterator[None]:
    """The webhook as `settings` asks: one process (started with the cluster), or replicas
    behind a balancer on the webhook's port; the balancer's counts land in `record`."""
    balancer = None
    ports = [cluster.webhook_port]
    try:
        replicas = settings.webhook_replicas
        if replicas > 1:
            ports = [free_port() for _ in range(replicas)]
            # Each replica told how many serve, as the manifests' config does.
            told = () if "--replicas" in settings.webhook_args else ("--replicas", str(replicas))
            for i, port in enumerate(ports, start=1):
                await asyncio.to_thread(cluster.start_webhook_replica, i, port, told)
            certs = cluster.webhook_certs
            balancer = Balancer(ports, certs.ca_cert, certs.cert, certs.key, settings.split)
            await balancer.start(cluster.webhook_port)
        if settings.on_webhooks is not None:
            urls = [f"https://127.0.0.1:{port}" for port in ports]
            await asyncio.to_thread(settings.on_webhooks, urls, cluster.webhook_certs.ca_cert)
        yield
    finally:
        if balancer is not None:
            await balancer.close()
            record.split = balancer.counts.split
            record.webhook_connections = list(balancer.counts.connections)
            record.webhook_reviews = list(balancer.counts.reviews)
            record.reviews_per_connection = list(balancer.counts.per_connection)


async def _drive(cluster: LocalCluster, scenario: Scenario, model: PullModel, mode: Mode,
                 settings: RunSettings, record: RunRecord) -> None:
    from kubernetes import client

    api = cluster.api_client()
    core: Any = client.CoreV1Api(api)
    apps: Any = client.AppsV1Api(api)
    kubelet = KubeletStandIn(core, model, [n.name for n in scenario.nodes])
    observer = _Observer(core, kubelet.now, record)
    tasks = [asyncio.create_task(kubelet.run()), asyncio.create_task(observer.reflector().run())]
    try:
        labels = OPT_IN if mode == "webhook" else {}
        await asyncio.to_thread(core.create_namespace,
                                {"metadata": {"name": NAMESPACE, "labels": labels}})
        await _replay(apps, scenario.actions)
        record.settled = await settle(apps, core, lambda: kubelet.idle,
                                      settings.settle_timeout)
        await kubelet.flush()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        api.close()
    record.starts = list(kubelet.starts)
    record.ends = dict(kubelet.ends)
    record.write_errors = kubelet.errors
    bound = {s.uid for s in record.starts}
    record.unscheduled = sum(1 for p in record.pods.values()
                             if p.gone is None and p.uid not in bound)


async def _replay(apps: Any, actions: Sequence[Action]) -> None:
    t0 = time.monotonic()
    for action in actions:
        delay = t0 + action.at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await asyncio.to_thread(_apply, apps, action)


def _apply(apps: Any, action: Action) -> None:
    name = action.deployment
    if action.op == "create":
        apps.create_namespaced_deployment(NAMESPACE, deployment(action),
                                          _preload_content=False)
    elif action.op == "scale":
        apps.patch_namespaced_deployment_scale(name, NAMESPACE,
                                               {"spec": {"replicas": action.replicas}},
                                               _preload_content=False)
    elif action.op == "update":
        apps.patch_namespaced_deployment(
            name, NAMESPACE, {"spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": action.image}]}}}}, _preload_content=False)
    else:
        apps.delete_namespaced_deployment(name, NAMESPACE, propagation_policy="Foreground",
                                          _preload_content=False)


async def settle(apps: Any, core: Any, idle: Callable[[], bool], seconds: float) -> bool:
    """Every Deployment rolled out with all replicas available, no pod left terminating,
    every pull over and reported; False after `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if idle() and await asyncio.to_thread(_rolled_out, apps, core):
            return True
        await asyncio.sleep(0.5)
    log.warning("evaluation: not settled after %.0f s", seconds)
    return False


def _rolled_out(apps: Any, core: Any) -> bool:
    deployments = apps.list_namespaced_deployment(NAMESPACE).items
    for d in deployments:
        s = d.status
        want = d.spec.replicas or 0
        if (s.observed_generation or 0) < (d.metadata.generation or 0) \
                or (s.updated_replicas or 0) != want or (s.available_replicas or 0) != want \
                or (s.replicas or 0) != want:
            return False
    pods = core.list_namespaced_pod(NAMESPACE).items
    want = sum(d.spec.replicas or 0 for d in deployments)
    return len(pods) == want and all(p.status.phase == "Running" for p in pods)


def check_binaries(bin_dir: Path) -> None:
    missing = [b for b in ("etcd", "kube-apiserver", "kube-scheduler",
                           "kube-controller-manager", "kubectl") if not (bin_dir / b).exists()]
    if missing:
        raise ClusterError(f"{bin_dir} lacks {', '.join(missing)}: run make kube")
