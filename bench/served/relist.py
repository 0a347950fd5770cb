"""Both replicas relisting at once on the real control plane: seconds until each is ready and
holds every NodeLayers object, and what the relist costs kube-apiserver (CPU, RSS at the peak,
requests and bytes by resource).

The cluster is bench.controlplane's (`cluster up` with N fake nodes, a NodeLayers object per
node owned by its Node, P running pods), made once. Then, per run, K `serve` replicas of each
source tree under test (`--tree NAME=DIR`: `git archive COMMIT webhook | tar -x -C DIR`, a tree
with other settings...) start at once against it, as after a rollout of both or a partition;
the trees alternate, the order reversed every other run, and the API server's RSS is let settle
between runs. The replicas run from their tree (its directory first on sys.path), everything
else from this checkout.

    python -m bench.served.relist [--nodes 1000] [--pods 10000] [--replicas 1,2] [--runs 3]
        --tree pages=/tmp/rl-base --tree stream=/tmp/rl-new [--profile DIR]

Each replica's CPU is reported beside its times; `--profile DIR` records each with py-spy
(folded stacks; `pip install py-spy`), which slows it, so profile apart from timing.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import shutil
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench import report
from bench.controlplane.apiclient import Api, by_label, delta, total
from bench.controlplane.cli import parse
from bench.controlplane.scraping import nodelayers_held, urls
from bench.controlplane.setup import Bench
from bench.served.e2e import spread
from bench.served.review_queue import _FROM_TREE, _tree

METRICS = ("apiserver_request_total", "apiserver_response_sizes", "apiserver_watch_events_sizes",
           "go_memstats_alloc_bytes_total",
           # a list served from etcd because the watch cache was not fresh in time
           "apiserver_watch_cache_consistent_read_total")
SETTLE_SECONDS = 20.0  # between runs: the API server's heap shrinks back (Go's scavenger)


class Relist:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.bench = Bench(parse(
            ["--nodes", str(args.nodes), "--running-pods", str(args.pods)]), root)
        self.runs = 0

    def argv(self, tree: Path, port: int) -> list[str]:
        from webhook.devcluster import install

        c = self.bench.cluster
        argv = install.serve_argv(f"127.0.0.1:{port}", c.webhook_kubeconfig,
                                  c.webhook_certs.cert, c.webhook_certs.key,
                                  Path(c.plane.extra["catalog"]))
        assert argv[1:3] == ["-m", "webhook"]
        return [argv[0], "-c", _FROM_TREE, str(tree.resolve()), *argv[3:]]

    def replica(self, name: str, tree: Path, i: int) -> dict[str, float]:
        """One replica from `tree`: seconds to ready and to every NodeLayers held, its RSS."""
        from webhook.devcluster.processes import fetch, free_port, spawn, stop, wait_until

        c = self.bench.cluster
        port = free_port()
        context = ssl.create_default_context(cafile=str(c.webhook_certs.ca_cert))
        started = time.monotonic()
        process = spawn(f"relist-{name}-{self.runs}-{i}", self.argv(tree, port),
                        self.root / f"replica-{name}-{self.runs}-{i}.log")
        profiler = None
        if self.args.profile:  # py-spy's folded stacks, until the replica stops
            out = self.args.profile / f"replica-{name}-{self.runs}-{i}.folded"
            profiler = subprocess.Popen(
                [self.args.py_spy, "record", "--pid", str(process.pid), "--format", "raw",
                 "--rate", "100", "--nonblocking", "--output", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            base = f"https://127.0.0.1:{port}"
            wait_until(process, lambda: fetch(f"{base}/readyz", context) is not None, 600,
                       "ready (/readyz)")
            ready = time.monotonic() - started
            while time.monotonic() - started < 900:
                if nodelayers_held(f"{base}/metrics", context) >= self.args.nodes:
                    break
                time.sleep(0.1)
            synced = time.monotonic() - started
            # The replica's own cost of the pages: its CPU, its peak RSS so far, and now.
            return {"ready_s": ready, "nodelayers_s": synced,
                    "cpu_s": report.cpu_seconds(process.pid),
                    "rss_peak_mb": report.status_kib(process.pid, "VmHWM") / 1024,
                    "rss_mb": report.rss_kib(process.pid) / 1024}
        finally:
            stop(process)
            if profiler is not None:
                profiler.wait(30)

    async def one(self, api: Api, name: str, tree: Path, count: int) -> dict[str, Any]:
        plane = self.bench.cluster.plane
        apiserver = plane.processes["kube-apiserver"].pid
        etcd = plane.processes["etcd"].pid
        self.runs += 1
        await asyncio.sleep(SETTLE_SECONDS)
        rss0 = report.rss_kib(apiserver)
        url = urls(self.bench)["apiserver"]
        before = await api.metrics(url, METRICS)
        cpu0 = {"apiserver": report.cpu_seconds(apiserver), "etcd": report.cpu_seconds(etcd)}
        peak = [rss0]
        started = time.monotonic()
        async with report.rss_samples(apiserver, 0.1) as samples:
            replicas = await asyncio.gather(*(asyncio.to_thread(self.replica, name, tree, i)
                                              for i in range(count)))
        peak.extend(samples)
        wall = time.monotonic() - started
        cpu = {"apiserver": report.cpu_seconds(apiserver) - cpu0["apiserver"],
               "etcd": report.cpu_seconds(etcd) - cpu0["etcd"]}
        d = delta(await api.metrics(url, METRICS), before)
        growth = (max(peak) - rss0) / 1024
        row: dict[str, Any] = {
            "tree": name, "replica_count": count, "wall_s": wall, "replicas": replicas,
            "ready_s": max(r["ready_s"] for r in replicas),
            "nodelayers_s": max(r["nodelayers_s"] for r in replicas),
            "replica_rss_peak_mb": max(r["rss_peak_mb"] for r in replicas),
            "replica_cpu_s": max(r["cpu_s"] for r in replicas),
            "apiserver_cpu_s": cpu["apiserver"], "etcd_cpu_s": cpu["etcd"],
            # Go heap allocated while serving the relist: the garbage that grows its RSS.
            "apiserver_allocated_mb": total(d, "go_memstats_alloc_bytes_total") / 2**20,
            "apiserver_rss_mb": {"before": rss0 / 1024, "peak": max(peak) / 1024,
                                 "growth": growth},
            "requests_by_verb": {k: v for k, v in by_label(
                d, "apiserver_request_total", "verb").items() if v},
            "list_bytes_by_resource": {k: v for k, v in by_label(
                d, "apiserver_response_sizes_sum", "resource", verb="LIST").items() if v},
            "lists_from_etcd_by_resource": {k: v for k, v in by_label(
                d, "apiserver_watch_cache_consistent_read_total", "resource",
                fallback="true").items() if v},
            "watch_bytes_by_resource": {k: v for k, v in by_label(
                d, "apiserver_watch_events_sizes_sum", "resource").items() if v > 0},
        }
        print(f"{name:>8} R={count} run {self.runs}: ready {row['ready_s']:.1f} s, NodeLayers "
              f"{row['nodelayers_s']:.1f} s; kube-apiserver CPU {cpu['apiserver']:.1f} s, RSS "
              f"+{growth:.0f} MB, {row['apiserver_allocated_mb']:.0f} MB allocated; etcd CPU "
              f"{cpu['etcd']:.1f} s; replica CPU {row['replica_cpu_s']:.1f} s, peak RSS "
              f"{row['replica_rss_peak_mb']:.0f} MB; lists from etcd "
              f"{row['lists_from_etcd_by_resource']}; "
              f"requests {row['requests_by_verb']}", flush=True)
        return row

    async def run(self) -> dict[str, Any]:
        plane = self.bench.cluster.plane
        api = Api(plane.server, plane.tls_context())
        rows: list[dict[str, Any]] = []
        try:
            await self.bench.populate(api)
            trees = list(self.args.tree)
            for run in range(self.args.runs):
                for count in self.args.replicas:
                    for name, tree in (trees if run % 2 == 0 else trees[::-1]):
                        rows.append({"run": run, **await self.one(api, name, tree, count)})
        finally:
            await api.close()
        summary: dict[str, dict[str, dict[str, float]]] = {}
        for (name, _), count in itertools.product(self.args.tree, self.args.replicas):
            label = f"{name} R={count}"
            mine = [r for r in rows if r["tree"] == name and r["replica_count"] == count]
            summary[label] = {key: spread([float(r[key]) for r in mine]) for key in (
                "ready_s", "nodelayers_s", "apiserver_cpu_s", "apiserver_allocated_mb",
                "etcd_cpu_s", "replica_cpu_s", "replica_rss_peak_mb")}
            summary[label]["apiserver_rss_growth_mb"] = spread(
                [r["apiserver_rss_mb"]["growth"] for r in mine])
        return {"settings": {"nodes": self.args.nodes, "pods": self.args.pods,
                             "replicas": self.args.replicas,
                             "trees": [[n, str(p)] for n, p in self.args.tree]},
                "cluster": self.bench.result, "runs": rows, "summary": summary}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.served.relist")
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000, help="running pods")
    parser.add_argument("--replicas", type=lambda text: [int(n) for n in text.split(",")],
                        default=[2], help="replicas started at once; a list (1,2) runs each")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tree", type=_tree, action="append", required=True,
                        help="NAME=DIR: a source tree the replicas run from (repeatable)")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--profile", type=Path, default=None, metavar="DIR",
                        help="write each replica's py-spy profile (folded stacks) to DIR")
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy",
                        help="the py-spy to profile with (pip install py-spy)")
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="ll-bench-relist-"))
    relist = Relist(args, root)
    try:
        relist.bench.up()
        result = asyncio.run(relist.run())
    finally:
        relist.bench.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(orjson.dumps(result["summary"], option=orjson.OPT_INDENT_2).decode())
    print(f"results: {report.write('relist', result)}")


if __name__ == "__main__":
    main()
