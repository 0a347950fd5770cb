"""The live inventory as an operator runs it: the real `python -m webhook serve` process
(kubeconfig -> the stand-in API server in a process of its own, `--catalog --offline`),
syncing N nodes x 50 images and 30 running pods per node through the real `kubernetes`
client. Measured from outside, on /proc of the server: seconds from process start until
/readyz answers 200 (nodes and the first pod list synced), VmRSS then and after settling,
and the CPU (utime + stime) it spends over a window of continuous pod and node events.
Also, for the breakdown: an in-process profile (tracemalloc's top allocation sites after
sync) and the RSS of the heavy imports alone, each in a fresh process.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import subprocess
import tempfile
import time
import tracemalloc
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench import report
from bench.report import REPO
from tests.kit import workload
from webhook.devcluster import processes as procs
from webhook.devcluster.processes import free_port
from webhook.report.promread import TLS, scrape
from webhook.report.series import total
from webhook.serving.certs import generate

PODS_PER_NODE = 30
WARMUP_SECONDS = 5.0
SETTLE_SECONDS = 5.0


def _http(url: str, method: str = "GET") -> dict[str, Any]:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    with urllib.request.urlopen(request, timeout=60) as response:
        result: dict[str, Any] = orjson.loads(response.read())
        return result


def apiserver_process_argv(nodes: int, pods: int, nodelayers: bool = False,
                           extra: Sequence[str] = ()) -> list[str]:
    return procs.python("-m", "tests.kit.apiserver_process", "--nodes", str(nodes),
                        "--pods", str(pods), *(["--nodelayers"] if nodelayers else []), *extra)


@dataclass(frozen=True)
class StandIn:
    """The stand-in API server process, serving."""

    port: int
    pid: int

    def post(self, path: str) -> dict[str, Any]:
        return _http(f"http://127.0.0.1:{self.port}{path}", "POST")

    def get(self, path: str) -> dict[str, Any]:
        return _http(f"http://127.0.0.1:{self.port}{path}")


@contextlib.contextmanager
def stand_in(argv: Sequence[str], log: Path) -> Iterator[StandIn]:
    """The stand-in process (apiserver_process_argv), once it says READY."""
    with procs.started(argv, log, stdout_pipe=True, cwd=REPO) as api:
        port = int(procs.read_line(api, timeout=3600).split()[1])
        yield StandIn(port, api.pid)


@dataclass(frozen=True)
class Served:
    """`python -m webhook serve` against a stand-in, ready (and every NodeLayers indexed)."""

    pid: int
    port: int
    ca: Path
    argv: list[str]
    readyz_seconds: float  # from start until /readyz answered 200
    ready_seconds: float  # ... and every NodeLayers object counted fresh (= readyz without)
    cpu_ready: float  # the server's CPU seconds then
    api_cpu_ready: float  # the stand-in's CPU seconds then (its whole life)


@contextlib.contextmanager
def served(api: StandIn, catalog: bytes, logs: Path, tag: str,
           nodelayers: int = 0) -> Iterator[Served]:
    """One fresh server process (its own certificates for 127.0.0.1, the catalog offline) on
    `api`; yielded once ready and, with `nodelayers`, once that many objects are indexed."""
    from tests.kit.apiserver import FakeApiServer

    (logs / "catalog.json").write_bytes(catalog)
    files = generate("layer-locality", "bench", logs / "certs", extra_sans=["127.0.0.1"])
    fake = FakeApiServer()
    fake.port = api.port
    kubeconfig = fake.kubeconfig(logs / "kubeconfig")
    port = free_port()
    argv = procs.python("-m", "webhook", "serve", "--listen", f"127.0.0.1:{port}",
                        "--tls-cert", str(files.cert), "--tls-key", str(files.key),
                        "--catalog", str(logs / "catalog.json"), "--offline",
                        "--kubeconfig", str(kubeconfig))
    started = time.monotonic()
    with procs.started(argv, logs / f"serve-{tag}.log", cwd=REPO) as server:
        procs.wait_https(f"https://127.0.0.1:{port}/readyz", files.ca_cert, server,
                         timeout=3600)
        readyz = time.monotonic() - started
        if nodelayers:
            _wait_nodelayers(f"https://127.0.0.1:{port}/metrics", files.ca_cert, nodelayers,
                             server, timeout=3600)
        ready = time.monotonic() - started
        yield Served(server.pid, port, files.ca_cert, argv, readyz, ready,
                     report.cpu_seconds(server.pid), report.cpu_seconds(api.pid))


def measure_serve(nodes: int, load_seconds: float, logs: Path, pod_rate: float = 50.0,
                  node_rate: float = 5.0, pods_per_node: int = PODS_PER_NODE,
                  nodelayers: bool = False) -> dict[str, Any]:
    """One fresh server process against a fresh stand-in API server; with `nodelayers`, a
    NodeLayers object per node too, and "ready" waits until every one is indexed (the
    nodelayers gauge, read from /metrics)."""
    pods = nodes * pods_per_node
    catalog = workload.catalog_bytes(workload.build_world())
    tag = f"{nodes}{'-nodelayers' if nodelayers else ''}"
    with stand_in(apiserver_process_argv(nodes, pods, nodelayers),
                  logs / f"apiserver-{tag}.log") as api, \
         served(api, catalog, logs, tag, nodes if nodelayers else 0) as server:
        pid = server.pid
        rss_ready = report.rss_kib(pid)
        time.sleep(SETTLE_SECONDS)
        rss_settled = report.rss_kib(pid)
        api.post(f"/bench/load?pods={pod_rate}&nodes={node_rate}")
        time.sleep(WARMUP_SECONDS)
        cpu = report.cpu_seconds
        sent0, cpu0, t0 = api.get("/bench/stats"), cpu(pid), time.monotonic()
        time.sleep(load_seconds)
        sent1, cpu1, t1 = api.get("/bench/stats"), cpu(pid), time.monotonic()
        rss_load = report.rss_kib(pid)
        peak = report.status_kib(pid, "VmHWM")
    wall = t1 - t0
    return {
        "nodes": nodes, "pods": pods, "nodelayers": nodes if nodelayers else 0,
        "ready_seconds": server.ready_seconds,
        # CPU spent until ready by the server (all its threads) and by the stand-in API server
        # (generating 150,000 pods): on 2 shared cores the sum bounds the wall time
        "server_cpu_to_ready_s": server.cpu_ready, "api_cpu_to_ready_s": server.api_cpu_ready,
        "rss_ready_mb": report.mb(rss_ready), "rss_settled_mb": report.mb(rss_settled),
        "rss_after_load_mb": report.mb(rss_load), "rss_peak_mb": report.mb(peak),
        "load_seconds": wall,
        "pod_events_per_second": (sent1["pods"] - sent0["pods"]) / wall,
        "node_events_per_second": (sent1["nodes"] - sent0["nodes"]) / wall,
        "cpu_share": (cpu1 - cpu0) / wall,
        "command": " ".join(server.argv[1:]),
    }


def _wait_nodelayers(url: str, ca: Path, objects: int, server: Any,
                     timeout: float = 900) -> None:
    """Until the server's gauge counts `objects` fresh NodeLayers objects (each indexed)."""
    tls = TLS(ca=str(ca))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError("the server exited while syncing NodeLayers")
        fresh = total(scrape(url, tls), "layer_locality_nodelayers_objects", state="fresh")
        if fresh == objects:
            return
        time.sleep(0.1)
    raise TimeoutError("NodeLayers never all indexed")


