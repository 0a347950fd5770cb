"""The webhook on the real control plane (`python -m bench --only controlplane`, or
`python -m bench.controlplane [--nodes N] [--running-pods N] ...`).

A local cluster as `layer-locality cluster up` makes it (etcd, kube-apiserver, kube-scheduler,
kube-controller-manager from hack/kube, their flags unchanged) with `--nodes` fake nodes in 3
zones, 50 images each from the real layer data (bench/workload.py), a NodeLayers object per
node, `--running-pods` pods bound to them, and the webhook as 2 replicas in live mode behind a
TCP balancer (bench/l4proxy.py, as a Service's kube-proxy balances connections). Then rounds of
`--deployments` Deployments x `--replicas` replicas created at once, in a plain namespace
(stock) and in an opted-in one, alternating which goes first, the same Deployments in the same
order; each round's namespace is deleted before the next. Per round, from the real components:

- pods/s from the first Deployment created to the last pod bound, and arrival -> bind latency
  (this process's pod watch);
- the webhook's admission duration and the pod-create latency, from kube-apiserver's /metrics;
- kube-scheduler's algorithm duration (filter + score), its NodeAffinity plugin's score time,
  and its CPU per pod (/proc);
- the pod watch bytes kube-apiserver sent (apiserver_watch_events_sizes, every watcher);
- CPU of every process; where steered pods landed against the nodes their terms named.

Then the product's own load on kube-apiserver (flow schemas matching the webhook's and the
node agent's ServiceAccounts, so that APF's metrics count their requests by identity): a
steady window with stand-in agents writing NodeLayers heartbeats at the agent's resync rate,
and a relist of both replicas; and the time to ready after restarting one replica.
Writes bench/results/controlplane.json."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench import report, workload
from bench.cp_api import Api, Hist, PodTimes, by_label, delta, hist, total, watch_pods

ROOT = Path(__file__).resolve().parent.parent
NODES = 5_000
RUNNING_PODS = 50_000
DEPLOYMENTS = 200
REPLICAS = 10
ROUNDS = 2
OPT_IN = {"layer-locality.io/enabled": "true"}
NULL_MODES = ("null", "null-direct")  # null webhooks behind the balancer / on the URL itself
FLOW_SCHEMAS = {"ll-webhook": ("layer-locality", "layer-locality"),
                "ll-agent": ("layer-locality-agent", "layer-locality-agent")}  # (namespace, SA)
AGENT_MANIFESTS = ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml")
AGENT_RESYNC_SECONDS = 300  # webhook/agent/loop.py's resync: a heartbeat per node this often
STEADY_SECONDS = 60.0
APISERVER_METRICS = (
    "apiserver_admission_webhook_admission_duration_seconds",
    "apiserver_request_duration_seconds", "apiserver_watch_events_sizes",
    "apiserver_watch_events_total", "apiserver_request_total", "apiserver_response_sizes",
    "apiserver_flowcontrol_dispatched_requests_total", "apiserver_longrunning_requests",
    "apiserver_admission_webhook_request_total")
SCHEDULER_METRICS = ("scheduler_scheduling_algorithm_duration_seconds",
                     "scheduler_plugin_execution_duration_seconds",
                     "scheduler_scheduling_attempt_duration_seconds",
                     "scheduler_schedule_attempts_total")
WEBHOOK_METRICS = ("layer_locality_review_duration_seconds", "layer_locality_reviews_total",
                   "layer_locality_connections_closed_total")
PROCESSES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager",
             "webhook-0", "webhook-1")


def kube_bin() -> Path:
    out = subprocess.run([str(ROOT / "hack/kube/build.sh")], check=True, capture_output=True,
                         text=True).stdout.strip().splitlines()
    return Path(out[-1])


def node_items(world: workload.World, nodes: int) -> list[dict[str, Any]]:
    """The bench's nodes as a NodeList's items, addresses moved to the benchmark range
    (198.18.0.0/15): fake nodes receive no traffic, but no object here names a private
    address."""
    items: list[dict[str, Any]] = []
    for item in workload.node_objects(world, nodes):
        i = len(items)
        item["spec"].pop("podCIDR", None)
        item["status"]["addresses"] = [
            {"type": "InternalIP", "address": f"198.18.{i >> 8 & 255}.{i & 255}"},
            {"type": "Hostname", "address": item["metadata"]["name"]}]
        for key in ("uid", "resourceVersion"):
            item["metadata"].pop(key, None)
        items.append(item)
    return items


def running_pod(k: int, node: dict[str, Any]) -> dict[str, Any]:
    """Pod k bound to `node`, running two of the images the node holds (no owner: the garbage
    collector would delete pods of a ReplicaSet that does not exist)."""
    images = [image["names"][1] for image in node["status"]["images"][k % 7: k % 7 + 2]]
    body = workload.pod(f"run-{k}", images)
    body["metadata"]["namespace"] = "running"
    body["metadata"]["labels"] = {"app": f"run-{k % 500}"}
    body["spec"]["nodeName"] = node["metadata"]["name"]
    for c in body["spec"]["containers"]:
        c["resources"]["requests"] = {"cpu": "10m", "memory": "16Mi"}
    return body


def deployment(world: workload.World, k: int, replicas: int) -> dict[str, Any]:
    """Deployment k: an application image plus a real base as a sidecar (as users write)."""
    rng = random.Random(k)
    app = world.apps[rng.randrange(len(world.apps))].ref
    sidecar = workload.short_ref(world.bases[rng.randrange(len(world.bases))].ref)
    labels = {"app": f"app-{k:03d}"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": f"app-{k:03d}", "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                 "template": {"metadata": {"labels": labels}, "spec": {"containers": [
                     {"name": "app", "image": app,
                      "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
                     {"name": "sidecar", "image": sidecar,
                      "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}}}]}}}}


def bake(body: dict[str, Any], terms: list[Any], decision: str) -> None:
    """The Deployment `body` (changed in place) with `terms` and `decision` in its template."""
    template = body["spec"]["template"]
    if terms:
        template["spec"]["affinity"] = {"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": terms}}
    if decision:
        template["metadata"]["annotations"] = {"layer-locality.io/decision": decision}


def flow_schema(name: str, namespace: str, service_account: str) -> dict[str, Any]:
    """A FlowSchema matching one ServiceAccount, before the catch-all ones: APF's metrics then
    count its requests under `name`; the priority level is the one it had (workload-low)."""
    return {"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": name},
            "spec": {"priorityLevelConfiguration": {"name": "workload-low"},
                     "matchingPrecedence": 500,
                     "distinguisherMethod": {"type": "ByUser"},
                     "rules": [{"subjects": [{"kind": "ServiceAccount", "serviceAccount": {
                         "name": service_account, "namespace": namespace}}],
                         "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"],
                                            "resources": ["*"], "clusterScope": True,
                                            "namespaces": ["*"]}],
                         "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}


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
            start_webhook=False, percentage_of_nodes_to_score=args.percentage_of_nodes_to_score)
        up_s = time.monotonic() - started
        print(f"cluster up: {len(loaded)} nodes in {up_s:.1f} s (NodeList read {load_s:.1f} s)",
              flush=True)
        self.result["cluster_up"] = {"nodes": len(loaded), "seconds": up_s, "load_seconds": load_s,
                                     "nodelist_mb": nodes_file.stat().st_size / 1e6}

    async def populate(self, api: Api) -> None:
        args = self.args
        from bench.nodelayers import nodelayers_objects

        started = time.monotonic()
        objects = nodelayers_objects(args.nodes)
        # Owned by the real Node (the garbage collector deletes an object whose owner's uid
        # does not exist), as the agent writes it.
        uids = await self.node_uids(api)
        for obj in objects:
            name = obj["metadata"]["name"]
            obj["metadata"]["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uids[name]}]
        self.nodelayers = objects
        group_path = self._nodelayers_path()
        n = await api.create_all((group_path, o) for o in objects)
        nl_s = time.monotonic() - started
        print(f"NodeLayers: {n} in {nl_s:.1f} s", flush=True)
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
        self.result["populate"] = {"nodelayers": len(objects), "nodelayers_seconds": nl_s,
                                   "running_pods": n, "running_pods_seconds": pods_s}

    @staticmethod
    async def node_uids(api: Api) -> dict[str, str]:
        listing = await api.request("GET", "/api/v1/nodes", headers={
            "Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"})
        return {item["metadata"]["name"]: item["metadata"]["uid"] for item in listing["items"]}

    @staticmethod
    def _nodelayers_path() -> str:
        from webhook.inventory.nodelayers import GROUP, PLURAL, VERSION

        return f"/apis/{GROUP}/{VERSION}/{PLURAL}"

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
        out["machine"] = _machine_busy()
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
        algorithm = hist(s, "scheduler_scheduling_algorithm_duration_seconds")
        affinity_score = hist(s, "scheduler_plugin_execution_duration_seconds",
                              plugin="NodeAffinity", extension_point="Score")
        review = Hist((), 0.0, 0.0)
        for i in range(len(self.replica_ports)):
            if mode in NULL_MODES:
                break
            h = hist(d[f"webhook-{i}"], "layer_locality_review_duration_seconds")
            review = _merge(review, h)
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
        }
        if mode not in ("stock", "baked") and mode not in NULL_MODES:
            out["placement"] = await self.placement(api, ns, mode)
        await self.delete_namespace(api, ns)
        print(f"round {index} {mode}: {bound}/{expected} bound in {t1 - t0:.1f} s "
              f"({out['pods_per_second']:.1f}/s); webhook p99 "
              f"{_ms(webhook.quantile(0.99))}, within 5 ms {_pct(webhook.share_within(0.005))};"
              f" pod create p50/p99 {_ms(pod_create.quantile(0.5))}/"
              f"{_ms(pod_create.quantile(0.99))}; algorithm p99 "
              f"{_ms(algorithm.quantile(0.99))}; pod watch {watch_bytes / 1e6:.1f} MB",
              flush=True)
        return out

    async def placement(self, api: Api, ns: str, mode: str) -> dict[str, Any]:
        listing = await api.request("GET", f"/api/v1/namespaces/{ns}/pods")
        seen: set[str] = set()
        steered = named = top_term = top_decision = 0
        patch_bytes: list[int] = []
        hostnames: list[int] = []
        for pod in listing["items"]:
            spec = pod.get("spec") or {}
            terms = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                     .get("preferredDuringSchedulingIgnoredDuringExecution") or [])
            app = (pod["metadata"].get("labels") or {}).get("app", "")
            if terms and mode == "opted-in" and app not in seen:
                seen.add(app)  # what the latest opted-in review gave this Deployment's pods
                self.baked[app] = (terms, (pod["metadata"].get("annotations") or {}).get(
                    "layer-locality.io/decision", ""))
            decision = (pod["metadata"].get("annotations") or {}).get(
                "layer-locality.io/decision")
            names: list[tuple[int, set[str]]] = []
            for term in terms:
                for e in term["preference"].get("matchExpressions", []):
                    if e.get("operator") == "In":
                        names.append((term["weight"], set(e.get("values", []))))
            if not names:
                continue
            steered += 1
            node = str(spec.get("nodeName"))
            every: set[str] = set().union(*(n for _, n in names))
            hostnames.append(len(every))
            patch_bytes.append(len(orjson.dumps(terms)) + len(decision or ""))
            named += node in every
            best = max(w for w, _ in names)
            top_term += any(node in n for w, n in names if w == best)
            if decision:
                top = [e.get("node") for e in orjson.loads(decision).get("top", [])]
                top_decision += node in top
        return {"pods": len(listing["items"]), "steered": steered, "on_named_node": named,
                "on_top_weight_node": top_term, "on_decision_top": top_decision,
                "hostnames_mean": sum(hostnames) / max(len(hostnames), 1),
                "added_bytes_mean": sum(patch_bytes) / max(len(patch_bytes), 1)}

    async def delete_namespace(self, api: Api, ns: str) -> None:
        await api.request("DELETE", f"/api/v1/namespaces/{ns}")
        for _ in range(600):
            # A bound pod's graceful deletion waits for its kubelet, and fake nodes have none:
            # the pods go at once (the terminating namespace admits no new ones).
            await api.request("DELETE", f"/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0")
            try:
                await api.request("GET", f"/api/v1/namespaces/{ns}")
            except Exception:
                return
            await asyncio.sleep(1.0)
        raise RuntimeError(f"namespace {ns} still there after 600 s")

    # -- the product's own API load, restarts -----------------------------------------------

    async def api_load(self, api: Api, insecure: Api) -> dict[str, Any]:
        for name, (namespace, sa) in FLOW_SCHEMAS.items():
            await api.request("POST", "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
                              flow_schema(name, namespace, sa), ok=(201, 409))
        # The node agent's ServiceAccount and RBAC as its component ships them (the host-mode
        # install leaves the agent out; its ValidatingAdmissionPolicy, which needs node-bound
        # tokens, stays out here too).
        c = self.cluster
        for doc in AGENT_MANIFESTS:
            await asyncio.to_thread(c.kubectl_run, ["apply", "-f", str(
                ROOT / "manifests/components/node-agent" / doc)])
        await asyncio.sleep(2.0)
        out: dict[str, Any] = {}
        # The same window with nothing of the product's writing: the API server's own baseline
        # (the controllers, the scheduler, the replicas' open watches).
        before, cpu0, t0 = await api.metrics(self.urls()["apiserver"], APISERVER_METRICS), \
            self.cpu(), time.monotonic()
        await asyncio.sleep(self.args.steady_seconds)
        after, cpu1, t1 = await api.metrics(self.urls()["apiserver"], APISERVER_METRICS), \
            self.cpu(), time.monotonic()
        out["idle"] = _load_window(delta(after, before), t1 - t0, cpu0, cpu1)
        rate = self.args.nodes / AGENT_RESYNC_SECONDS
        objects = self.nodelayers[:max(1, int(rate * self.args.steady_seconds))]
        tokens = await agent_tokens(api, objects)
        # No client certificate: the bearer token is who the agent is.
        agent_api = Api(self.cluster.plane.server, ssl.create_default_context(
            cafile=str(self.cluster.plane.pki.ca_cert)))
        before, cpu0, t0 = await api.metrics(self.urls()["apiserver"], APISERVER_METRICS), \
            self.cpu(), time.monotonic()
        try:
            agents = await agent_heartbeats(agent_api, objects, tokens, rate)
        finally:
            await agent_api.close()
        after, cpu1, t1 = await api.metrics(self.urls()["apiserver"], APISERVER_METRICS), \
            self.cpu(), time.monotonic()
        out["steady"] = _load_window(delta(after, before), t1 - t0, cpu0, cpu1)
        out["steady"].update(agents)
        # A relist of every replica: both restarted at once (a rollout, a network partition).
        apiserver = self.cluster.plane.processes["kube-apiserver"].pid
        rss0 = report.rss_kib(apiserver)
        before, cpu0, t0 = await api.metrics(self.urls()["apiserver"], APISERVER_METRICS), \
            self.cpu(), time.monotonic()
        peak = [rss0]
        sampling = True

        async def sample() -> None:
            while sampling:
                peak.append(report.rss_kib(apiserver))
                await asyncio.sleep(0.25)

        sampler = asyncio.create_task(sample())
        ready = await asyncio.gather(*(asyncio.to_thread(self.restart, i)
                                       for i in range(len(self.replica_ports))))
        sampling = False
        await sampler
        after, cpu1, t1 = await api.metrics(self.urls()["apiserver"], APISERVER_METRICS), \
            self.cpu(), time.monotonic()
        out["relist"] = _load_window(delta(after, before), t1 - t0, cpu0, cpu1)
        out["relist"]["ready_seconds"] = ready
        out["relist"]["apiserver_rss_mb"] = {"before": rss0 / 1024, "peak": max(peak) / 1024}
        return out

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
        """Stop replica i, start it again; seconds until its /readyz answers ready (nodes and
        pods listed: webhook/inventory/live.py). How long its NodeLayers took (they are
        watched on after ready) lands in self.result["nodelayers_synced_seconds"]."""
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
            self.result["scheduler_percentage_of_nodes_to_score"] = (
                configz.get("componentconfig") or {}).get("percentageOfNodesToScore")
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
            self.result["api_load"] = await self.api_load(api, insecure)
            restarts = [await asyncio.to_thread(self.restart, r % 2)
                        for r in range(self.args.restarts)]
            self.result["ready_after_restart_seconds"] = restarts
            print("ready after restart: " + ", ".join(f"{s:.1f}" for s in restarts) + " s",
                  flush=True)
        finally:
            await api.close()
            await insecure.close()
        return self.result

    def close(self) -> None:
        self.stop_proxy()
        if self.cluster is not None:
            self.cluster.down()


async def agent_tokens(api: Api, objects: Sequence[dict[str, Any]]) -> list[str]:
    """A token of the agent's ServiceAccount bound to each object's node (TokenRequest)."""
    namespace, account = FLOW_SCHEMAS["ll-agent"]
    tokens: list[str] = []
    for k in range(0, len(objects), 32):
        answers = await asyncio.gather(*(api.request(
            "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 3600, "boundObjectRef": {
                 "kind": "Node", "apiVersion": "v1", "name": o["metadata"]["name"]}}})
            for o in objects[k:k + 32]))
        tokens += [a["status"]["token"] for a in answers]
    return tokens


async def agent_heartbeats(agent_api: Api, objects: Sequence[dict[str, Any]],
                           tokens: Sequence[str], rate: float) -> dict[str, Any]:
    """Node agents' steady state at this scale: each node's NodeLayers heartbeat rewritten
    once per resync period, spread evenly over time, as webhook/agent/publish.Publisher writes
    it (GET, then PUT with the read resourceVersion), each node's write with a token bound to
    that node (the agent's ServiceAccount; its ValidatingAdmissionPolicy checks the node name
    the token carries) and the agent's user agent."""
    path = Bench._nodelayers_path()
    written = errors = 0
    started = time.monotonic()
    pending: list[asyncio.Task[None]] = []

    async def publish(obj: dict[str, Any], bearer: str) -> None:
        nonlocal written, errors
        headers = {"Authorization": f"Bearer {bearer}",
                   "User-Agent": "layer-locality-agent (bench stand-in)"}
        name = obj["metadata"]["name"]
        try:
            current = await agent_api.request("GET", f"{path}/{name}", headers=headers)
            body = dict(obj, metadata=dict(
                obj["metadata"], resourceVersion=current["metadata"]["resourceVersion"]),
                spec=dict(obj["spec"], heartbeat=datetime.now(UTC).strftime(
                    "%Y-%m-%dT%H:%M:%SZ")))
            await agent_api.request("PUT", f"{path}/{name}", body, headers=headers)
            written += 1
        except Exception as exc:
            errors += 1
            if errors <= 2:
                print(f"agent stand-in: {exc}", flush=True)

    for k, (obj, bearer) in enumerate(zip(objects, tokens, strict=True)):
        await asyncio.sleep(max(0.0, started + k / rate - time.monotonic()))
        pending.append(asyncio.create_task(publish(obj, bearer)))
    await asyncio.gather(*pending)
    return {"agent_writes": written, "agent_errors": errors, "agent_rate": rate}


