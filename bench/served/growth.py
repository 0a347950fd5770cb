"""How the cost grows (issue 49, item 1): the real `python -m webhook serve` against the
stand-in API server (tests/kit/apiserver_process.py, a process of its own) at several node
counts, default 1,000, 5,000, 20,000 and 65,000 nodes with 30 running pods a node (an
override per size: `--pods-per-node-at 65000=10`), a NodeLayers object per node, the agents'
layer labels on every Node, and one node in four an accelerator node holding the large
synthetic family (tests/kit/accelerators.py) in its status and its NodeLayers object.

Per size, one stand-in process:

1. the source alone (growth_source.py): a minimal client lists Nodes, pods and NodeLayers in
   pages as the webhook does; its wall and the stand-in's CPU show what the source costs;
2. the served webhook (inventory_serve.served): seconds until /readyz and until every
   NodeLayers object is indexed, RSS then; the stand-in's CPU meanwhile (its share);
3. CPU per event, in separate windows so each kind's cost is its own: an idle window (the
   process's own background CPU rate), a window of node events only, one of pod events only;
   each window's CPU minus the idle rate, over the events sent. The windows run at the size's
   rate or at a floor (NODE_FLOOR, POD_FLOOR events/s) if higher: at 1,000 nodes the size's
   rates send too few events to stand above the idle CPU;
4. churn: pod and node events at the size's rates (`--pod-events-per-node`,
   `--node-events-per-node`: 50 and 5 a second at 5,000 nodes, the inventory benchmark's)
   for `--churn-seconds` while the load generator (loadgen.py) sends AdmissionReviews at a
   fixed rate (`--review-rate`) over TLS: review latency p50/p99, the patch's bytes, and
   RSS after the churn.

The agents' Leases are not served: the stand-in has no coordination.k8s.io API (the webhook
finds none, logs it once and judges NodeLayers objects by their heartbeat, as with agents
older than Leases). Then the curve (growth_fit.py): log-log slopes, memory per node and per
pod, the targets, and with `--plot PATH` the figure. Results: bench/results/growth.json.

    python -m bench.served.growth [--sizes 1000,5000,20000,65000] [--churn-seconds 600]
        [--pods-per-node 30] [--pods-per-node-at 65000=10] [--plot docs/images/growth.png]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from bench import report
from bench.served import growth_fit, growth_source
from bench.served.e2e_clients import run_loadgen
from bench.served.inventory_serve import StandIn, apiserver_process_argv, served, stand_in
from tests.kit import workload
from tests.kit.apiserver_process import ACCELERATOR_EVERY

NODE_FLOOR = 10.0  # node events/s at least in the node window
POD_FLOOR = 100.0  # pod events/s at least in the pod window
WARMUP_SECONDS = 2.0  # after new rates, before a window counts
LEASES_NOTE = ("agent Leases: not served by the stand-in API server (no coordination.k8s.io "
               "API in tests/kit/apiserver.py); the webhook finds none")


@dataclass
class Options:
    sizes: list[int] = field(default_factory=lambda: [1_000, 5_000, 20_000, 65_000])
    pods_per_node: int = 30
    pods_per_node_at: dict[int, int] = field(default_factory=dict)
    churn_seconds: float = 600.0
    window_seconds: float = 60.0
    review_rate: float = 20.0
    pod_events_per_node: float = 0.01  # 50/s at 5,000 nodes
    node_events_per_node: float = 0.001  # 5/s at 5,000 nodes
    layer_labels: bool = True
    accelerators: bool = True
    plot: Path | None = None

    @classmethod
    def quick(cls) -> Options:
        """`python -m bench growth --quick`: one small size, short windows."""
        return cls(sizes=[1_000], churn_seconds=20.0, window_seconds=10.0)

    def ppn(self, nodes: int) -> int:
        return self.pods_per_node_at.get(nodes, self.pods_per_node)


def review_bodies(world: workload.World, count: int = 200) -> list[str]:
    """The reviewed pods: the usual two-container pods (workload.two_container_pods), and in
    one of four the application image replaced by a tag of the large family."""
    family = [image.ref for image in world.accelerators if "/cuda:" not in image.ref]
    bodies = []
    for i, pod in enumerate(workload.two_container_pods(world, count, seed=5)):
        if family and i % 4 == 0:
            pod["spec"]["containers"][0]["image"] = family[i // 4 % len(family)]
        bodies.append(orjson.dumps(
            workload.review_doc(pod, f"00000000-0000-4000-9000-{i:012d}")).decode())
    return bodies


def _window(api: StandIn, pid: int, pods: float, nodes: float,
            seconds: float) -> dict[str, float]:
    """The server's CPU over `seconds` with the stand-in sending these rates (after a warmup)."""
    api.post(f"/bench/load?pods={pods}&nodes={nodes}")
    time.sleep(WARMUP_SECONDS)
    sent0, cpu0, t0 = api.get("/bench/stats"), report.cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    sent1, cpu1, t1 = api.get("/bench/stats"), report.cpu_seconds(pid), time.monotonic()
    return {"seconds": t1 - t0, "cpu_seconds": cpu1 - cpu0,
            "pod_events": sent1["pods"] - sent0["pods"],
            "node_events": sent1["nodes"] - sent0["nodes"]}