def stand_in_live(api_port: int, node_images: bool = False) -> Any:
    """A LiveInventory wired as `serve` wires it (telemetry on; with `node_images`, the
    NodeLayers source beside the catalog), against the stand-in API server on `api_port`."""
    from tests.kit.apiserver import FakeApiServer
    from webhook.inventory.kube import core_api
    from webhook.inventory.live import LiveInventory
    from webhook.inventory.nodeimages import NodeImagesSource
    from webhook.serving.metrics import Metrics
    from webhook.telemetry.recorder import recorder_for

    world = workload.build_world()
    fake = FakeApiServer()
    fake.port = api_port
    with tempfile.TemporaryDirectory() as tmp:
        api = core_api(str(fake.kubeconfig(Path(tmp) / "kubeconfig")), in_cluster=False)
    metrics = Metrics().live_inventory()
    if not node_images:
        return LiveInventory(api, (world.catalog,), metrics=metrics,
                             telemetry=recorder_for(metrics.telemetry))
    source = NodeImagesSource()
    return LiveInventory(api, (world.catalog, source), metrics=metrics,
                         telemetry=recorder_for(metrics.telemetry), node_images=source)


async def profile_sync(api_port: int, pods: int, top: int = 25) -> dict[str, Any]:
    """In-process LiveInventory (telemetry on, as `serve` runs it) synced from the stand-in
    API server under tracemalloc: the top allocation sites still held after sync."""
    live = stand_in_live(api_port)
    gc.collect()
    rss_before = report.rss_kib()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    started = time.perf_counter()
    task = asyncio.ensure_future(live.run())
    await live.wait_ready()
    while len(live._pods) < pods:  # noqa: ASYNC110 - readiness may not wait for pods
        await asyncio.sleep(0.1)
    synced = time.perf_counter() - started
    gc.collect()
    after = tracemalloc.take_snapshot()
    traced, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    rss_after = report.rss_kib()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    stats = after.compare_to(before, "lineno")[:top]
    return {
        "rss_before_mb": report.mb(rss_before), "rss_after_mb": report.mb(rss_after),
        "traced_mb": traced / 2**20, "sync_seconds": synced, "nodes": len(live.index),
        "pods": len(live._pods),
        "top": [[str(s.traceback[0]), s.size_diff / 2**20, s.count_diff] for s in stats],
    }


def import_costs() -> dict[str, float]:
    """RSS added by importing each heavy dependency alone, each in a fresh process."""
    costs = {}
    for module in ("aiohttp", "kubernetes.client", "prometheus_client", "orjson", "msgspec",
                   "cryptography.x509", "webhook.cli"):
        code = ("import gc, sys; from bench.report import rss_kib; a = rss_kib(); "
                f"import {module}; gc.collect(); print(rss_kib() - a)")
        out = subprocess.run(procs.python("-c", code), cwd=REPO, check=True,
                             capture_output=True, text=True).stdout
        costs[module] = int(out.strip() or 0) / 1024
    return costs
