"""One evaluation run on REAL nodes: kubelets and containerd v2 on this machine
(webhook/devcluster/realnodes), pulling the scenario's images (realimages.py) from the
cluster's registry through a per-node throttle, so a pull takes real seconds that depend on
bytes. What the run records is read from the real things: bytes from the registry's own log
(blob GETs per node), pull times from the kubelets' `Pulled` events, binds and Running from
the pods as the API server shows them.

Two processes. `run_real_once` (the evaluation, on the host) makes the cluster's network and
mount namespace (a holder process), then runs this module's `child_main` inside it (nsenter),
which starts the cluster, pushes the images, warms the nodes with the scenario's initial
images, replays the scenario and writes the run's record as JSON; the parent reads it and
takes down whatever the child left. Real nodes need the whole process in the namespace (the
cluster's /run and the kubelets' mounts), which the evaluation's own process is not."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.devcluster.processes import ClusterError, Process, start_ticks, stop
from webhook.evaluation.kubelet import PodStart
from webhook.evaluation.pulls import ImagePull
from webhook.evaluation.realimages import BuiltImage, from_document
from webhook.evaluation.run import (
    NAMESPACE,
    OPT_IN,
    Mode,
    PodSeen,
    RunRecord,
    RunSettings,
    _Observer,
    _replay,
    serving_webhooks,
    settle,
)
from webhook.evaluation.scenario import Action, Scenario, ScenarioConfig
from webhook.telemetry.pulls import PRESENT, parse_message, pulled_event

log = logging.getLogger(__name__)
WARM_NAMESPACE = "warm"
STATUS_TIMEOUT = 120.0  # the kubelet lists images every 30 s and reports them every 10 s
READY_TIMEOUT = 300.0
# Before the holdout report is read: the replicas' watches see the last Running and Pulled.
REPORT_LINGER = 5.0


@dataclass(frozen=True, slots=True)
class RealSettings:
    """What a run on real nodes adds to RunSettings."""

    nodes: int = 4
    bandwidth: float = 32 * (1 << 20)  # bytes per wall second, per node, at the registry
    scale: float = 1.0  # layer sizes built = the data set's x scale
    request_scale: float = 0.125  # pods' CPU and memory requests x this (see realize)


@dataclass(slots=True)
class RealExtras:
    """Per run, what only real nodes tell: read from the registry and the kubelets."""

    registry_bytes: dict[str, int] = field(default_factory=dict)  # node -> blob bytes
    registry_blobs: dict[str, int] = field(default_factory=dict)  # node -> blob GETs
    running: dict[str, float] = field(default_factory=dict)  # pod uid -> bind -> Running, s
    warm_seconds: float = 0.0
    push_seconds: float = 0.0
    cpu_busy: float = 0.0  # the machine's CPU busy share, cluster start to teardown (0..1)


# ---- the scenario on real nodes ---------------------------------------------------------------

def realize(scenario: Scenario, built: Mapping[str, BuiltImage], host: str,
            catalog_images: Sequence[Any], cpu_milli: int, memory: int,
            request_scale: float) -> Scenario:
    """The scenario as real nodes run it: nodes named as the cluster names them (node-1...),
    with this machine's capacity; every image by its reference in the cluster's registry; the
    pods' requests scaled (a 2-core node holds what an 8-core one would at 1/8 of the requests,
    close to the 30-node scenario's fill); the images the webhook knows (`catalog_images`)."""
    def ref(source: str) -> str:
        return built[source].ref(host) if source else source

    from webhook.devcluster.realnodes.bringup import ZONES, node_names

    names = node_names(len(scenario.nodes))
    nodes = tuple(dataclasses.replace(
        spec, name=names[i], zone=ZONES[i % len(ZONES)], cpu_milli=cpu_milli,
        memory=memory, images=tuple(ref(r) for r in spec.images))
        for i, spec in enumerate(scenario.nodes))
    actions = tuple(dataclasses.replace(
        a, image=ref(a.image), cpu_milli=max(1, round(a.cpu_milli * request_scale)),
        memory=max(1 << 20, round(a.memory * request_scale))) for a in scenario.actions)
    return Scenario(scenario.kind, scenario.seed, nodes, actions, tuple(catalog_images))


