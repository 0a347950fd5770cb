"""3. Inventory at 5,000 nodes x 50 images (and 20,000): resident memory, sync time and
steady-state CPU. Each measurement runs in a fresh process so that its VmRSS holds only what
it built:

- `index`: LayerIndex.upsert alone (the structure reviews read);
- `live`: LiveInventory._apply_nodes for every Node object (what a list or watch event does:
  NodeInfo extraction, image -> layers lookup, index update); then the cost per event for a
  node whose images changed and for one whose status changed but not its images (heartbeat);
- `serve` (bench/served/inventory_serve.py): the real `python -m webhook serve` process with a
  kubeconfig pointing at the stand-in API server (tests/kit/apiserver_process.py, a process of
  its own) holding N nodes and 30 running pods per node (tests/kit/running_pods.py), synced
  through the real `kubernetes` client: seconds until /readyz is OK (nodes and the first pod list),
  VmRSS then and settled, and CPU over a window of 50 pod + 5 node events/s.
- `--profile` (tracemalloc's top sites after an in-process sync) and `--imports` (RSS of
  each heavy import alone) explain where the memory goes;
- `--sync [--nodelayers]`: the live sync in process, wired as `serve` wires it (telemetry on,
  the NodeLayers source), against the stand-in with 30 running pods a node (and a NodeLayers
  object per node): seconds until nodes and pods are listed and until every NodeLayers object
  is indexed, and the CPU of each process; with BENCH_PROFILE=1 a cProfile of the sync
  (stderr: where the ready time goes).
"""
from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from bench import report
from bench.report import REPO
from bench.served import inventory_serve
from tests.kit import workload
from webhook.devcluster import processes as procs
from webhook.inventory.live import LiveInventory

TARGET_RSS_MB = 150.0  # at 5,000 nodes, with 150,000 running pods watched
EVENTS = 2_000


def _child_index(nodes: int) -> dict[str, Any]:
    world = workload.build_world()
    gc.collect()
    before = report.rss_kib()
    started = time.perf_counter()
    index = workload.build_index(world, nodes)
    layers = index.layer_count  # a read: the bits of nodes added are set by then
    elapsed = time.perf_counter() - started
    gc.collect()
    after = report.rss_kib()
    return {"nodes": len(index), "layers": layers, "build_seconds": elapsed,
            "rss_before_mb": report.mb(before), "rss_after_mb": report.mb(after),
            "delta_mb": report.mb(after - before)}


def _timed(calls: list[Any], fn: Any) -> dict[str, float]:
    samples = []
    clock = time.perf_counter
    for args in calls:
        started = clock()
        fn(*args)
        samples.append(clock() - started)
    return report.summary_ms(samples)


def _child_live(nodes: int) -> dict[str, Any]:
    world = workload.build_world()
    live = LiveInventory(None, (world.catalog,))
    gc.collect()
    before = report.rss_kib()
    started = time.perf_counter()
    for obj in workload.node_objects(world, nodes):
        live._apply_nodes("ADDED", obj)
    elapsed = time.perf_counter() - started
    gc.collect()
    after = report.rss_kib()
    result: dict[str, Any] = {
        "nodes": len(live.index), "layers": live.index.layer_count, "apply_seconds": elapsed,
        "rss_before_mb": report.mb(before), "rss_after_mb": report.mb(after),
        "delta_mb": report.mb(after - before),
    }
    # Per-event cost: the same node objects again, changed or not.
    rng = random.Random(99)
    current = [obj for _, obj in zip(range(EVENTS), workload.node_objects(world, nodes),
                                     strict=False)]
    unchanged, changed = [], []
    for k, obj in enumerate(current):
        same = orjson.loads(orjson.dumps(obj))
        same["metadata"]["resourceVersion"] = "2"
        same["status"]["conditions"][-1]["lastHeartbeatTime"] = "2025-01-01T00:01:00Z"
        unchanged.append(same)
        other = orjson.loads(orjson.dumps(same))
        image = world.apps[(k * 7 + rng.randrange(len(world.apps))) % len(world.apps)]
        other["status"]["images"][-1] = {"names": list(workload.reported_names(image)),
                                         "sizeBytes": 1}
        changed.append(other)
    # The watch path adds decoding the event line.
    lines = [orjson.dumps({"type": "MODIFIED", "object": o}) for o in unchanged]

    def decode_apply(line: bytes) -> None:
        event = orjson.loads(line)
        live._apply_nodes(event["type"], event["object"])

    result["event_unchanged"] = _timed([("MODIFIED", o) for o in unchanged], live._apply_nodes)
    result["event_unchanged_with_decode"] = _timed([(line,) for line in lines], decode_apply)
    result["event_changed"] = _timed([("MODIFIED", o) for o in changed], live._apply_nodes)
    # ... and back: the images change again, now with the decode.
    result["event_changed_with_decode"] = _timed([(line,) for line in lines], decode_apply)
    result["event_bytes"] = sum(len(line) for line in lines) / len(lines)
    # LayerIndex.upsert alone, for a changed and an unchanged node.
    index = live.index
    infos = [index.node(o["metadata"]["name"]) for o in current]
    same_layers = [(info, index.layers_of(info.name)) for info in infos if info is not None]
    result["upsert_unchanged"] = _timed(same_layers, index.upsert)
    swapped = [(info, set(layers) ^ {workload.sha(f"extra {k}")})
               for k, (info, layers) in enumerate(same_layers)]
    result["upsert_changed"] = _timed(swapped, index.upsert)
    return result