def _load_window(d: dict[Any, float], seconds: float, cpu0: dict[str, float],
                 cpu1: dict[str, float]) -> dict[str, Any]:
    flows = by_label(d, "apiserver_flowcontrol_dispatched_requests_total", "flow_schema")
    lists = by_label(d, "apiserver_response_sizes_sum", "resource", verb="LIST")
    list_count = by_label(d, "apiserver_response_sizes_count", "resource", verb="LIST")
    watch = by_label(d, "apiserver_watch_events_sizes_sum", "resource")
    writes = by_label(d, "apiserver_request_total", "resource", verb="UPDATE")
    return {
        "seconds": seconds,
        "requests_per_second_by_flow_schema": {k: v / seconds for k, v in flows.items() if v},
        "list_bytes_by_resource": {k: v for k, v in lists.items() if v},
        "lists_by_resource": {k: v for k, v in list_count.items() if v},
        "watch_bytes_per_second_by_resource": {k: v / seconds for k, v in watch.items() if v},
        "updates_by_resource": {k: v for k, v in writes.items() if v},
        "cpu_seconds": cpu_delta(cpu0, cpu1),
    }


def cpu_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU spent between two readings by process name; a process started in between counts
    from zero."""
    out: dict[str, float] = {}
    for key, value in after.items():
        if key != "machine":
            name = key.split("@", 1)[0]
            out[name] = out.get(name, 0.0) + value - before.get(key, 0.0)
    return out


def _merge(a: Hist, b: Hist) -> Hist:
    buckets: dict[float, float] = dict(a.buckets)
    for bound, count in b.buckets:
        buckets[bound] = buckets.get(bound, 0.0) + count
    return Hist(tuple(sorted(buckets.items())), a.sum + b.sum, a.count + b.count)


def _machine_busy() -> float:
    """Seconds of CPU the whole machine spent busy so far (/proc/stat), all cores."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / 100.0


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 1000:.1f} ms"


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f} %"


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """Side-by-side figures and the targets, from the rounds."""
    rounds = result.get("rounds", [])
    by_mode: dict[str, list[dict[str, Any]]] = {"stock": [], "opted-in": []}
    for r in rounds:
        by_mode.setdefault(r["mode"], []).append(r)

    def vals(mode: str, *path: str) -> list[float]:
        out = []
        for r in by_mode[mode]:
            v: Any = r
            for p in path:
                v = v.get(p) if isinstance(v, dict) else None
            if isinstance(v, (int, float)):
                out.append(float(v))
        return out

    def ratio(*path: str, mode: str = "opted-in") -> list[float]:
        # Round r's opted-in against round r's stock: the same cluster, minutes apart.
        return [o / s for o, s in zip(vals(mode, *path), vals("stock", *path), strict=False) if s]

    tput = ratio("pods_per_second")
    algo = ratio("algorithm_ms", "p99")
    create = ratio("pod_create_ms", "p99")
    watch = ratio("pod_watch_bytes")
    within = vals("opted-in", "webhook_within_5ms")
    placed = [r["placement"] for r in by_mode["opted-in"] if "placement" in r]
    ready = result.get("ready_after_restart_seconds", [])
    up = result.get("cluster_up", {}).get("seconds")
    targets = [
        report.target("opted-in pods/s >= 0.95x stock", _span(tput, "x"),
                      bool(tput) and min(tput) >= 0.95),
        report.target(">= 99 % of webhook calls under 5 ms (API server's metric)",
                      _span([100 * w for w in within], " %"),
                      bool(within) and min(within) >= 0.99),
        report.target("steered pod-create p99 <= 1.2x stock", _span(create, "x"),
                      bool(create) and max(create) <= 1.2),
        report.target("scheduler algorithm p99 <= 1.1x stock", _span(algo, "x"),
                      bool(algo) and max(algo) <= 1.1),
        report.target("pod watch bytes <= 1.3x stock", _span(watch, "x"),
                      bool(watch) and max(watch) <= 1.3),
        report.target("cluster up with the nodes <= 30 s", f"{up:.1f} s" if up else "n/a",
                      bool(up) and up <= 30),
        report.target("ready after a restart <= 20 s", _span(ready, " s"),
                      bool(ready) and max(ready) <= 20),
    ]
    modes = {mode: {"throughput_ratio": ratio("pods_per_second", mode=mode),
                    "algorithm_p99_ratio": ratio("algorithm_ms", "p99", mode=mode),
                    "pod_create_p99_ratio": ratio("pod_create_ms", "p99", mode=mode),
                    "pod_watch_bytes_ratio": ratio("pod_watch_bytes", mode=mode),
                    "scheduler_cpu_per_pod_ratio": ratio("scheduler_cpu_ms_per_pod", mode=mode),
                    "webhook_within_5ms": vals(mode, "webhook_within_5ms"),
                    "placement": [r["placement"] for r in by_mode[mode] if "placement" in r]}
             for mode in by_mode if mode != "stock"}
    return {"by_mode": modes, "throughput_ratio": tput, "algorithm_p99_ratio": algo,
            "pod_create_p99_ratio": create, "pod_watch_bytes_ratio": watch,
            "webhook_within_5ms": within, "placement": placed, "targets": targets}