def images_used(scenario: Scenario) -> set[str]:
    """Every image reference the scenario names (its nodes' initial images included)."""
    return {r for n in scenario.nodes for r in n.images} | \
        {a.image for a in scenario.actions if a.image}


def scenario_document(scenario: Scenario) -> dict[str, Any]:
    """The scenario as JSON, for the run inside the namespace (nodes without taints)."""
    from webhook.registry.catalog import catalog_document

    if any(n.taints for n in scenario.nodes):
        raise ValueError("real-node scenarios have no taints")
    return {"kind": scenario.kind, "seed": scenario.seed,
            "nodes": [{**dataclasses.asdict(n), "labels": dict(n.labels)}
                      for n in scenario.nodes],
            "actions": [dataclasses.asdict(a) for a in scenario.actions],
            "images": catalog_document(scenario.images)["images"]}


def scenario_from(doc: Mapping[str, Any]) -> Scenario:
    from webhook.registry.catalog import parse_catalog
    from webhook.sim.workload import NodeSpec

    nodes = tuple(NodeSpec(**{**n, "taints": (), "images": tuple(n["images"])})
                  for n in doc["nodes"])
    return Scenario(doc["kind"], int(doc["seed"]), nodes,
                    tuple(Action(**a) for a in doc["actions"]),
                    tuple(parse_catalog({"images": doc["images"]})))


# ---- the record as JSON (child -> parent) -----------------------------------------------------

def record_document(record: RunRecord, extras: RealExtras) -> dict[str, Any]:
    return {"record": dataclasses.asdict(record), "extras": dataclasses.asdict(extras)}


def record_from(doc: Mapping[str, Any]) -> tuple[RunRecord, RealExtras]:
    raw = dict(doc["record"])
    pods = {uid: PodSeen(**{**p, "images": tuple(p["images"])}) for uid, p in raw["pods"].items()}
    starts = [PodStart(**{**s, "pulls": tuple(ImagePull(**p) for p in s["pulls"])})
              for s in raw["starts"]]
    record = RunRecord(**{**raw, "pods": pods, "starts": starts})
    return record, RealExtras(**doc["extras"])


# ---- what happened, from the kubelets' events and the registry's log --------------------------

@dataclass(slots=True)
class PodTimes:
    node: str = ""
    bound: float | None = None
    running: float | None = None


def attribute_bytes(pods: Sequence[tuple[str, str, float, set[str]]],
                    fetched: Mapping[str, Sequence[tuple[str, int]]]) -> dict[str, int]:
    """Registry bytes per pod: pods (uid, node, bound, the blobs its images need) in bind
    order; a node's fetch of a blob counts for the first pod bound there that needs it (its
    later pods found it there, or waited on the same download). Pure."""
    left: dict[str, dict[str, int]] = {}
    for node, blobs in fetched.items():
        sizes = left.setdefault(node, {})
        for digest, size in blobs:
            sizes[digest] = sizes.get(digest, 0) + size
    out: dict[str, int] = {}
    for uid, node, _, needs in sorted(pods, key=lambda p: (p[2], p[0])):
        sizes = left.get(node, {})
        out[uid] = sum(sizes.pop(d, 0) for d in sorted(needs))
    return out


