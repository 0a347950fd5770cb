"""2. End to end over TLS with keep-alive: the real server process (`python -m webhook serve`)
against a null aiohttp TLS webhook (tests/kit/null_webhook.py) on the same machine, driven by the
same load generators in a separate process:

- saturation: `wrk` (Debian package; installed with apt-get when missing and running as
  root), one thread per keep-alive connection, each walking the bodies in order from its own
  start (bench/served/e2e_traffic.py); without wrk the Python client (bench/served/loadgen.py) in
  closed-loop mode, which the results then say;
- fixed offered rate: bench/served/loadgen.py paced (wrk2 is not in Debian), latency from the
  scheduled send time.

Pinning: every server (the one under test and its null webhook) runs on the last CPU, the load
generators on the others, so client and server never compete for a core. Rounds: ROUNDS
rounds, each running every server of a pair in turn (the order reversed every other round),
saturation then paced; min/median/max over rounds of throughput, of the ratio to the null
webhook of the same round, and of the paced p99. Pairs: `--demo` (8 nodes, saturation only)
and a synthetic 5,000-node inventory (`--nodes FILE --catalog FILE --offline`) with two traffic
shapes: workload-shaped (replicas of a template together) and every pod distinct.
Also per saturation run: each server's CPU time per review (/proc), whose ratio (null over
ours) is what the throughput ratio would be on a quiet core, and the review memo's hit rate.
`--event-loop both` runs every server on asyncio's default loop and on uvloop (twice the time;
uvloop is not a dependency: measured, it did not raise our ratio or throughput materially).
Only 127.0.0.1.

    python -m bench.served.e2e [--quick] [--event-loop asyncio|uvloop|both] [--rate R]
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench import report
from bench.report import REPO
from bench.served import e2e_clients as clients
from bench.served import e2e_traffic
from bench.served.e2e_clients import scrape_reviews
from bench.served.e2e_traffic import Shape
from tests.kit import workload
from webhook.devcluster import processes as procs
from webhook.devcluster.processes import free_port
from webhook.serving.certs import generate

TARGETS = {"shaped": 0.70, "distinct": 0.50}
ROUNDS = 5
CONNECTIONS = 16
NODES = 5_000
PACED_WARMUP = 1.0
# Counted by the review's memo (where it has one): hits and misses per saturation run.
MEMO_METRIC = "layer_locality_decision_memo_lookups_total"
# Runs a module on uvloop without a flag of its own: the policy is set before the module's
# asyncio.run / web.run_app makes its loop.
_ON_UVLOOP = ("import asyncio, runpy, sys, uvloop; "
              "asyncio.set_event_loop_policy(uvloop.EventLoopPolicy()); "
              "sys.argv[0] = sys.argv[1]; del sys.argv[1]; "
              "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)")


@dataclass(frozen=True)
class Server:
    name: str  # "null webhook" or the server under test
    loop: str  # asyncio | uvloop
    real: bool
    module_args: tuple[str, ...]

    def argv(self, port: int, tls: list[str]) -> list[str]:
        module, *args = self.module_args
        head = ["-c", _ON_UVLOOP, module] if self.loop == "uvloop" else ["-m", module]
        return procs.python(*head, *args, "--listen", f"127.0.0.1:{port}", *tls)


def spread(values: list[float]) -> dict[str, float]:
    if not values:
        return {"min": float("nan"), "median": float("nan"), "max": float("nan")}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


class Bench:
    """Pairs of servers (the null webhook and one under test, per event loop) on the same
    bodies, rounds interleaved."""

    def __init__(self, tmp: Path, quick: bool, rate: float) -> None:
        self.tmp = tmp
        self.files = generate("layer-locality", "bench", tmp / "certs",
                              extra_sans=["127.0.0.1", "localhost"])
        self.tls = ["--tls-cert", str(self.files.cert), "--tls-key", str(self.files.key)]
        self.pins = procs.pinning()
        self.server_cpus: frozenset[int] | None = self.pins[0] if self.pins else None
        self.client_cpus: frozenset[int] | None = self.pins[1] if self.pins else None
        self.wrk = clients.ensure_wrk()
        self.rate = rate
        self.duration = 2.0 if quick else 3.0
        self.paced = 2.0 if quick else 2.5
        self.rounds = 2 if quick else ROUNDS
        self.checked_affinity: dict[str, list[int]] = {}
        self.runs = 0

    @property
    def paced_pods(self) -> int:
        """Pods one paced run sends (with its warm-up and the connections' first requests)."""
        return int(self.rate * (self.paced + PACED_WARMUP)) + 64

    def _memo(self, server: Server, base: str) -> dict[str, float]:
        return (clients.scrape(f"{base}/metrics", self.files.ca_cert, MEMO_METRIC, "result")
                if server.real else {})

    def saturate(self, server: Server, base: str, pid: int, shape: Shape, offset: int,
                 duration: float) -> dict[str, Any]:
        self.runs += 1
        url = f"{base}/mutate"
        memo = self._memo(server, base)
        cpu = report.cpu_seconds(pid)
        if self.wrk:
            script = self.tmp / f"{shape.name}.lua"
            result = clients.run_wrk(self.wrk, url, script, duration, CONNECTIONS,
                                     self.client_cpus, (str(offset), str(self.runs)))
        else:
            bodies = self.tmp / f"{shape.name}-closed.json"
            bodies.write_bytes(orjson.dumps([b.decode() for b in shape.saturation.bodies(
                len(shape.saturation.templates))]))
            result = {"tool": "python-closed-loop",
                      **clients.run_loadgen(url, self.files.ca_cert, bodies, "closed", duration,
                                            connections=CONNECTIONS, cpus=self.client_cpus)}
            result["p50_ms"] = result["latency"]["p50_ms"]
            result["p99_ms"] = result["latency"]["p99_ms"]
            result["non_2xx"] = result["completed"] - result["ok"]
            result["requests"] = result["completed"]
        result["cpu_us_per_request"] = 1e6 * (report.cpu_seconds(pid) - cpu) / max(
            1, result["requests"])
        after = self._memo(server, base)
        result["memo"] = {k: after[k] - memo.get(k, 0.0) for k in after}
        return result

    def pair(self, servers: list[Server], shapes: list[Shape], paced: bool
             ) -> list[dict[str, Any]]:
        """Rows (one per server and shape) of interleaved rounds."""
        for shape in shapes:
            e2e_traffic.lua_script(shape.saturation, CONNECTIONS, self.tmp / f"{shape.name}.lua")
        ports = [free_port() for _ in servers]
        bases = [f"https://127.0.0.1:{port}" for port in ports]
        rows: dict[tuple[Server, str], dict[str, Any]] = {
            (s, t.name): {"server": s.name, "loop": s.loop, "real": s.real, "pods": t.name,
                          "saturation_rounds": [], "paced_rounds": []}
            for s in servers for t in shapes}
        with contextlib.ExitStack() as stack:
            children = [stack.enter_context(procs.started(
                s.argv(p, self.tls), self.tmp / f"{s.name.split()[0]}-{s.loop}-{p}.log",
                cpus=self.server_cpus, cwd=REPO)) for s, p in zip(servers, ports, strict=True)]
            for child, base in zip(children, bases, strict=True):
                procs.wait_https(f"{base}/readyz", self.files.ca_cert, child)
            order = [(s, b, c.pid) for s, b, c in zip(servers, bases, children, strict=True)]
            for server, _, pid in order:
                self.checked_affinity[f"{server.name} ({server.loop})"] = sorted(
                    os.sched_getaffinity(pid))
            for server, base, pid in order:  # warm-up, discarded
                for shape in shapes:
                    self.saturate(server, base, pid, shape, 0, 1.0)
            for k in range(self.rounds):
                turn = order if k % 2 == 0 else order[::-1]  # alternate who goes first
                for shape in shapes:
                    # Each round starts its connections further on: templates not met yet.
                    offset = (k + 1) * len(shape.saturation.templates) // (self.rounds + 1)
                    for server, base, pid in turn:
                        rows[server, shape.name]["saturation_rounds"].append(
                            self.saturate(server, base, pid, shape, offset, self.duration))
                    if not paced:
                        continue
                    bodies = self.tmp / f"{shape.name}-paced-{k}.json"
                    bodies.write_bytes(orjson.dumps(
                        [b.decode() for b in shape.paced_bodies(k, self.paced_pods)]))
                    for server, base, _ in turn:
                        rows[server, shape.name]["paced_rounds"].append(clients.run_loadgen(
                            f"{base}/mutate", self.files.ca_cert, bodies, "paced", self.paced,
                            rate=self.rate, warmup=PACED_WARMUP, cpus=self.client_cpus))
            for server, base, pid in order:
                rss = report.rss_kib(pid) / 1024
                reviews = (scrape_reviews(f"{base}/metrics", self.files.ca_cert)
                           if server.real else {})
                for shape in shapes:
                    rows[server, shape.name]["rss_mb"] = rss
                    rows[server, shape.name]["reviews"] = reviews
        for shape in shapes:
            for server in servers:
                null = next(s for s in servers if not s.real and s.loop == server.loop)
                _summarise(rows[server, shape.name], rows[null, shape.name])
        return list(rows.values())


def _summarise(row: dict[str, Any], null: dict[str, Any]) -> None:
    rps = [r["throughput_rps"] for r in row["saturation_rounds"]]
    row["throughput_rps"] = spread(rps)
    row["saturation_p99_ms"] = spread([r["p99_ms"] for r in row["saturation_rounds"]])
    row["paced_p99_ms"] = spread([r["latency"]["p99_ms"] for r in row["paced_rounds"]])
    row["paced_p50_ms"] = spread([r["latency"]["p50_ms"] for r in row["paced_rounds"]])
    row["cpu_us_per_request"] = spread([r["cpu_us_per_request"]
                                        for r in row["saturation_rounds"]])
    row["failed"] = sum(r.get("non_2xx", 0) for r in row["saturation_rounds"]) + sum(
        r["completed"] - r["ok"] + sum(r["errors"].values()) for r in row["paced_rounds"])
    memo: dict[str, float] = {}
    for r in row["saturation_rounds"]:
        for result, count in r["memo"].items():
            memo[result] = memo.get(result, 0.0) + count
    row["memo_lookups"] = memo
    if row["real"]:
        pairs = list(zip(row["saturation_rounds"], null["saturation_rounds"], strict=True))
        row["ratio_rounds"] = [r["throughput_rps"] / n["throughput_rps"] for r, n in pairs]
        row["ratio"] = spread(row["ratio_rounds"])
        # What the ratio would be with the core to itself: null's CPU per review over ours.
        row["cpu_ratio"] = spread([n["cpu_us_per_request"] / r["cpu_us_per_request"]
                                   for r, n in pairs])
        row["target_ratio"] = TARGETS.get(row["pods"])
        row["met"] = (None if row["target_ratio"] is None
                      else row["ratio"]["median"] >= row["target_ratio"])


def _fmt3(s: dict[str, float], digits: int = 2) -> str:
    if s["min"] != s["min"]:
        return "-"
    return "/".join(f"{s[k]:.{digits}f}" if digits else f"{s[k]:,.0f}"
                    for k in ("min", "median", "max"))


def run(quick: bool = False, rate: float = 500.0, loops: tuple[str, ...] = ("asyncio",)
        ) -> dict[str, Any]:
    """The benchmark in a directory of its own (the node list, the catalog, the servers'
    logs: about 90 MB), removed afterwards unless BENCH_KEEP is set."""
    tmp = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    try:
        return _run(tmp, quick, rate, loops)
    finally:
        if not os.environ.get("BENCH_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)


def _run(tmp: Path, quick: bool, rate: float, loops: tuple[str, ...]) -> dict[str, Any]:
    bench = Bench(tmp, quick, rate)
    world = workload.build_world()
    (tmp / "nodes.json").write_bytes(workload.node_list_bytes(world, NODES))
    (tmp / "catalog.json").write_bytes(workload.catalog_bytes(world))
    real = ("webhook", "serve", "--nodes", str(tmp / "nodes.json"), "--catalog",
            str(tmp / "catalog.json"), "--offline")

    def servers(label: str, args: tuple[str, ...]) -> list[Server]:
        return [s for loop in loops for s in (Server("null webhook", loop, False,
                                                     ("tests.kit.null_webhook",)),
                                              Server(label, loop, True, args))]

    rows = bench.pair(servers("layer-locality --demo (8 nodes)", ("webhook", "serve", "--demo")),
                      [e2e_traffic.demo(world)], paced=False)
    shapes = e2e_traffic.build(world, paced_pods=bench.paced_pods * bench.rounds)
    rows += bench.pair(servers(f"layer-locality {NODES:,} nodes", real), list(shapes),
                       paced=True)
    pinning = ({"servers": sorted(bench.server_cpus or ()), "client": sorted(
        bench.client_cpus or ()), "checked": bench.checked_affinity} if bench.pins else None)
    client = (f"wrk -t{CONNECTIONS} -c{CONNECTIONS} (a connection per thread)" if bench.wrk
              else f"Python closed loop, {CONNECTIONS} connections (wrk missing)")
    print("\n[e2e] HTTPS keep-alive on 127.0.0.1; pinning: "
          + (f"servers on CPU {pinning['servers']}, clients on CPU {pinning['client']}"
             if pinning else "none (one CPU)")
          + f"; saturation: {client}, {bench.duration:.0f}s; paced: Python client, {rate:.0f}/s "
          f"for {bench.paced}s, 32 connections; {bench.rounds} interleaved rounds, min/median/max")
    print(report.table(
        ["server", "loop", "pods", "sat rps", "ratio", "CPU us/review", "CPU ratio",
         "sat p99 ms", "paced p99 ms", "memo hits", "failed", "RSS MB"],
        [[r["server"], r["loop"], r["pods"], _fmt3(r["throughput_rps"], 0),
          _fmt3(r["ratio"]) if r["real"] else "-", _fmt3(r["cpu_us_per_request"], 0),
          _fmt3(r["cpu_ratio"]) if r["real"] else "-", _fmt3(r["saturation_p99_ms"], 1),
          _fmt3(r["paced_p99_ms"], 1), _hit_rate(r["memo_lookups"]), r["failed"], r["rss_mb"]]
         for r in rows]))
    print("(min/median/max over rounds; CPU: the server's own CPU time per review in the "
          "saturation runs; CPU ratio: the null webhook's over ours, the ratio on a core of "
          "its own; memo hits: of the review memo's lookups in those runs, where it has one)")
    targets = [{
        "target": f"e2e throughput >= {r['target_ratio']}x the null webhook at {NODES:,} nodes, "
                  f"{'workload-shaped' if r['pods'] == 'shaped' else 'every pod distinct'}"
                  + ("" if r["loop"] == "asyncio" else f" ({r['loop']})"),
        "measured": f"{r['ratio']['median']:.2f}x (median of {bench.rounds}; "
                    f"{r['ratio']['min']:.2f}-{r['ratio']['max']:.2f}), "
                    f"{r['throughput_rps']['median']:,.0f} vs null "
                    f"{_null_of(rows, r)['throughput_rps']['median']:,.0f}/s",
        "met": bool(r["met"]),
        "why": "" if r["met"] else _why(r, _null_of(rows, r)),
    } for r in rows if r["real"] and r.get("target_ratio") is not None]
    return {"rows": rows, "tool": "wrk" if bench.wrk else "python-closed-loop", "rate": rate,
            "duration_s": bench.duration, "paced_s": bench.paced, "rounds": bench.rounds,
            "pinning": pinning, "loops": list(loops), "targets": targets,
            "met": all(t["met"] for t in targets), "quick": quick}


def _why(row: dict[str, Any], null: dict[str, Any]) -> str:
    """What missing the ratio means in CPU per review, and what meeting it would take."""
    ours = row["cpu_us_per_request"]["median"]
    theirs = null["cpu_us_per_request"]["median"]
    allowed = theirs / row["target_ratio"] - theirs
    return (f"a review costs {ours:.0f} us of CPU against the null webhook's {theirs:.0f} us "
            f"(CPU ratio {row['cpu_ratio']['median']:.2f}); {row['target_ratio']}x leaves "
            f"{allowed:.0f} us per review beyond what the null webhook spends, we spend "
            f"{ours - theirs:.0f} us")


def _hit_rate(memo: dict[str, float]) -> str:
    total = sum(memo.values())
    return f"{memo.get('hit', 0.0) / total:.0%}" if total else "-"


def _null_of(rows: list[dict[str, Any]], row: dict[str, Any]) -> dict[str, Any]:
    return next(n for n in rows if not n["real"] and n["pods"] == row["pods"]
                and n["loop"] == row["loop"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.served.e2e", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument("--rate", type=float, default=500.0, help="paced offered rate")
    parser.add_argument("--event-loop", choices=("asyncio", "uvloop", "both"),
                        default="asyncio", help="loop of every server (both: twice the time)")
    args = parser.parse_args(argv)
    loops = ("asyncio", "uvloop") if args.event_loop == "both" else (args.event_loop,)
    if "uvloop" in loops and importlib.util.find_spec("uvloop") is None:
        parser.error("uvloop is not installed (not a dependency): .venv/bin/pip install uvloop")
    result = run(quick=args.quick, rate=args.rate, loops=loops)
    print(f"-> {report.write('e2e' if loops == ('asyncio',) else 'e2e-loops', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