def _span(values: Sequence[float], unit: str) -> str:
    if not values:
        return "n/a"
    lo, hi = min(values), max(values)
    return f"{lo:.2f}{unit}" if lo == hi else f"{lo:.2f}-{hi:.2f}{unit}"


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
    result.update(summarize(result))
    result["machine"] = report.machine()
    result["code"] = report.source()
    rows = [(r["mode"], r["namespace"], f"{r['pods_per_second']:.1f}",
             f"{r['bind_latency']['p50_ms']:.0f}/{r['bind_latency']['p99_ms']:.0f}",
             _fmt(r["webhook_admission_ms"], "p50") + "/" + _fmt(r["webhook_admission_ms"], "p99"),
             _fmt(r["pod_create_ms"], "p50") + "/" + _fmt(r["pod_create_ms"], "p99"),
             _fmt(r["algorithm_ms"], "p50") + "/" + _fmt(r["algorithm_ms"], "p99"),
             f"{r['scheduler_cpu_ms_per_pod']:.2f}", f"{r['pod_watch_bytes'] / 1e6:.1f}")
            for r in result.get("rounds", [])]
    print(report.table(["mode", "ns", "pods/s", "bind p50/p99 ms", "webhook p50/p99 ms",
                        "pod create p50/p99 ms", "algorithm p50/p99 ms", "sched CPU ms/pod",
                        "pod watch MB"], rows))
    return result