def starts_from(pods: Mapping[str, PodSeen], times: Mapping[str, PodTimes],
                events: Iterable[Mapping[str, Any]], blobs_of: Mapping[str, set[str]],
                fetched: Mapping[str, Sequence[tuple[str, int]]],
                namespace: str = NAMESPACE) -> tuple[list[PodStart], dict[str, float]]:
    """Each bound pod as a PodStart (the measure's input; one deleted before it ran too, as
    the stand-in counts it): its node and bind time, its pulls as its kubelet's `Pulled`
    events say (present, or pulled in N s including waiting), the registry bytes of layers its
    node fetched for it; and bind -> Running per pod that ran."""
    said: dict[str, list[tuple[str, bool, float]]] = defaultdict(list)
    for event in events:
        pulled = pulled_event(event)
        message = parse_message(pulled.message) if pulled is not None else None
        if pulled is not None and message is not None:
            said[pulled.pod_uid].append((message.image, message.result == PRESENT,
                                         message.seconds))
    bound = [(uid, t.node, t.bound, set().union(*(blobs_of.get(i, set())
                                                  for i in pods[uid].images)))
             for uid, t in times.items() if t.bound is not None and uid in pods]
    attributed = attribute_bytes(bound, fetched)
    starts, running = [], {}
    for uid, node, at, _ in sorted(bound, key=lambda p: (p[2], p[0])):
        t, seen = times[uid], pods[uid]
        if at is None:
            continue
        # A pod deleted before it ran still cost its pulls, as the stand-in counts it: it ends
        # when it went (or, never gone, with the run).
        end = t.running if t.running is not None else (seen.gone if seen.gone is not None
                                                          else at)
        pulls = []
        for image in seen.images:
            present, seconds = next(((p, s) for i, p, s in said.get(uid, []) if i == image),
                                    (False, end - at))
            pulls.append(ImagePull(image, present, 0, 0, at, at, at + seconds))
        if pulls and attributed.get(uid):
            pulls[0] = dataclasses.replace(pulls[0], bytes=attributed[uid])
        waited = max((p.end for p in pulls), default=at)
        starts.append(PodStart(namespace, seen.name, uid, node, seen.owner, at, waited,
                               tuple(pulls)))
        if t.running is not None:
            running[uid] = t.running - at
    return starts, running


# ---- the parent: a namespace, the child in it, everything down after ---------------------------

def run_real_once(kube_bin: Path, node_bin: Path, scenario: Scenario, images: Path,
                  blobs: Path, catalog: Path, mode: Mode, repeat: int, settings: RunSettings,
                  real: RealSettings, work: Path,
                  report_dir: Path | None = None) -> tuple[RunRecord, RealExtras]:
    """A fresh cluster of real nodes for one run of `scenario` (as `realize` made it: real
    node names, registry references); everything it started is stopped, and the namespaces
    gone, before this returns (or raises ClusterError). `images` is realimages' document of
    the built images, `blobs` their blobs, `catalog` what the webhook serves; with
    `report_dir`, an opted-in run leaves there `layer-locality report` on each replica."""
    from webhook.devcluster.install import repo_root
    from webhook.devcluster.realnodes.namespaces import enter, start_holder

    if os.geteuid() != 0:
        raise ClusterError("real nodes need root (network namespaces, mounts, cgroups)")
    root = work / "cluster"
    root.mkdir(parents=True, exist_ok=True)
    spec = work / "spec.json"
    out = work / "record.json"
    spec.write_text(json.dumps({
        "root": str(root), "kube_bin": str(kube_bin), "node_bin": str(node_bin),
        "scenario": scenario_document(scenario), "images": str(images), "blobs": str(blobs),
        "catalog": str(catalog), "mode": mode, "repeat": repeat, "record": str(out),
        "settings": {"webhook_args": list(settings.webhook_args),
                     "webhook_replicas": settings.webhook_replicas, "split": settings.split,
                     "settle_timeout": settings.settle_timeout},
        "real": dataclasses.asdict(real),
        "report_dir": str(report_dir) if report_dir else "",
    }))
    cpu_before = cpu_times()
    holder = start_holder("netns", root / "logs" / "netns.log", net=True)
    argv = [*enter(holder, wd=repo_root()), sys.executable, "-m",
            "webhook.evaluation.realrun", str(spec), str(holder.pid)]
    code = None
    interrupted = False
    try:
        child = subprocess.Popen(argv)
        while code is None:
            try:
                code = child.wait()
            except KeyboardInterrupt:  # the child stops its cluster itself: wait for that
                if not interrupted:
                    interrupted = True
                    child.send_signal(signal.SIGINT)  # SIGTERM reaches only this process
    finally:
        # Whatever the child left: the cleanup is not interrupted half-way.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            _clean_up(root, holder)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    if interrupted:
        raise KeyboardInterrupt
    if code != 0 or not out.exists():
        tail = ""
        log_file = work / "evaluation.log"
        if log_file.exists():
            tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-20:])
        raise ClusterError(f"the run on real nodes failed (exit {code}); see {root}/logs\n{tail}")
    record, extras = record_from(json.loads(out.read_text()))
    extras.cpu_busy = busy_share(cpu_before, cpu_times())
    return record, extras


