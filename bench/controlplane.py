"""The webhook on the real control plane (`python -m bench --only controlplane`, or
`python -m bench.controlplane [--nodes N] [--running-pods N] [--no-agent] ...`).

A local cluster as `layer-locality cluster up` makes it (etcd, kube-apiserver, kube-scheduler,
kube-controller-manager from hack/kube, their flags unchanged) with `--nodes` fake nodes in 3
zones, 50 images each from the real layer data (tests/kit/workload.py), `--running-pods` pods bound
to them, and the webhook as 2 replicas in live mode behind a TCP balancer (bench/l4proxy.py,
as a Service's kube-proxy balances connections).

With the node agent running (the default; bench/standin_agents.py stands in for it on every
node, with the agent's ServiceAccount, tokens bound to each node, through the component's
ValidatingAdmissionPolicies): a NodeLayers object per node written once, each Node labelled
with the agent's layer labels of its images' layers, and a Lease per node renewed every
third of its duration for the whole run, by a process of its own. `--no-agent`: none of
them, and the agent's component removed (the hostname fallback).

Then rounds of `--deployments` Deployments x `--replicas` replicas created at once, in a plain
namespace (stock) and in an opted-in one, alternating which goes first, the same Deployments
in the same order; each round's namespace is deleted before the next. Per round, from the
real components:

- pods/s from the first Deployment created to the last pod bound, and arrival -> bind latency
  (this process's pod watch);
- the webhook's admission duration and the pod-create latency, from kube-apiserver's /metrics;
- kube-scheduler's algorithm duration (filter + score), its NodeAffinity plugin's score time,
  and its CPU per pod (/proc);
- the pod watch bytes kube-apiserver sent (apiserver_watch_events_sizes, every watcher);
- CPU of every process; where the pods landed (bench/cp_placement.py): the telemetry's bind
  outcome of each steered pod, label and hostname terms, and bytes on the node against the
  best candidate's.

Then the product's own load on kube-apiserver (flow schemas matching the webhook's and the
node agent's ServiceAccounts, so that APF's metrics count their requests by identity): an
idle window (the Lease renewals held), a steady one (the renewals), a label-churn window per
`--label-churn` rate (nodes gaining an image's layer labels), the NodeLayers heartbeats of
agents before Leases (`--legacy-heartbeats`), and a relist of both replicas; and the time to
ready after restarting one replica. Writes bench/results/controlplane.json
(controlplane-no-agent.json with `--no-agent`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson

from bench import cp_placement, cp_summary, report, standin_agents, standin_renewer
from bench.cp_agents import AgentSide
from bench.cp_api import (
    APISERVER_METRICS,
    Api,
    ApiError,
    Hist,
    PodTimes,
    by_label,
    delta,
    hist,
    total,
    watch_pods,
)
from bench.cp_load import ApiLoad
from bench.cp_objects import bake, deployment, flow_schema, node_items, running_pod
from bench.cp_windows import cpu_delta, machine_busy
from tests.kit import workload
from webhook.inventory.agentlease import AGENT_NAMESPACE, DEFAULT_LEASE_SECONDS

ROOT = Path(__file__).resolve().parent.parent
NODES = 5_000
RUNNING_PODS = 50_000
DEPLOYMENTS = 200
REPLICAS = 10
ROUNDS = 2
OPT_IN = {"layer-locality.io/enabled": "true"}
NULL_MODES = ("null", "null-direct")  # null webhooks behind the balancer / on the URL itself
FLOW_SCHEMAS = {"ll-webhook": ("layer-locality", "layer-locality"),
                "ll-agent": (AGENT_NAMESPACE, standin_agents.AGENT_ACCOUNT)}  # (namespace, SA)
STEADY_SECONDS = 60.0
# 1 % of the nodes a minute gain an image's layer labels: a 5,000-node cluster rolling out
# 200 Deployments x 10 replicas of new image versions an hour pulls on 0.7 % of its nodes a
# minute; a burst of new pods can patch at the bind rate while it lasts (--label-churn).
LABEL_CHURN_PERCENT = 1.0
SCHEDULER_METRICS = ("scheduler_scheduling_algorithm_duration_seconds",
                     "scheduler_plugin_execution_duration_seconds",
                     "scheduler_scheduling_attempt_duration_seconds",
                     "scheduler_schedule_attempts_total")
WEBHOOK_METRICS = ("layer_locality_review_duration_seconds", "layer_locality_reviews_total",
                   "layer_locality_connections_closed_total", "layer_locality_agent_leases")
PROCESSES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager",
             "webhook-0", "webhook-1", standin_renewer.RenewerProcess.NAME)


def kube_bin() -> Path:
    out = subprocess.run([str(ROOT / "hack/kube/build.sh")], check=True, capture_output=True,
                         text=True).stdout.strip().splitlines()
    return Path(out[-1])


class Bench:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.world = workload.build_world()
        self.cluster: Any = None
        self.proxy: subprocess.Popen[bytes] | None = None
        self.replica_ports: list[int] = []
        self.replica_args: tuple[str, ...] = ()  # beyond the shipped settings (a variant's)
        self.proxy_backends = "replicas"  # or one of NULL_MODES
        # Per Deployment, the terms and decision one opted-in review gave its pods: "baked"
        # rounds write them into the template of a plain namespace (no webhook call).
        self.baked: dict[str, tuple[list[Any], str]] = {}
        self.agent_side: AgentSide | None = None  # the stand-in agents (None: --no-agent)
        self.views: dict[str, cp_placement.NodeView] = {}  # what binds are judged against
        self.result: dict[str, Any] = {"settings": {k: v for k, v in vars(args).items()
                                                    if isinstance(v, (int, float, str, list))}}

    # -- set-up -----------------------------------------------------------------------------

    def up(self) -> None:
        from webhook.devcluster import cluster as cluster_mod

        args = self.args
        nodes_file = self.root / "nodes.json"
        catalog = self.root / "catalog.json"
        catalog.write_bytes(workload.catalog_bytes(self.world))
        self.items: list[dict[str, Any]] = node_items(self.world, args.nodes)
        nodes_file.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "NodeList",
                                             "items": self.items}))
        bin_dir = kube_bin()
        started = time.monotonic()
        loaded = cluster_mod.load_node_items(nodes_file)
        load_s = time.monotonic() - started
        webhook_args = ["--replicas", "2", *args.webhook_arg]
        self.cluster = cluster_mod.up(
            self.root / "cluster", bin_dir, loaded, catalog=catalog, webhook_args=webhook_args,
            start_webhook=False, percentage_of_nodes_to_score=args.percentage_of_nodes_to_score,
            client_qps=args.client_qps)
        up_s = time.monotonic() - started
        print(f"cluster up: {len(loaded)} nodes in {up_s:.1f} s (NodeList read {load_s:.1f} s)",
              flush=True)
        self.result["cluster_up"] = {"nodes": len(loaded), "seconds": up_s, "load_seconds": load_s,
                                     "nodelist_mb": nodes_file.stat().st_size / 1e6}

    async def populate(self, api: Api) -> None:
        """The agents' objects (or the component removed: --no-agent), then the running
        pods; the flow schemas first, so every request of theirs is counted by identity."""
        args = self.args
        for name, (namespace, sa) in FLOW_SCHEMAS.items():
            await api.request("POST", "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
                              flow_schema(name, namespace, sa), ok=(201, 409))
        uids = await self.node_uids(api)
        side = AgentSide(self.cluster, self.root, self.world, self.items, args.lease_seconds)
        out: dict[str, Any] = {}
        if args.agent:
            self.agent_side = side
            out["agent_component"] = await asyncio.to_thread(side.ensure_component)
            out |= await side.create_nodelayers(api, uids)
            out["agents"] = await side.start(api, uids)
        else:
            out["agent_component"] = await asyncio.to_thread(side.remove_component)
        await api.request("POST", "/api/v1/namespaces",
                          {"metadata": {"name": "running"}})
        await self._default_sa(api, "running")
        started = time.monotonic()
        bodies = (("/api/v1/namespaces/running/pods",
                   running_pod(k, self.items[k % len(self.items)]))
                  for k in range(args.running_pods))
        n = await api.create_all(bodies, concurrency=48)
        pods_s = time.monotonic() - started
        print(f"running pods: {n} in {pods_s:.1f} s ({n / max(pods_s, 1e-9):.0f}/s)", flush=True)
        self.result["populate"] = out | {"nodelayers": len(self.nodelayers),
                                         "running_pods": n, "running_pods_seconds": pods_s}
        self.views = cp_placement.node_views(
            self.items, {image.ref: image for image in self.world.images},
            side.labels())

    @property
    def nodelayers(self) -> list[dict[str, Any]]:
        return self.agent_side.nodelayers if self.agent_side is not None else []

    @staticmethod
    async def node_uids(api: Api) -> dict[str, str]:
        listing = await api.request("GET", "/api/v1/nodes", headers={
            "Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"})
        return {item["metadata"]["name"]: item["metadata"]["uid"] for item in listing["items"]}

    async def _default_sa(self, api: Api, namespace: str) -> None:
        """Pods need the namespace's default ServiceAccount (the controller makes it)."""
        for _ in range(300):
            try:
                await api.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
                return
            except Exception:
                await asyncio.sleep(0.1)
        raise RuntimeError(f"no default ServiceAccount in {namespace}")

    def start_webhooks(self) -> None:
        from webhook.devcluster import cluster as cluster_mod
        from webhook.devcluster.processes import free_port

        cluster_mod.WEBHOOK_READY_TIMEOUT = 600.0
        self.replica_ports = [free_port(), free_port()]
        ready = []
        for i, port in enumerate(self.replica_ports):
            started = time.monotonic()
            self.cluster.start_webhook_replica(i, port)
            ready.append(time.monotonic() - started)
        self.result["first_ready_seconds"] = ready
        self.start_proxy(self.replica_ports)
        print(f"webhook replicas ready in {', '.join(f'{s:.1f}' for s in ready)} s", flush=True)

    def start_proxy(self, backends: Sequence[int]) -> None:
        """The TCP balancer on the webhook's URL, to `backends` (a running one is replaced)."""
        self.stop_proxy()
        log = self.root / "l4proxy.log"
        self.proxy_log = open(log, "ab")  # noqa: SIM115 (closed in stop_proxy())
        self.proxy = subprocess.Popen(
            [sys.executable, "-m", "bench.l4proxy", "--listen", str(self.cluster.webhook_port),
             *(a for p in backends for a in ("--backend", str(p)))],
            stdout=subprocess.PIPE, stderr=self.proxy_log, cwd=ROOT)
        assert self.proxy.stdout is not None
        line = self.proxy.stdout.readline()
        if b"listening" not in line:
            raise RuntimeError(f"l4proxy did not start: {line!r} (see {log})")

    def stop_proxy(self) -> list[int]:
        """Stop the balancer; the connections each backend received."""
        if self.proxy is None:
            return []
        proxy, self.proxy = self.proxy, None
        proxy.terminate()
        counts: list[int] = []
        try:
            out, _ = proxy.communicate(timeout=10)
            if out:
                counts = orjson.loads(out.splitlines()[-1])["connections"]
                self.result.setdefault("balancer_connections", []).append(
                    {"backends": self.proxy_backends, "connections": counts})
        except Exception:
            proxy.kill()
            proxy.wait()
        self.proxy_log.close()
        return counts

    def start_null(self, direct: bool) -> None:
        """Null webhooks (bench/null_webhook.py: aiohttp, the same TLS, answers allowed with
        no patch) in place of the replicas: two behind the balancer, or (`direct`) one on the
        webhook's URL itself with no balancer: the floor of a Python webhook's latency at
        this API server on this machine, with and without the balancer's hop."""
        from webhook.devcluster.processes import fetch, free_port, spawn, wait_until

        certs = self.cluster.webhook_certs
        context = ssl.create_default_context(cafile=str(certs.ca_cert))
        if direct:
            self.stop_proxy()
        ports = [self.cluster.webhook_port] if direct else [free_port(), free_port()]
        for i, port in enumerate(ports):
            process = spawn(f"null-webhook-{i}", [
                sys.executable, "-m", "bench.null_webhook", "--listen", f"127.0.0.1:{port}",
                "--tls-cert", str(certs.cert), "--tls-key", str(certs.key)],
                self.root / f"null-webhook-{i}.log", cwd=ROOT)
            self.cluster.plane.processes[f"null-webhook-{i}"] = process
        self.cluster.plane.save()
        for i, port in enumerate(ports):
            def ready(url: str = f"https://127.0.0.1:{port}/readyz") -> bool:
                return fetch(url, context) is not None

            wait_until(self.cluster.plane.processes[f"null-webhook-{i}"], ready, 60.0,
                       "ready (/readyz)")
        if not direct:
            self.start_proxy(ports)

    def stop_null(self) -> None:
        from webhook.devcluster.processes import stop

        for i in range(2):
            process = self.cluster.plane.processes.pop(f"null-webhook-{i}", None)
            if process is not None:
                stop(process)
        self.start_proxy(self.replica_ports)

    # -- measuring --------------------------------------------------------------------------

    def pids(self) -> dict[str, int]:
        return {name: p.pid for name, p in self.cluster.plane.processes.items()
                if name in PROCESSES}

    def cpu(self) -> dict[str, float]:
        """CPU seconds so far by process name (name@pid: a restarted replica is another)."""
        out = {}
        for name, pid in self.pids().items():
            with contextlib.suppress(OSError):
                out[f"{name}@{pid}"] = report.cpu_seconds(pid)
        out["machine"] = machine_busy()
        return out

    def urls(self) -> dict[str, str]:
        ports = self.cluster.plane.ports
        return {"apiserver": self.cluster.plane.server + "/metrics",
                "scheduler": f"https://127.0.0.1:{ports['scheduler']}/metrics"}

    async def scrape(self, api: Api, insecure: Api) -> dict[str, Any]:
        urls = self.urls()
        out = {"apiserver": await api.metrics(urls["apiserver"], APISERVER_METRICS),
               "scheduler": await insecure.metrics(urls["scheduler"], SCHEDULER_METRICS)}
        for i, port in enumerate(self.replica_ports):
            out[f"webhook-{i}"] = await insecure.metrics(f"https://127.0.0.1:{port}/metrics",
                                                         WEBHOOK_METRICS)
        return out

    async def round(self, api: Api, insecure: Api, mode: str, index: int) -> dict[str, Any]:
        args = self.args
        ns = f"{mode}-{index}" if index >= 0 else f"warmup-{mode}"
        labels = OPT_IN if mode not in ("stock", "baked") else {}
        await api.request("POST", "/api/v1/namespaces",
                          {"metadata": {"name": ns, "labels": labels}})
        await self._default_sa(api, ns)
        times = PodTimes()
        started = asyncio.Event()
        watcher = asyncio.create_task(watch_pods(api, ns, times, started))
        await started.wait()
        before, cpu0 = await self.scrape(api, insecure), self.cpu()
        expected = args.deployments * args.replicas
        t0 = time.monotonic()
        bodies = [deployment(self.world, k, args.replicas) for k in range(args.deployments)]
        if mode == "baked":
            for body in bodies:
                bake(body, *self.baked.get(body["metadata"]["name"], ([], "")))
        profile = None
        if args.profile_seconds and index == 0 and mode in ("stock", "opted-in", "baked"):
            # kube-apiserver's CPU profile over the round's first seconds (its --profiling is
            # on by default): `go tool pprof -top -diff_base stock.pb.gz opted-in.pb.gz`.
            profile = asyncio.create_task(api.request(
                "GET", f"/debug/pprof/profile?seconds={args.profile_seconds}"))
        await api.create_all(((f"/apis/apps/v1/namespaces/{ns}/deployments", body)
                              for body in bodies), concurrency=16)
        created_s = time.monotonic() - t0
        deadline = t0 + args.round_timeout
        while len(times.bound) < expected and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.2)
        t1 = max(times.bound.values(), default=time.monotonic())
        await asyncio.sleep(1.0)  # the last binds' metrics
        after, cpu1 = await self.scrape(api, insecure), self.cpu()
        watcher.cancel()
        if profile is not None:
            folder = report.RESULTS / "controlplane-pprof"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{mode}.pb.gz").write_bytes(await profile)
        bound = len(times.bound)
        d = {k: delta(after[k], before[k]) for k in after}
        cpu = cpu_delta(cpu0, cpu1)
        latencies = sorted(times.bound[n] - times.added[n] for n in times.bound
                           if n in times.added)
        a, s = d["apiserver"], d["scheduler"]
        called = mode not in ("stock", "baked")  # the namespace is opted in
        webhook = hist(a, "apiserver_admission_webhook_admission_duration_seconds",
                       name="*layer-locality*", operation="CREATE") if called \
            else Hist((), 0.0, 0.0)
        pod_create = hist(a, "apiserver_request_duration_seconds", verb="POST",
                          resource="pods", subresource="")
        pod_create_sli = hist(a, "apiserver_request_sli_duration_seconds", verb="POST",
                              resource="pods", subresource="")
        webhook_http = hist(a, "rest_client_request_duration_seconds", verb="POST",
                            host=f"127.0.0.1:{self.cluster.webhook_port}")
        apf_wait = hist(a, "apiserver_flowcontrol_request_wait_duration_seconds",
                        execute="true", flow_schema="*")
        admission_calls = by_label(
            a, "apiserver_admission_controller_admission_duration_seconds_count", "name",
            operation="CREATE", type="admit")
        algorithm = hist(s, "scheduler_scheduling_algorithm_duration_seconds")
        affinity_score = hist(s, "scheduler_plugin_execution_duration_seconds",
                              plugin="NodeAffinity", extension_point="Score")
        review = Hist((), 0.0, 0.0)
        for i in range(len(self.replica_ports)):
            if mode in NULL_MODES:
                break
            h = hist(d[f"webhook-{i}"], "layer_locality_review_duration_seconds")
            review = cp_summary.merge(review, h)
        watch_bytes = total(a, "apiserver_watch_events_sizes_sum", resource="pods")
        watch_events = total(a, "apiserver_watch_events_sizes_count", resource="pods")
        out: dict[str, Any] = {
            "mode": mode, "namespace": ns, "pods": expected, "bound": bound,
            "create_seconds": created_s, "seconds": t1 - t0,
            "pods_per_second": bound / (t1 - t0) if bound else 0.0,
            "bind_latency": report.summary_ms(latencies),
            "webhook_admission_ms": webhook.as_dict(),
            "webhook_within_5ms": webhook.share_within(0.005),
            "pod_create_ms": pod_create.as_dict(),
            "pod_create_within_5ms": pod_create.share_within(0.005),
            "pod_create_sli_ms": pod_create_sli.as_dict(),
            "webhook_http_ms": webhook_http.as_dict(),
            "apf_wait_ms": apf_wait.as_dict(),
            "admission_plugin_calls": {k: v for k, v in admission_calls.items() if v},
            "algorithm_ms": algorithm.as_dict(),
            "nodeaffinity_score_ms": affinity_score.as_dict(),
            "review_ms": review.as_dict(),
            "pod_watch_bytes": watch_bytes, "pod_watch_events": watch_events,
            "watch_bytes_this_client": times.bytes,
            "cpu_seconds": cpu, "machine_busy": cpu1["machine"] - cpu0["machine"],
            "scheduler_cpu_ms_per_pod": 1000 * cpu.get("kube-scheduler", 0.0) / max(bound, 1),
            "apiserver_cpu_ms_per_pod": 1000 * cpu.get("kube-apiserver", 0.0) / max(bound, 1),
            "webhook_calls": by_label(a, "apiserver_admission_webhook_request_total", "code",
                                      name="*layer-locality*"),
            # Each replica's view at the round's end: agents alive by their Lease (gauges).
            "agent_leases_alive": [total(after[f"webhook-{i}"], "layer_locality_agent_leases",
                                         state="alive")
                                   for i in range(len(self.replica_ports))],
        }
        # Every mode: a stock round's bytes on the bound node are the baseline.
        out["placement"] = await self.placement(api, ns, mode)
        await self.delete_namespace(api, ns)
        print(f"round {index} {mode}: {bound}/{expected} bound in {t1 - t0:.1f} s "
              f"({out['pods_per_second']:.1f}/s); webhook p99 "
              f"{cp_summary.ms(webhook.quantile(0.99))}, within 5 ms "
              f"{cp_summary.pct(webhook.share_within(0.005))}; pod create mean/p99 "
              f"{cp_summary.ms(pod_create.sum / pod_create.count if pod_create.count else None)}"
              f"/{cp_summary.ms(pod_create.quantile(0.99))}; algorithm p99 "
              f"{cp_summary.ms(algorithm.quantile(0.99))}; pod watch {watch_bytes / 1e6:.1f} MB"
              f"\n  placement: {cp_summary.placement_line(out['placement'])}", flush=True)
        return out

    async def placement(self, api: Api, ns: str, mode: str) -> dict[str, Any]:
        listing = await api.request("GET", f"/api/v1/namespaces/{ns}/pods")
        seen: set[str] = set()
        for pod in listing["items"]:
            terms = ((((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
                     .get("preferredDuringSchedulingIgnoredDuringExecution") or [])
            app = (pod["metadata"].get("labels") or {}).get("app", "")
            if terms and mode == "opted-in" and app not in seen:
                seen.add(app)  # what the latest opted-in review gave this Deployment's pods
                self.baked[app] = (terms, (pod["metadata"].get("annotations") or {}).get(
                    "layer-locality.io/decision", ""))
        placed = await asyncio.to_thread(cp_placement.judge, listing["items"], self.views,
                                         self.world.catalog)
        return cp_placement.summary(placed, len(listing["items"]))

    async def delete_namespace(self, api: Api, ns: str) -> None:
        await api.request("DELETE", f"/api/v1/namespaces/{ns}")
        for _ in range(600):
            # A bound pod's graceful deletion waits for its kubelet, and fake nodes have none:
            # the pods go at once (the terminating namespace admits no new ones).
            try:
                await api.request("DELETE",
                                  f"/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0")
            except ApiError as exc:
                # Deleting 2,000 pods at once under load can outlast the API server's request
                # timeout (504) though the deletions go on: ask again on the next turn.
                if exc.status not in (429, 500, 503, 504):
                    raise
            try:
                await api.request("GET", f"/api/v1/namespaces/{ns}")
            except Exception:
                return
            await asyncio.sleep(1.0)
        raise RuntimeError(f"namespace {ns} still there after 600 s")

    # -- restarts ---------------------------------------------------------------------------

    def use_variant(self, mode: str) -> None:
        """Restart the replicas with the variant's extra `serve` arguments when they differ
        from the ones they run with (stock and opted-in: the shipped settings)."""
        backends = mode if mode in NULL_MODES else "replicas"
        if backends != self.proxy_backends:
            if self.proxy_backends in NULL_MODES:
                self.stop_null()
            if backends in NULL_MODES:
                self.start_null(direct=backends == "null-direct")
            self.proxy_backends = backends
        if mode in ("stock", "baked") or mode in NULL_MODES:
            return  # the replicas serve no review: whatever they run with stays
        variants = dict(v.split("=", 1) for v in self.args.variant)
        wanted = tuple(variants[mode].split()) if mode in variants else ()  # opted-in: shipped
        if wanted == self.replica_args:
            return
        self.replica_args = wanted
        for i in range(len(self.replica_ports)):
            self.restart(i)

    def restart(self, i: int) -> float:
        """Stop replica i, start it again; seconds until its /readyz answers ready (Nodes,
        pods, NodeLayers and Leases listed and watched: inventory/syncgate.py). When its
        NodeLayers count reached them all lands in self.result["nodelayers_synced_seconds"]
        (before the sync gate they were listed after ready)."""
        from webhook.devcluster.processes import fetch, stop

        stop(self.cluster.plane.processes[f"webhook-{i}"])
        started = time.monotonic()
        self.cluster.start_webhook_replica(i, self.replica_ports[i], self.replica_args)
        ready = time.monotonic() - started
        context = ssl.create_default_context(cafile=str(self.cluster.webhook_certs.ca_cert))
        url = f"https://127.0.0.1:{self.replica_ports[i]}/metrics"
        while time.monotonic() - started < 600:
            held = sum(float(line.rsplit(" ", 1)[1]) for line in (
                fetch(url, context) or b"").decode().splitlines()
                if line.startswith("layer_locality_nodelayers_objects{"))
            if held >= len(self.nodelayers):
                self.result.setdefault("nodelayers_synced_seconds", []).append(
                    time.monotonic() - started)
                break
            time.sleep(0.2)
        return ready

    def restart_both(self) -> list[float]:
        """Restart every replica at once (from threads): each one's seconds until ready."""
        with ThreadPoolExecutor(len(self.replica_ports)) as pool:
            return list(pool.map(self.restart, range(len(self.replica_ports))))

    async def run(self) -> dict[str, Any]:
        plane = self.cluster.plane
        # Replicas restart from threads at once; the state file has one writer at a time.
        lock, save = threading.Lock(), plane.save

        def locked_save() -> None:
            with lock:
                save()

        plane.save = locked_save
        api = Api(plane.server, plane.tls_context())
        insecure_ctx = plane.tls_context()
        insecure_ctx.check_hostname = False
        insecure_ctx.verify_mode = ssl.CERT_NONE
        insecure = Api(plane.server, insecure_ctx)
        try:
            # What the scheduler runs with, read back from it.
            configz = await insecure.request(
                "GET", "", server=self.urls()["scheduler"].replace("/metrics", "/configz"))
            if isinstance(configz, bytes):
                configz = orjson.loads(configz)
            componentconfig = configz.get("componentconfig") or {}
            self.result["scheduler_percentage_of_nodes_to_score"] = componentconfig.get(
                "percentageOfNodesToScore")
            self.result["scheduler_client_qps"] = (componentconfig.get(
                "clientConnection") or {}).get("qps")
            self.result["client_qps"] = self.args.client_qps
            await self.populate(api)
            await asyncio.to_thread(self.start_webhooks)
            if self.args.warmup:
                # Not recorded: the first pods after set-up meet cold caches and the tail of
                # the set-up's own work (the garbage collector's and the replicas' first sync).
                saved = self.args.deployments
                self.args.deployments = max(1, saved // 10)
                for mode in ("stock", "opted-in"):
                    await self.round(api, insecure, mode, -1)
                self.args.deployments = saved
            rounds = []
            modes = ["stock", "opted-in", *(NULL_MODES if self.args.null else ()),
                     *(["baked"] if self.args.baked else []),
                     *(v.split("=", 1)[0] for v in self.args.variant)]
            for r in range(self.args.rounds):
                # Each round rotates the order, so no mode always follows the same one.
                shift = r % len(modes)
                for mode in modes[shift:] + modes[:shift]:
                    await asyncio.to_thread(self.use_variant, mode)
                    rounds.append(await self.round(api, insecure, mode, r))
            await asyncio.to_thread(self.use_variant, "opted-in")
            self.result["rounds"] = rounds
            # What the terms and annotations were, for the record: the first 20 Deployments'.
            self.result["patch_samples"] = [
                {"app": app, "terms": terms, "decision": decision}
                for app, (terms, decision) in sorted(self.baked.items())[:20]]
            self.result["api_load"] = await ApiLoad(self, api).run()
            restarts = [await asyncio.to_thread(self.restart, r % 2)
                        for r in range(self.args.restarts)]
            self.result["ready_after_restart_seconds"] = restarts
            print("ready after restart: " + ", ".join(f"{s:.1f}" for s in restarts) + " s",
                  flush=True)
            both = [await asyncio.to_thread(self.restart_both)
                    for _ in range(self.args.restarts_both)]
            self.result["ready_after_restarting_both_seconds"] = both
            print("ready after restarting both: " + "; ".join(
                ", ".join(f"{s:.1f}" for s in pair) for pair in both) + " s", flush=True)
            if self.agent_side is not None and self.agent_side.renewer is not None:
                self.result["renewer"] = await self.agent_side.renewer_command("stats")
        finally:
            await api.close()
            await insecure.close()
        return self.result

    def close(self) -> None:
        if self.agent_side is not None:
            final = self.agent_side.stop()
            if final is not None:
                self.result["renewer_final"] = final
        self.stop_proxy()
        if self.cluster is not None:
            self.cluster.down()


def result_name(args: argparse.Namespace) -> str:
    """The results file's name: the two agent modes are separate runs, kept side by side."""
    return "controlplane" if args.agent else "controlplane-no-agent"


def run(quick: bool = False, argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse(argv if argv is not None else (_QUICK if quick else []))
    root = Path(tempfile.mkdtemp(prefix="ll-bench-cp-"))
    bench = Bench(args, root)
    try:
        bench.up()
        asyncio.run(bench.run())
    finally:
        bench.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    result = bench.result
    result.update(cp_summary.summarize(result))
    result["machine"] = report.machine()
    result["code"] = report.source()
    print(cp_summary.rounds_table(result.get("rounds", [])))
    return result


_QUICK = ["--nodes", "300", "--running-pods", "1000", "--deployments", "20", "--replicas", "5",
          "--rounds", "1", "--steady-seconds", "10", "--restarts", "1"]


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.controlplane", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=NODES)
    p.add_argument("--running-pods", type=int, default=RUNNING_PODS)
    p.add_argument("--deployments", type=int, default=DEPLOYMENTS)
    p.add_argument("--replicas", type=int, default=REPLICAS)
    p.add_argument("--rounds", type=int, default=ROUNDS,
                   help="rounds of stock + opted in (the order alternates)")
    p.add_argument("--round-timeout", type=float, default=900.0)
    p.add_argument("--steady-seconds", type=float, default=STEADY_SECONDS,
                   help="length of each load window (the idle one at most the Lease's "
                        "duration less a renewal period and 20 s)")
    p.add_argument("--restarts", type=int, default=3)
    p.add_argument("--restarts-both", type=int, default=1,
                   help="times both replicas are restarted at once, after --restarts")
    p.add_argument("--no-agent", dest="agent", action="store_false",
                   help="no node agent: no NodeLayers, layer labels or Leases, its component "
                        "removed (the webhook's hostname fallback); results in "
                        "controlplane-no-agent.json")
    p.add_argument("--lease-seconds", type=int, default=DEFAULT_LEASE_SECONDS,
                   help="the agents' Lease duration; renewed every third of it")
    p.add_argument("--label-churn", type=float, action="append", default=None,
                   metavar="PERCENT",
                   help="a label-churn window with PERCENT of the nodes a minute gaining an "
                        f"image's layer labels (repeatable; default {LABEL_CHURN_PERCENT})")
    p.add_argument("--legacy-heartbeats", action="store_true",
                   help="also a window of the NodeLayers heartbeats of agents before Leases "
                        "(GET + PUT of the object per node every 300 s)")
    p.add_argument("--webhook-arg", action="append", default=[],
                   help="extra `serve` argument for both replicas (repeatable)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                   help="another opted-in mode, the replicas restarted with these extra `serve` "
                        "arguments, e.g. lean='--max-nodes 16' (repeatable)")
    p.add_argument("--percentage-of-nodes-to-score", type=int, default=None, metavar="N",
                   help="kube-scheduler's percentageOfNodesToScore (default: its adaptive one)")
    p.add_argument("--client-qps", type=int, default=None, metavar="N",
                   help="kube-controller-manager's and kube-scheduler's API client QPS (burst "
                        "twice it; default: theirs, 20 and 50: the ReplicaSet controller then "
                        "sets the pods' rate)")
    p.add_argument("--profile-seconds", type=int, default=0, metavar="S",
                   help="kube-apiserver's CPU profile over the first S seconds of the first "
                        "stock, opted-in and baked rounds, in bench/results/controlplane-pprof/")
    p.add_argument("--baked", action="store_true",
                   help="also a mode in a plain namespace whose Deployments carry, in their "
                        "template, the terms and decision an opted-in review gave them: the "
                        "bigger pod's cost at the API server without the webhook call")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="leave out the unrecorded warm-up rounds")
    p.add_argument("--null", action="store_true",
                   help="also modes with null webhooks, behind the balancer and direct (the floor)")
    p.add_argument("--keep", action="store_true", help="keep the run's directory")
    args = p.parse_args(list(argv))
    if args.label_churn is None:
        args.label_churn = [] if not args.agent else [LABEL_CHURN_PERCENT]
    if not args.agent and (args.legacy_heartbeats or args.label_churn):
        p.error("--legacy-heartbeats and --label-churn need the agent (leave out --no-agent)")
    if args.lease_seconds < 15:
        p.error("--lease-seconds must be at least 15 (the product's minimum)")
    return args


def main(argv: list[str] | None = None) -> int:
    result = run(argv=argv if argv is not None else sys.argv[1:])
    path = report.write(result_name(parse(argv if argv is not None else sys.argv[1:])), result)
    print(report.targets_table([("controlplane", t) for t in result["targets"]]))
    print(f"-> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