def _per_event_ms(window: dict[str, float], idle_rate: float, kind: str) -> float:
    events = window[kind]
    if not events:
        return float("nan")
    return 1000 * max(0.0, window["cpu_seconds"] - idle_rate * window["seconds"]) / events


def measure_size(nodes: int, options: Options, logs: Path) -> dict[str, Any]:
    """One size: a fresh stand-in, the source alone, then a fresh served webhook on it."""
    ppn = options.ppn(nodes)
    pods = nodes * ppn
    world = workload.build_world(accelerators=options.accelerators)
    extra = [*(["--accelerators"] if options.accelerators else []),
             *(["--layer-labels"] if options.layer_labels else [])]
    pod_rate = options.pod_events_per_node * nodes
    node_rate = options.node_events_per_node * nodes
    bodies = logs / "bodies.json"
    bodies.write_bytes(orjson.dumps(review_bodies(world)))
    with stand_in(apiserver_process_argv(nodes, pods, True, extra),
                  logs / f"apiserver-{nodes}.log") as api:
        source = growth_source.measure_source(api.port, api.pid, nodelayers=True)
        api_cpu0 = report.cpu_seconds(api.pid)
        with served(api, workload.catalog_bytes(world), logs, str(nodes), nodes) as server:
            pid = server.pid
            rss_ready = report.rss_kib(pid)
            api_cpu_sync = server.api_cpu_ready - api_cpu0
            idle = _window(api, pid, 0, 0, min(10.0, options.window_seconds))
            idle_rate = idle["cpu_seconds"] / idle["seconds"]
            node_window = _window(api, pid, 0, max(node_rate, NODE_FLOOR),
                                  options.window_seconds)
            pod_window = _window(api, pid, max(pod_rate, POD_FLOOR), 0, options.window_seconds)
            api.post(f"/bench/load?pods={pod_rate}&nodes={node_rate}")
            sent0, t0 = api.get("/bench/stats"), time.monotonic()
            reviews = run_loadgen(f"https://127.0.0.1:{server.port}/mutate", server.ca, bodies,
                                  "paced", options.churn_seconds, rate=options.review_rate,
                                  connections=4, warmup=2.0, patch_sizes=True)
            sent1, churn_wall = api.get("/bench/stats"), time.monotonic() - t0
            rss_churn = report.rss_kib(pid)
            peak = report.status_kib(pid, "VmHWM")
    patch = reviews.get("patch_bytes") or {}
    return {
        "nodes": nodes, "pods": pods, "pods_per_node": ppn, "nodelayers": nodes,
        "accelerator_nodes": len(range(0, nodes, ACCELERATOR_EVERY)) if options.accelerators
        else 0, "layer_labels": options.layer_labels, "leases": False,
        "source": source, "source_wall_seconds": source["wall_seconds"],
        "source_api_cpu_seconds": source["api_cpu_seconds"],
        # the source alone against the served ready time, and the stand-in's CPU while the
        # webhook synced against that wall: both small means the source is not the bottleneck
        "source_share_of_ready": source["wall_seconds"] / server.ready_seconds,
        "api_cpu_during_sync_s": api_cpu_sync,
        "api_cpu_share_of_ready": api_cpu_sync / server.ready_seconds,
        "readyz_seconds": server.readyz_seconds, "ready_seconds": server.ready_seconds,
        "server_cpu_to_ready_s": server.cpu_ready,
        "rss_ready_mb": report.mb(rss_ready), "rss_after_churn_mb": report.mb(rss_churn),
        "rss_peak_mb": report.mb(peak),
        "idle_cpu_share": idle_rate, "node_window": node_window, "pod_window": pod_window,
        "cpu_ms_per_node_event": _per_event_ms(node_window, idle_rate, "node_events"),
        "cpu_ms_per_pod_event": _per_event_ms(pod_window, idle_rate, "pod_events"),
        "churn_seconds": churn_wall,
        "churn_pod_events_per_s": (sent1["pods"] - sent0["pods"]) / churn_wall,
        "churn_node_events_per_s": (sent1["nodes"] - sent0["nodes"]) / churn_wall,
        "reviews": reviews, "review_p50_ms": reviews["latency"]["p50_ms"],
        "review_p99_ms": reviews["latency"]["p99_ms"],
        "patch_bytes_p50": patch.get("p50"), "patch_bytes_max": patch.get("max"),
        "command": " ".join(server.argv[1:]),
    }


