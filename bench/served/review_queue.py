"""Reviews while the pod watch is busy: how long a review waits on a replica's event loop
during a 2,000-pod round.

A real `python -m webhook serve` process (live mode: `--kubeconfig` to the stand-in API server
in a process of its own, bench/served/round_api.py, with N nodes and their running pods; `--catalog
--offline`) is synced, then the stand-in creates and binds a round of steered pods (each an
ADDED and a bind event of ~6 KB on the replica's pod watch) at R pods/s while
bench/served/loadgen.py sends AdmissionReviews (shaped: replicas of a template in a row) to the
replica at R/s times its share (`--review-share`, 0.5: one of the shipped two replicas,
each of which watches every pod) over TLS, paced (latency from the scheduled send time). From the
replica's /metrics before and after the round: `layer_locality_review_queue_seconds` (first
bytes read -> handler start), the handler's `layer_locality_review_duration_seconds` and the
watch's event lag; from the client, each review's latency.

Fairness on a shared machine: the replica is pinned to the last CPU, the stand-in and the load
generator to the others (procs.pinning); each server tree under test (`--tree NAME=DIR`, a
source tree such as `git archive COMMIT | tar -x -C DIR`; default: this checkout) runs once
per run, the order reversed every other run, each on a fresh replica against the same
stand-in (`--contend S`: a process pinned to the replica's core keeps it busy S of the time,
as the control plane does on a shared machine; a tree named NAME+uvloop runs on uvloop;
NAME+quiet gets the reviews without the round, the floor this machine gives at that moment);
figures are given per run and as min / median / max over runs.

    python -m bench.served.review_queue [--nodes 5000] [--pods 50000] [--round 2000] [--rate 100]
        [--runs 3] [--tree base=/tmp/rq-base --tree new=.] [--nodelayers --heartbeats 16.7]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench import report
from bench.controlplane import apiclient as cp_api
from bench.report import REPO
from bench.served import e2e_traffic
from bench.served.e2e import spread
from bench.served.e2e_clients import run_loadgen
from bench.served.inventory_serve import _wait_nodelayers
from tests.kit import workload
from tests.kit.apiserver import FakeApiServer
from webhook.devcluster import processes as procs
from webhook.devcluster.processes import free_port
from webhook.serving.certs import generate

QUEUE = "layer_locality_review_queue_seconds"
HANDLER = "layer_locality_review_duration_seconds"
LAG = "layer_locality_watch_event_lag_seconds"
CONNECTIONS = 8  # the API server's webhook client kept 3-17 open per replica
WARMUP = 2.0  # paced reviews before the round starts (not recorded)
# Runs the server from another source tree: its directory first on sys.path.
_FROM_TREE = ("import runpy, sys; sys.path.insert(0, sys.argv.pop(1)); sys.argv[0] = 'webhook'; "
              "runpy.run_module('webhook', run_name='__main__', alter_sys=True)")
# The same on uvloop (a tree named NAME+uvloop): the policy set before serve makes its loop.
_ON_UVLOOP = "import asyncio, uvloop; asyncio.set_event_loop_policy(uvloop.EventLoopPolicy()); "


def _ms(value: float | None) -> float | None:
    return None if value is None else value * 1000


def _figures(after: dict[cp_api.SampleKey, float], before: dict[cp_api.SampleKey, float]
             ) -> dict[str, Any]:
    d = cp_api.delta(after, before)
    queue, handler, lag = (cp_api.hist(d, m) for m in (QUEUE, HANDLER, LAG))
    # The largest observation lies in the highest bucket that gained one: its bound.
    top = max((b for (b, c), (_, c0) in zip(queue.buckets, ((0.0, 0.0), *queue.buckets),
                                            strict=False) if c > c0), default=None)
    return {
        "queue": {**queue.as_dict(), "max_bound": _ms(top),
                  "within_1ms": queue.share_within(0.001)},
        "handler": handler.as_dict(),
        "event_lag": {**lag.as_dict(), "within_1ms": lag.share_within(0.001)},
    }


class Bench:
    def __init__(self, args: argparse.Namespace, tmp: Path) -> None:
        self.args = args
        self.tmp = tmp
        self.files = generate("layer-locality", "bench", tmp / "certs",
                              extra_sans=["127.0.0.1"])
        self.catalog = tmp / "catalog.json"
        world = workload.build_world()
        self.catalog.write_bytes(workload.catalog_bytes(world))
        shaped, _ = e2e_traffic.build(world, args.round * (args.runs * len(args.tree) + 1))
        self.shape = shaped
        pins = procs.pinning()
        self.server_cpus: frozenset[int] | None = pins[0] if pins else None
        self.client_cpus: frozenset[int] | None = pins[1] if pins else None
        self.runs = 0

    def serve_argv(self, name: str, tree: Path, port: int, kubeconfig: Path) -> list[str]:
        code = (_ON_UVLOOP if "+uvloop" in name else "") + _FROM_TREE
        head = ["-c", code, str(tree.resolve())]
        return procs.python(*head, "serve", "--listen", f"127.0.0.1:{port}",
                            "--tls-cert", str(self.files.cert), "--tls-key", str(self.files.key),
                            "--catalog", str(self.catalog), "--offline",
                            "--kubeconfig", str(kubeconfig))

    async def one(self, name: str, tree: Path, api_port: int, kubeconfig: Path) -> dict[str, Any]:
        args = self.args
        port = free_port()
        base = f"https://127.0.0.1:{port}"
        bodies = self.tmp / f"bodies-{self.runs}.json"
        count = int(args.rate * (WARMUP + args.round / args.rate)) + 64
        bodies.write_bytes(orjson.dumps([b.decode() for b in self.shape.paced_bodies(
            self.runs, count)]))
        self.runs += 1
        context = ssl.create_default_context(cafile=str(self.files.ca_cert))
        started = time.monotonic()
        with procs.started(self.serve_argv(name, tree, port, kubeconfig),
                           self.tmp / f"serve-{name}-{self.runs}.log",
                           cpus=self.server_cpus, cwd=REPO) as server:
            procs.wait_https(f"{base}/readyz", self.files.ca_cert, server, timeout=900)
            if args.nodelayers:
                _wait_nodelayers(f"{base}/metrics", self.files.ca_cert, args.nodes, server)
            ready = time.monotonic() - started
            await asyncio.sleep(args.settle)
            api = cp_api.Api(f"http://127.0.0.1:{api_port}", context)
            hog = contextlib.ExitStack()
            if args.contend > 0:
                hog.enter_context(procs.started(
                    procs.python("-c", _HOG, str(args.contend)), self.tmp / "hog.log",
                    cpus=self.server_cpus, cwd=REPO))
            try:
                duration = args.round / args.rate
                client = asyncio.ensure_future(asyncio.to_thread(
                    run_loadgen, f"{base}/mutate", self.files.ca_cert, bodies, "paced",
                    duration, args.rate * args.review_share, CONNECTIONS, WARMUP,
                    self.client_cpus))
                await asyncio.sleep(WARMUP)  # the client's warm-up reviews, not recorded
                before = await api.metrics(f"{base}/metrics", (QUEUE, HANDLER, LAG))
                cpu0 = report.cpu_seconds(server.pid)
                quiet = "+quiet" in name  # the reviews alone: the floor on this machine
                if not quiet:
                    await api.request("POST", f"/bench/round?pods={args.round}"
                                      f"&rate={args.rate}&bind_ms={args.bind_ms}")
                spy = _py_spy(server.pid, duration, self.tmp / f"spy-{name}-{self.runs}.txt"
                              ) if args.py_spy else None
                loadgen = await client
                if spy is not None:
                    await asyncio.to_thread(spy.wait)
                while not (quiet or (await api.request("GET", "/bench/round"))["done"]):  # noqa: ASYNC110
                    await asyncio.sleep(0.1)
                await asyncio.sleep(0.5)  # the last binds applied
                cpu = report.cpu_seconds(server.pid) - cpu0
                after = await api.metrics(f"{base}/metrics", (QUEUE, HANDLER, LAG))
            finally:
                hog.close()
                await api.close()
        figures = _figures(after, before)
        return {"tree": name, "ready_s": ready, **figures,
                "client": {"latency": loadgen["latency"], "completed": loadgen["completed"],
                           "errors": loadgen["errors"], "statuses": loadgen["statuses"]},
                "server_cpu_share": cpu / (duration + 0.5)}

    async def run(self) -> dict[str, Any]:
        args = self.args
        argv = procs.python("-m", "bench.served.round_api", "--nodes", str(args.nodes), "--pods",
                            str(args.pods), *(["--nodelayers"] if args.nodelayers else []),
                            "--heartbeats", str(args.heartbeats))
        rows: list[dict[str, Any]] = []
        with procs.started(argv, self.tmp / "round_api.log", stdout_pipe=True,
                           cpus=self.client_cpus, cwd=REPO) as api:
            api_port = int(procs.read_line(api, timeout=900).split()[1])
            fake = FakeApiServer()
            fake.port = api_port
            kubeconfig = fake.kubeconfig(self.tmp / "kubeconfig")
            trees = list(args.tree)
            for run in range(args.runs):
                for name, tree in (trees if run % 2 == 0 else trees[::-1]):
                    row = await self.one(name, tree, api_port, kubeconfig)
                    row["run"] = run
                    rows.append(row)
                    _print_row(row)
        return {"settings": {k: (v if k != "tree" else [[n, str(p)] for n, p in v])
                             for k, v in vars(args).items()},
                "pinning": {"server": sorted(self.server_cpus or ()),
                            "clients": sorted(self.client_cpus or ())},
                "runs": rows, "summary": _summary(rows)}


# A CPU hog on the replica's core, busy `duty` of every 10 ms: the control plane's processes
# sharing the machine (34-89 % busy in bench.controlplane's rounds), so the kernel takes the
# core from the replica for milliseconds at a time and work piles up while it waits.
_HOG = ("import sys, time\nduty = float(sys.argv[1])\nwhile True:\n"
        "    end = time.perf_counter() + duty * 0.01\n"
        "    while time.perf_counter() < end: pass\n"
        "    time.sleep((1 - duty) * 0.01)\n")


def _py_spy(pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    """py-spy sampling the replica (every thread, idle ones too) for the round: collapsed
    stacks in `out` (where the loop's time goes: `--py-spy`, a profile, not a figure)."""
    return subprocess.Popen(["py-spy", "record", "--pid", str(pid), "--duration",
                             str(max(1, int(seconds))), "--rate", "1000", "--format", "raw",
                             "--threads", "--idle", "--output", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _print_row(row: dict[str, Any]) -> None:
    q, h, c = row["queue"], row["handler"], row["client"]["latency"]
    print(f"{row['tree']:>8} run {row['run']}: queue p50 {q['p50']:.3f} p99 {q['p99']:.3f} "
          f"max<={q['max_bound']} ms, within 1 ms {100 * (q['within_1ms'] or 0):.1f} %; "
          f"handler p99 {h['p99']:.3f} ms; client p50 {c['p50_ms']:.2f} p99 {c['p99_ms']:.2f} "
          f"max {c['max_ms']:.1f} ms; lag within 1 ms "
          f"{100 * (row['event_lag']['within_1ms'] or 0):.1f} %; cpu {row['server_cpu_share']:.2f}",
          flush=True)


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in dict.fromkeys(r["tree"] for r in rows):
        mine = [r for r in rows if r["tree"] == name]

        def over(get: Any, mine: list[dict[str, Any]] = mine) -> dict[str, float]:
            return spread([v for r in mine if (v := get(r)) is not None])

        out[name] = {
            "queue_p50_ms": over(lambda r: r["queue"]["p50"]),
            "queue_p99_ms": over(lambda r: r["queue"]["p99"]),
            "queue_max_bound_ms": over(lambda r: r["queue"]["max_bound"]),
            "queue_within_1ms": over(lambda r: r["queue"]["within_1ms"]),
            "handler_p99_ms": over(lambda r: r["handler"]["p99"]),
            "client_p50_ms": over(lambda r: r["client"]["latency"]["p50_ms"]),
            "client_p99_ms": over(lambda r: r["client"]["latency"]["p99_ms"]),
            "client_max_ms": over(lambda r: r["client"]["latency"]["max_ms"]),
            "event_lag_within_1ms": over(lambda r: r["event_lag"]["within_1ms"]),
            "server_cpu_share": over(lambda r: r["server_cpu_share"]),
        }
    return out


def _tree(text: str) -> tuple[str, Path]:
    name, _, path = text.partition("=")
    if not path:
        raise argparse.ArgumentTypeError("--tree NAME=DIR")
    return name, Path(path)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.served.review_queue")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=50_000, help="running pods before the round")
    parser.add_argument("--round", type=int, default=2000, help="pods created in the round")
    parser.add_argument("--rate", type=float, default=100.0,
                        help="pods created per second (reviews: this times --review-share)")
    parser.add_argument("--review-share", type=float, default=0.5,
                        help="share of the pods this replica reviews (0.5: one of the shipped "
                             "two; every replica watches every pod)")
    parser.add_argument("--bind-ms", type=float, default=50.0, help="creation to bind")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after ready")
    parser.add_argument("--tree", type=_tree, action="append",
                        help="NAME=DIR: a source tree to serve from (repeatable)")
    parser.add_argument("--contend", type=float, default=0.0, metavar="SHARE",
                        help="a process busy this share of the replica's core meanwhile")
    parser.add_argument("--nodelayers", action="store_true")
    parser.add_argument("--heartbeats", type=float, default=0.0)
    parser.add_argument("--py-spy", action="store_true",
                        help="profile each replica during the round (py-spy on PATH; kept)")
    parser.add_argument("--keep", action="store_true", help="keep the working directory")
    args = parser.parse_args(argv)
    args.tree = args.tree or [("this", REPO)]
    tmp = Path(tempfile.mkdtemp(prefix="bench-review-queue-"))
    try:
        result = asyncio.run(Bench(args, tmp).run())
    finally:
        if not (args.keep or args.py_spy):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp}")
    print(orjson.dumps(result["summary"], option=orjson.OPT_INDENT_2).decode())
    print(f"results: {report.write('review_queue', result)}")


if __name__ == "__main__":
    main()