def _fmt(d: dict[str, Any], key: str) -> str:
    v = d.get(key)
    return "n/a" if v is None else f"{v:.1f}"


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
    p.add_argument("--steady-seconds", type=float, default=STEADY_SECONDS)
    p.add_argument("--restarts", type=int, default=3)
    p.add_argument("--webhook-arg", action="append", default=[],
                   help="extra `serve` argument for both replicas (repeatable)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                   help="another opted-in mode, the replicas restarted with these extra `serve` "
                        "arguments, e.g. lean='--max-nodes 16' (repeatable)")
    p.add_argument("--percentage-of-nodes-to-score", type=int, default=None, metavar="N",
                   help="kube-scheduler's percentageOfNodesToScore (default: its adaptive one)")
    p.add_argument("--baked", action="store_true",
                   help="also a mode in a plain namespace whose Deployments carry, in their "
                        "template, the terms and decision an opted-in review gave them: the "
                        "bigger pod's cost at the API server without the webhook call")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="leave out the unrecorded warm-up rounds")
    p.add_argument("--null", action="store_true",
                   help="also modes with null webhooks, behind the balancer and direct (the floor)")
    p.add_argument("--keep", action="store_true", help="keep the run's directory")
    return p.parse_args(list(argv))


def main(argv: list[str] | None = None) -> int:
    result = run(argv=argv if argv is not None else sys.argv[1:])
    path = report.write("controlplane", result)
    print(report.targets_table([("controlplane", t) for t in result["targets"]]))
    print(f"-> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