async def _child_sync(nodes: int, api_port: int) -> dict[str, Any]:
    from tests.kit.apiserver import FakeApiServer
    from webhook.inventory.kube import core_api

    world = workload.build_world()
    fake = FakeApiServer()
    fake.port = api_port
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = fake.kubeconfig(Path(tmp) / "kubeconfig")
        api = core_api(str(kubeconfig), in_cluster=False)
    live = LiveInventory(api, (world.catalog,))
    gc.collect()
    before = report.rss_kib()
    started = time.perf_counter()
    task = asyncio.ensure_future(live.run())
    await live.wait_ready()
    sync_seconds = time.perf_counter() - started
    gc.collect()
    after = report.rss_kib()
    await asyncio.sleep(1.0)  # the watches open
    burst_started = time.perf_counter()
    url = f"http://127.0.0.1:{api_port}/bench/burst?count={EVENTS}"
    answer = await asyncio.to_thread(_post, url)
    sentinel = answer["sentinel"]
    while live.index.node(sentinel) is None:  # noqa: ASYNC110 - polling is the measurement
        await asyncio.sleep(0.001)
    burst_seconds = time.perf_counter() - burst_started
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return {"nodes": len(live.index), "sync_seconds": sync_seconds,
            "rss_before_mb": report.mb(before), "rss_after_sync_mb": report.mb(after),
            "delta_mb": report.mb(after - before), "burst_events": EVENTS + 1,
            "burst_seconds": burst_seconds, "events_per_second": (EVENTS + 1) / burst_seconds}


def _post(url: str) -> dict[str, Any]:
    request = urllib.request.Request(url, method="POST", data=b"")
    with urllib.request.urlopen(request, timeout=120) as response:
        result: dict[str, Any] = orjson.loads(response.read())
        return result


async def _sync_in_process(nodes: int, api_port: int, nodelayers: bool) -> dict[str, Any]:
    """The live sync as `serve` runs it (webhook/serving/wiring.py), in this process."""
    from bench.served.inventory_serve import stand_in_live
    from webhook import memtrim

    memtrim.tune_malloc()
    live = stand_in_live(api_port, node_images=True)
    profile = None
    if os.environ.get("BENCH_PROFILE"):
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    started, cpu = time.perf_counter(), time.process_time()
    task = asyncio.ensure_future(live.run())
    marks: dict[str, float] = {}
    wanted = nodes if nodelayers else 0
    while len(marks) < 2:
        now = time.perf_counter() - started
        if "ready_seconds" not in marks and live.ready:
            marks["ready_seconds"] = now
        if "nodelayers_seconds" not in marks and live.nodelayers.objects >= wanted:
            marks["nodelayers_seconds"] = now
        await asyncio.sleep(0.02)
    marks["cpu_seconds"] = time.process_time() - cpu
    if profile is not None:
        import pstats

        profile.disable()
        stats = pstats.Stats(profile, stream=sys.stderr)
        stats.sort_stats("tottime").print_stats(30)
        stats.sort_stats("cumulative").print_stats(40)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return {"nodes": len(live.index), "pods": len(live._pods),
            "nodelayers": live.nodelayers.objects, **marks}


def sync_in_process(nodes: int, nodelayers: bool, logs: Path) -> dict[str, Any]:
    """`--sync`: the stand-in (30 running pods a node, NodeLayers too) and the in-process
    sync; the stand-in's CPU until then is the other half of the ready time on 2 cores."""
    argv = inventory_serve.apiserver_process_argv(nodes, nodes * inventory_serve.PODS_PER_NODE,
                                         nodelayers)
    with procs.started(argv, logs / "apiserver-sync.log", stdout_pipe=True, cwd=REPO) as api:
        port = int(procs.read_line(api, timeout=600).split()[1])
        api_cpu = report.cpu_seconds(api.pid)
        result = asyncio.run(_sync_in_process(nodes, port, nodelayers))
        result["api_cpu_seconds"] = report.cpu_seconds(api.pid) - api_cpu
    return result