def size_table(r: dict[str, Any]) -> str:
    rows: list[list[Any]] = [
        ["source alone: wall s (its CPU s)",
         f"{r['source_wall_seconds']:.2f} ({r['source_api_cpu_seconds']:.2f})"],
        ["source's share: alone / ready", f"{100 * r['source_share_of_ready']:.0f} %"],
        ["stand-in CPU while serving the sync / ready",
         f"{100 * r['api_cpu_share_of_ready']:.0f} %"],
        ["ready s (/readyz; every NodeLayers held)",
         f"{r['readyz_seconds']:.1f}; {r['ready_seconds']:.1f}"],
        ["RSS at ready MB", r["rss_ready_mb"]],
        [f"RSS after {r['churn_seconds']:.0f} s churn MB (peak)",
         f"{r['rss_after_churn_mb']:.1f} ({r['rss_peak_mb']:.1f})"],
        [f"CPU ms / node event ({r['node_window']['node_events']} events)",
         r["cpu_ms_per_node_event"]],
        [f"CPU ms / pod event ({r['pod_window']['pod_events']} events)",
         r["cpu_ms_per_pod_event"]],
        ["churn pod + node events/s",
         f"{r['churn_pod_events_per_s']:.1f} + {r['churn_node_events_per_s']:.1f}"],
        [f"review p50 / p99 ms ({r['reviews']['completed']} at "
         f"{r['reviews']['offered_rate']:.0f}/s, TLS)",
         f"{r['review_p50_ms']:.2f} / {r['review_p99_ms']:.2f}"],
        [f"patch bytes p50 / max ({r['reviews']['patched']} patched)",
         f"{r['patch_bytes_p50']} / {r['patch_bytes_max']}"],
    ]
    title = (f"[growth] {r['nodes']:,} nodes, {r['pods']:,} running pods, {r['nodelayers']:,} "
             f"NodeLayers, {r['accelerator_nodes']:,} accelerator nodes, layer labels "
             f"{'on' if r['layer_labels'] else 'off'}, no Leases")
    return title + "\n" + report.table(["what", "measured"], rows)