def _clean_up(root: Path, holder: Process) -> None:
    """After the child: the cluster's teardown if its state names this run's holder (it is
    idempotent), every process still in the namespace, then the holder; ClusterError if
    anything is left."""
    from webhook.devcluster.controlplane import ControlPlane
    from webhook.devcluster.realnodes.namespaces import namespace_id, processes_in
    from webhook.devcluster.realnodes.teardown import leftovers, teardown

    plane = ControlPlane.load(root)
    recorded = plane.processes.get("netns") if plane is not None else None
    ours = recorded is not None and \
        (recorded.pid, recorded.start_ticks) == (holder.pid, holder.start_ticks)
    problems = teardown(plane) if plane is not None and ours else []
    namespace = namespace_id(holder.pid, "net") if holder.alive() else None
    if namespace is not None:  # started before the state file named them
        for pid in processes_in(namespace, "net"):
            if pid != holder.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    stop(holder)
    left = leftovers(plane) if plane is not None and ours else None
    if problems or left:
        raise ClusterError(f"the run on real nodes left {problems or left} behind")


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as stat:
        # user nice system idle iowait irq softirq steal (guest time is in user already)
        fields = [int(x) for x in stat.readline().split()[1:9]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0


# ---- the child, inside the namespace -----------------------------------------------------------

def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def child_main(spec_path: Path, holder_pid: int) -> int:
    signal.signal(signal.SIGTERM, _interrupt)  # stops its cluster as Ctrl-C does
    spec = json.loads(spec_path.read_text())
    root = Path(spec["root"])
    # Beside the cluster's directory: `up` clears the cluster's logs/ as it starts.
    logging.basicConfig(level=logging.INFO, filename=str(root.parent / "evaluation.log"),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        built = from_document(json.loads(Path(spec["images"]).read_text()))
        record, extras = asyncio.run(_child(spec, holder_pid, built))
    except BaseException:
        log.exception("the run on real nodes failed")
        return 1
    Path(spec["record"]).write_text(json.dumps(record_document(record, extras)))
    return 0


async def _child(spec: Mapping[str, Any], holder_pid: int,
                 built: Mapping[str, BuiltImage]) -> tuple[RunRecord, RealExtras]:
    from webhook.devcluster.cluster import up
    from webhook.devcluster.realnodes.network import registry_host
    from webhook.devcluster.realnodes.registry import blob_fetches, fetches_by_node
    from webhook.evaluation import realimages

    started = time.perf_counter()
    root = Path(spec["root"])
    real = RealSettings(**spec["real"])
    s = spec["settings"]
    settings = RunSettings(webhook_args=tuple(s["webhook_args"]),
                           webhook_replicas=int(s["webhook_replicas"]), split=s["split"],
                           settle_timeout=float(s["settle_timeout"]))
    host = registry_host()
    scenario = scenario_from(spec["scenario"])
    holder = Process("netns", holder_pid, start_ticks(holder_pid) or -1, (),
                     root / "logs" / "netns.log")
    mode: Mode = spec["mode"]
    record = RunRecord(mode, scenario.kind, scenario.seed, int(spec["repeat"]), 1.0)
    extras = RealExtras()
    cluster = await asyncio.to_thread(
        up, root, Path(spec["kube_bin"]), [], catalog=Path(spec["catalog"]),
        webhook_args=list(settings.webhook_args),
        start_webhook=settings.webhook_replicas <= 1, kubelets=real.nodes,
        node_bin=Path(spec["node_bin"]), netns_holder=holder,
        registry_bandwidth=real.bandwidth)
    try:
        t = time.perf_counter()
        used = images_used(scenario)
        await asyncio.to_thread(realimages.push_all,
                                [b for b in built.values() if b.ref(host) in used],
                                Path(spec["blobs"]), f"http://{host}")
        extras.push_seconds = time.perf_counter() - t
        from kubernetes import client

        api = cluster.api_client()
        core: Any = client.CoreV1Api(api)
        apps: Any = client.AppsV1Api(api)
        try:
            t = time.perf_counter()
            await warm(core, scenario)
            extras.warm_seconds = time.perf_counter() - t
            registry_log = cluster.plane.log("registry")
            mark = len(await asyncio.to_thread(_lines, registry_log))
            served: list[tuple[Sequence[str], Path]] = []
            settings = dataclasses.replace(
                settings, on_webhooks=lambda urls, ca: served.append((urls, ca)))
            async with serving_webhooks(cluster, settings, record):
                times = await drive(core, apps, scenario, mode, settings, record)
                if spec.get("report_dir") and mode == "webhook":
                    await asyncio.sleep(REPORT_LINGER)
                    urls, ca = served[0]
                    await asyncio.to_thread(holdout_reports, urls, ca,
                                            Path(spec["report_dir"]))
            events = (await asyncio.to_thread(core.list_namespaced_event, NAMESPACE,
                                              _preload_content=False)).data
            event_items = json.loads(events)["items"]
        finally:
            api.close()
        lines = (await asyncio.to_thread(_lines, registry_log))[mark:]
        fetched = fetches_by_node(blob_fetches("\n".join(lines)),
                                  {n.name: ip for n, ip in _node_ips(cluster)})
        # Layers only: a pull whose layers were all there still fetches the image's config
        # (a few KB), which is not a download in the stand-in's terms, nor in a user's.
        blobs_of = {b.ref(host): {x.digest for x in b.layers} for b in built.values()}
        record.starts, extras.running = starts_from(record.pods, times, event_items, blobs_of,
                                                    fetched)
        record.ends = {uid: p.gone for uid, p in record.pods.items() if p.gone is not None}
        extras.registry_bytes = {n: sum(s for _, s in f) for n, f in fetched.items()}
        extras.registry_blobs = {n: len(f) for n, f in fetched.items()}
        bound = {s.uid for s in record.starts}
        record.unscheduled = sum(1 for p in record.pods.values()
                                 if p.gone is None and p.uid not in bound)
    finally:
        await asyncio.to_thread(cluster.down)
    record.wall_seconds = time.perf_counter() - started
    return record, extras


def holdout_reports(urls: Sequence[str], ca: Path, out: Path) -> None:
    """`layer-locality report` on each webhook replica's /metrics, as a user runs it (table,
    JSON and plots), into `out`: the holdout's effect measured from the real kubelets' events
    the replica saw."""
    from webhook.devcluster.install import repo_root

    out.mkdir(parents=True, exist_ok=True)
    for i, url in enumerate(urls, start=1):
        base = [sys.executable, "-m", "webhook", "report", "--url", f"{url}/metrics",
                "--ca", str(ca)]
        for suffix, extra in (("txt", []), ("json", ["--output", "json"])):
            result = subprocess.run([*base, *extra, *(["--plot", str(out / f"plots-{i}"),
                                                       "--replace-plots"]
                                                      if suffix == "txt" else [])],
                                    capture_output=True, text=True, check=False,
                                    cwd=repo_root(), timeout=120)
            (out / f"report-replica-{i}.{suffix}").write_text(result.stdout + result.stderr)


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


def _node_ips(cluster: Any) -> list[tuple[Any, str]]:
    from webhook.devcluster.realnodes.bringup import recorded_nodes

    return [(n, n.ip) for n in recorded_nodes(cluster.plane)]


def machine_cpu_milli() -> int:
    return (os.cpu_count() or 1) * 1000


def machine_memory() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 1 << 30


async def warm(core: Any, scenario: Scenario) -> None:
    """Every node holds its initial images (and the sandbox image), and its status lists them:
    a pod per (node, image) pinned there by nodeName, Running, then deleted. The registry bytes
    this costs are left out of the run's (the log is read from after it)."""
    from webhook.devcluster.realnodes.bringup import PAUSE_REPOSITORY, PAUSE_TAG
    from webhook.devcluster.realnodes.network import registry_host

    await asyncio.to_thread(core.create_namespace, {"metadata": {"name": WARM_NAMESPACE}})
    names = []
    pause = f"{registry_host()}/{PAUSE_REPOSITORY}:{PAUSE_TAG}"
    for spec in scenario.nodes:
        # A node with no initial image still runs one pod: its sandbox image is then there,
        # as on any node that has run a pod, and not counted against the scenario.
        for k, image in enumerate(spec.images or (pause,)):
            name = f"{spec.name}-{k}"
            names.append(name)
            await asyncio.to_thread(core.create_namespaced_pod, WARM_NAMESPACE, {
                "metadata": {"name": name},
                "spec": {"nodeName": spec.name, "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "warm", "image": image}]}})
    deadline = time.monotonic() + READY_TIMEOUT
    while True:
        pods = (await asyncio.to_thread(core.list_namespaced_pod, WARM_NAMESPACE)).items
        if len(pods) == len(names) and all(p.status.phase == "Running" for p in pods):
            break
        if time.monotonic() > deadline:
            raise ClusterError("the nodes' initial images did not all run within "
                               f"{READY_TIMEOUT:.0f} s")
        await asyncio.sleep(0.5)
    await asyncio.to_thread(core.delete_collection_namespaced_pod, WARM_NAMESPACE,
                            grace_period_seconds=0)
    deadline = time.monotonic() + STATUS_TIMEOUT
    wanted = {n.name: set(n.images) for n in scenario.nodes}
    while True:
        listed = {node.metadata.name: {name for image in node.status.images or ()
                                       for name in image.names or ()}
                  for node in (await asyncio.to_thread(core.list_node)).items}
        if all(refs <= listed.get(name, set()) for name, refs in wanted.items()):
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"node status did not list the initial images within "
                               f"{STATUS_TIMEOUT:.0f} s")
        await asyncio.sleep(1.0)


async def drive(core: Any, apps: Any, scenario: Scenario, mode: Mode, settings: RunSettings,
                record: RunRecord) -> dict[str, PodTimes]:
    """The scenario replayed until it settles; each pod's bind and Running as the one pod
    watch (run._Observer) saw them."""
    t0 = time.monotonic()

    def clock() -> float:
        return time.monotonic() - t0

    observer = _Observer(core, clock, record)
    tasks = [asyncio.create_task(observer.reflector().run())]
    try:
        labels = OPT_IN if mode == "webhook" else {}
        await asyncio.to_thread(core.create_namespace,
                                {"metadata": {"name": NAMESPACE, "labels": labels}})
        await _replay(apps, scenario.actions)
        # The pods Running are the kubelets' word that their pulls are over.
        record.settled = await settle(apps, core, lambda: True, settings.settle_timeout)
        await asyncio.sleep(0.5)  # the last watch events
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {uid: PodTimes(p.node, p.bound, p.running) for uid, p in record.pods.items()}


def preset(kind: str, nodes: int) -> ScenarioConfig:
    """The real-node scenarios: the evaluation's kinds at a size a 2-core machine runs as real
    pods (5-8 pods a node on 6 nodes), with the data set's images and its Zipf popularity.
    Deployments stay smaller than the node count, as they are on the 30-node scenarios:
    where every Deployment needs every node, every node needs every image and no placement
    can save a byte."""
    if kind == "steady":
        return ScenarioConfig(kind="steady", nodes=nodes, deployments=10, mean_replicas=3.0,
                              max_replicas=max(2, nodes - 1), pod_gap=1.0)
    return ScenarioConfig(kind="bursts", nodes=nodes, deployments=6,
                          burst=(2, max(2, nodes - 2)), scale_ups=3, updates=2, deletes=1,
                          op_gap=5.0)


if __name__ == "__main__":
    sys.exit(child_main(Path(sys.argv[1]), int(sys.argv[2])))