def _child(mode: str, nodes: int, api_port: int) -> dict[str, Any]:
    if mode == "index":
        return _child_index(nodes)
    if mode == "live":
        return _child_live(nodes)
    return asyncio.run(_child_sync(nodes, api_port))


def _run_child(mode: str, nodes: int, log: Path, api_port: int = 0) -> dict[str, Any]:
    argv = procs.python("-m", "bench.served.inventory", "--child", mode, "--nodes", str(nodes),
                        "--api-port", str(api_port))
    with procs.started(argv, log, stdout_pipe=True, cwd=REPO) as proc:
        line = procs.read_line(proc, timeout=600)
    result: dict[str, Any] = orjson.loads(line)
    return result


def _target(text: str, measured: str, met: bool, why: str) -> dict[str, Any]:
    return {"target": text, "measured": measured, "met": met, "why": "" if met else why}


def _serve_rows(runs: list[dict[str, Any]]) -> None:
    print(report.table(
        ["serve process", "pods", "ready s", "RSS ready MB", "RSS settled MB",
         "RSS after load MB", "pod ev/s", "node ev/s", "CPU % of a core"],
        [[f"{r['nodes']} nodes" + (" + NodeLayers" if r.get("nodelayers") else ""), r["pods"],
          r["ready_seconds"], r["rss_ready_mb"],
          r["rss_settled_mb"], r["rss_after_load_mb"], r["pod_events_per_second"],
          r["node_events_per_second"], 100 * r["cpu_share"]] for r in runs]))