def summary_table(runs: list[dict[str, Any]]) -> str:
    return report.table(
        ["nodes", "pods", "source s", "ready s", "RSS ready MB", "RSS churn MB",
         "CPU ms/node ev", "CPU ms/pod ev", "review p50 ms", "review p99 ms", "patch B p50",
         "patch B max"],
        [[r["nodes"], r["pods"], r["source_wall_seconds"], r["ready_seconds"],
          r["rss_ready_mb"], r["rss_after_churn_mb"], r["cpu_ms_per_node_event"],
          r["cpu_ms_per_pod_event"], r["review_p50_ms"], r["review_p99_ms"],
          r["patch_bytes_p50"], r["patch_bytes_max"]] for r in runs])


def run(options: Options) -> dict[str, Any]:
    logs = Path(tempfile.mkdtemp(prefix="bench-growth-"))
    print(f"[growth] logs in {logs}; {LEASES_NOTE}", flush=True)
    runs = []
    for nodes in options.sizes:
        size_logs = logs / str(nodes)
        size_logs.mkdir()
        result = measure_size(nodes, options, size_logs)
        runs.append(result)
        print(size_table(result) + "\n", flush=True)
    fitted = growth_fit.slopes(runs)
    split = growth_fit.memory_split(runs)
    biggest = max(65_000, *options.sizes)
    found = growth_fit.targets(runs, fitted, split, (biggest, biggest * options.ppn(biggest)))
    print(summary_table(runs))
    print("\n" + growth_fit.slope_table(fitted))
    print("\n" + report.targets_table([("growth", t) for t in found]))
    print(LEASES_NOTE)
    out: dict[str, Any] = {"runs": runs, "slopes": fitted, "memory": split, "targets": found,
                           "leases": LEASES_NOTE, "options": {
                               **vars(options), "plot": str(options.plot or ""),
                               # JSON keys are strings
                               "pods_per_node_at": {str(k): v for k, v in
                                                    options.pods_per_node_at.items()}}}
    if options.plot is not None:
        out["plot"] = str(growth_fit.plot(runs, options.plot))
        print(f"plot: {out['plot']}")
    return out


def _size_override(text: str) -> tuple[int, int]:
    nodes, _, ppn = text.partition("=")
    return int(nodes), int(ppn)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.served.growth", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,5000,20000,65000",
                        help="node counts, comma-separated")
    parser.add_argument("--pods-per-node", type=int, default=30)
    parser.add_argument("--pods-per-node-at", type=_size_override, action="append", default=[],
                        metavar="NODES=PODS", help="another pods per node at one size")
    parser.add_argument("--churn-seconds", type=float, default=600.0)
    parser.add_argument("--window-seconds", type=float, default=60.0,
                        help="each CPU-per-event window (node events, pod events)")
    parser.add_argument("--review-rate", type=float, default=20.0, help="AdmissionReviews/s")
    parser.add_argument("--pod-events-per-node", type=float, default=0.01,
                        help="pod events/s per node during the churn")
    parser.add_argument("--node-events-per-node", type=float, default=0.001,
                        help="node events/s per node during the churn")
    parser.add_argument("--layer-labels", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--accelerators", action=argparse.BooleanOptionalAction, default=True,
                        help="one node in four holds the large synthetic family")
    parser.add_argument("--plot", type=Path, help="draw the curve (PNG; needs matplotlib)")
    args = parser.parse_args(argv)
    options = Options(
        sizes=[int(s) for s in args.sizes.split(",") if s.strip()],
        pods_per_node=args.pods_per_node, pods_per_node_at=dict(args.pods_per_node_at),
        churn_seconds=args.churn_seconds, window_seconds=args.window_seconds,
        review_rate=args.review_rate, pod_events_per_node=args.pod_events_per_node,
        node_events_per_node=args.node_events_per_node, layer_labels=args.layer_labels,
        accelerators=args.accelerators, plot=args.plot)
    result = run(options)
    path = report.write("growth", result)
    print(f"-> {path}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