def targets(runs: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Runs by key: "5000" (nodes and pods), "5000+nodelayers", "20000+nodelayers"."""
    out = []
    small, agent = runs.get("5000"), runs.get("5000+nodelayers")
    large = runs.get("20000+nodelayers")
    if small is not None:
        rss = max(small["rss_ready_mb"], small["rss_settled_mb"])
        out.append(_target("RSS at 5,000 nodes x 50 images + 150,000 running pods <= 150 MB",
                           f"{rss:.1f} MB", rss <= 150,
                           "~89 MB before any inventory (imports ~65 MB: kubernetes client, "
                           "aiohttp, prometheus_client; catalog, TLS, threads); Python data "
                           "~2.5 KB/node + ~230 B/pod (~49 MB) + heap slack"))
        out.append(_target("Live sync of 5,000 nodes + 150,000 pods ready <= 30 s",
                           f"{small['ready_seconds']:.1f} s", small["ready_seconds"] <= 30,
                           "decode of 900 MB of pod JSON plus the stand-in API server's "
                           "generation, on 2 shared cores"))
        cpu = 100 * small["cpu_share"]
        out.append(_target("Steady state, 50 pod ev/s + 5 node ev/s <= 10% of one core",
                           f"{cpu:.1f}%", cpu <= 10, "per-event decode cost"))
    if agent is not None:
        rss = max(agent["rss_ready_mb"], agent["rss_settled_mb"])
        out.append(_target("RSS with NodeLayers for every node (300 layers) + 150,000 pods, "
                           "5,000 nodes <= 200 MB", f"{rss:.1f} MB", rss <= 200,
                           "docs/performance.md: where the memory goes"))
        if small is not None:
            per_node = 1024 * (rss - max(small["rss_ready_mb"], small["rss_settled_mb"])) / 5000
            out.append(_target("NodeLayers cost per node (with - without, same serve) <= 8 KB",
                               f"{per_node:.1f} KB", per_node <= 8,
                               "the parsed objects and the heap their list leaves behind"))
        out.append(_target("Live sync of 5,000 nodes + 150,000 pods + 5,000 NodeLayers ready "
                           "<= 20 s", f"{agent['ready_seconds']:.1f} s",
                           agent["ready_seconds"] <= 20,
                           "decode and validation of 240 MB of NodeLayers JSON and 900 MB of "
                           "pod JSON in one Python process, the stand-in API server on the "
                           "second core: docs/performance.md"))
    if large is not None:
        rss = max(large["rss_ready_mb"], large["rss_settled_mb"])
        out.append(_target("RSS at 20,000 nodes with NodeLayers + 600,000 running pods "
                           "<= 600 MB", f"{rss:.1f} MB", rss <= 600,
                           "per node and per pod Python data over a ~89 MB base"))
    return out


def run(quick: bool = False, nodes: int = 5_000, sync: bool = True,
        large: int = 20_000) -> dict[str, Any]:
    logs = Path(tempfile.mkdtemp(prefix="bench-inventory-"))
    index = _run_child("index", nodes, logs / "index.log")
    live = _run_child("live", nodes, logs / "live.log")
    served: dict[str, dict[str, Any]] = {}
    synced: dict[str, Any] | None = None
    if sync:
        # Nodes only, in process: the watch's throughput for a burst of node changes.
        argv = procs.python("-m", "tests.kit.apiserver_process", "--nodes", str(nodes))
        with procs.started(argv, logs / "apiserver.log", stdout_pipe=True, cwd=REPO) as api:
            port = int(procs.read_line(api, timeout=300).split()[1])
            synced = _run_child("sync", nodes, logs / "sync.log", api_port=port)
        load = 30.0 if quick else 60.0
        runs = [(nodes, False), (nodes, True)] + ([] if quick else [(large, True)])
        for size, agents in runs:
            served[f"{size}{'+nodelayers' if agents else ''}"] = inventory_serve.measure_serve(
                size, load, logs, nodelayers=agents)
    print(f"\n[inventory] {nodes} nodes x 50 images, fresh child process per measurement")
    rows = [["LayerIndex only (upsert)", index["rss_before_mb"], index["rss_after_mb"],
             index["delta_mb"], f"{index['build_seconds']:.2f}s build"],
            ["LiveInventory._apply_nodes", live["rss_before_mb"], live["rss_after_mb"],
             live["delta_mb"], f"{live['apply_seconds']:.2f}s apply"]]
    print(report.table(["what", "RSS before MB", "RSS after MB", "delta MB", "time"], rows))
    print(report.table(
        ["per node event", "p50 ms", "p99 ms", "mean ms"],
        [[name, live[key]["p50_ms"], live[key]["p99_ms"], live[key]["mean_ms"]] for name, key in (
            ("_apply_nodes, images changed", "event_changed"),
            ("_apply_nodes, heartbeat only", "event_unchanged"),
            ("decode + _apply_nodes, heartbeat", "event_unchanged_with_decode"),
            ("decode + _apply_nodes, images changed", "event_changed_with_decode"),
            ("LayerIndex.upsert, changed", "upsert_changed"),
            ("LayerIndex.upsert, unchanged", "upsert_unchanged"))]))
    if synced:
        print(f"watch burst: {synced['burst_events']} node events through the kubernetes client "
              f"in {synced['burst_seconds']:.2f}s = {synced['events_per_second']:.0f} events/s")
    if served:
        _serve_rows(list(served.values()))
    rss = served[str(nodes)]["rss_settled_mb"] if served else live["rss_after_mb"]
    return {"nodes": nodes, "index": index, "live": live, "sync": synced,
            "serve": served,
            "target_rss_mb": TARGET_RSS_MB, "rss_mb": rss,
            "met": all(t["met"] for t in found) if (found := targets(served)) else
            rss <= TARGET_RSS_MB, "targets": found, "quick": quick}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.served.inventory")
    parser.add_argument("--child", choices=("index", "live", "sync"))
    parser.add_argument("--serve", action="store_true",
                        help="only the serve-process measurement at --nodes (30 pods a node)")
    parser.add_argument("--profile", action="store_true",
                        help="tracemalloc's top allocation sites after an in-process sync")
    parser.add_argument("--imports", action="store_true", help="RSS of the heavy imports")
    parser.add_argument("--sync", action="store_true",
                        help="the live sync in process (BENCH_PROFILE=1: cProfile, stderr)")
    parser.add_argument("--nodelayers", action="store_true",
                        help="with --serve or --sync: a NodeLayers object per node too")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--load-seconds", type=float, default=60.0)
    parser.add_argument("--pods-per-node", type=int, default=inventory_serve.PODS_PER_NODE,
                        help="with --serve: 0 measures the nodes alone")
    parser.add_argument("--api-port", type=int, default=0)
    args = parser.parse_args(argv)
    if args.child:
        result = _child(args.child, args.nodes, args.api_port)
    elif args.serve:
        logs = Path(tempfile.mkdtemp(prefix="bench-inventory-"))
        result = inventory_serve.measure_serve(args.nodes, args.load_seconds, logs,
                                               pods_per_node=args.pods_per_node,
                                               nodelayers=args.nodelayers)
        _serve_rows([result])
        key = f"{args.nodes}{'+nodelayers' if args.nodelayers else ''}"
        result["targets"] = targets({key: result})
    elif args.sync:
        logs = Path(tempfile.mkdtemp(prefix="bench-inventory-"))
        result = sync_in_process(args.nodes, args.nodelayers, logs)
    elif args.profile:
        pods = args.nodes * inventory_serve.PODS_PER_NODE
        logs = Path(tempfile.mkdtemp(prefix="bench-inventory-"))
        with procs.started(inventory_serve.apiserver_process_argv(args.nodes, pods),
                           logs / "apiserver.log", stdout_pipe=True, cwd=REPO) as api:
            port = int(procs.read_line(api, timeout=600).split()[1])
            result = asyncio.run(inventory_serve.profile_sync(port, pods))
        for site, mb, count in result["top"]:
            print(f"{mb:8.2f} MB {count:9d}  {site}", file=sys.stderr)
    else:
        result = inventory_serve.import_costs()
    sys.stdout.write(orjson.dumps(result).decode() + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
