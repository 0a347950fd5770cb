"""2. End to end over TLS with keep-alive: the real server process (`python -m webhook serve`)
against a null aiohttp TLS webhook (bench/null_webhook.py) on the same machine, driven by the
same load generators in a separate process:

- saturation: `wrk` (Debian package; installed with apt-get when missing and running as
  root), one thread per keep-alive connection, each walking the bodies in order from its own
  start (bench/e2e_traffic.py); without wrk the Python client (bench/loadgen.py) in
  closed-loop mode, which the results then say;
- fixed offered rate: bench/loadgen.py paced (wrk2 is not in Debian), latency from the
  scheduled send time.

Pinning: every server (the one under test and its null webhook) runs on the last CPU, the load
generators on the others, so client and server never compete for a core. Rounds: ROUNDS
rounds, each running every server of a pair in turn (the order reversed every other round),
saturation then paced; min/median/max over rounds of throughput, of the ratio to the null
webhook of the same round, and of the paced p99. Pairs: `--demo` (8 nodes, saturation only)
and a synthetic 5,000-node inventory (`--nodes FILE --catalog FILE --offline`) with two traffic
shapes: workload-shaped (replicas of a template together) and every pod distinct.
`--event-loop both` runs every server on asyncio's default loop and on uvloop (twice the time).
Only 127.0.0.1.

    python -m bench.e2e [--quick] [--event-loop asyncio|uvloop|both] [--rate R]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from bench import e2e_traffic, procs, report, workload
from bench.e2e_traffic import Traffic
from webhook.certs import generate

TARGETS = {"shaped": 0.70, "distinct": 0.50}
ROUNDS = 5
CONNECTIONS = 16
NODES = 5_000
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}
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


def ensure_wrk() -> str | None:
    path = shutil.which("wrk")
    if path is None and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "wrk"],
                       check=False, capture_output=True, env=env)
        path = shutil.which("wrk")
    return path


def run_wrk(wrk: str, url: str, script: Path, duration: float, connections: int,
            cpus: frozenset[int] | None) -> dict[str, Any]:
    argv = [wrk, f"-t{connections}", f"-c{connections}", f"-d{int(duration)}s", "--latency",
            "-s", str(script), url]
    out = subprocess.run(argv, check=True, capture_output=True, text=True,
                         preexec_fn=procs.pinned_to(cpus)).stdout
    result: dict[str, Any] = {"tool": "wrk", "connections": connections}
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    result["throughput_rps"] = float(rps.group(1)) if rps else 0.0
    for q in ("50", "90", "99"):
        m = re.search(rf"^\s+{q}(?:\.000)?%\s+([\d.]+)(us|ms|s)\s*$", out, re.M)
        result[f"p{q}_ms"] = float(m.group(1)) * _UNITS[m.group(2)] if m else float("nan")
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    result["non_2xx"] = int(non2xx.group(1)) if non2xx else 0
    sock = re.search(r"Socket errors:.*", out)
    result["socket_errors"] = sock.group(0) if sock else ""
    total = re.search(r"(\d+) requests in", out)
    result["requests"] = int(total.group(1)) if total else 0
    return result


def run_loadgen(url: str, ca: Path, bodies: Path, mode: str, duration: float,
                rate: float = 0.0, connections: int = 32, warmup: float = 1.0,
                cpus: frozenset[int] | None = None) -> dict[str, Any]:
    argv = procs.python("-m", "bench.loadgen", "--url", url, "--ca", str(ca), "--bodies",
                        str(bodies), "--mode", mode, "--rate", str(rate), "--duration",
                        str(duration), "--connections", str(connections), "--warmup",
                        str(warmup))
    out = subprocess.run(argv, cwd=procs.REPO, check=True, capture_output=True,
                         preexec_fn=procs.pinned_to(cpus)).stdout
    result: dict[str, Any] = orjson.loads(out.splitlines()[-1])
    return result


def scrape_reviews(url: str, ca: Path) -> dict[str, float]:
    counts: dict[str, float] = {}
    text = procs.get_https(url, ca).decode()
    for line in text.splitlines():
        if line.startswith("layer_locality_reviews_total{"):
            labels, value = line.rsplit(" ", 1)
            result = re.search(r'result="([^"]+)"', labels)
            reason = re.search(r'reason="([^"]+)"', labels)
            key = f"{result.group(1) if result else ''}/{reason.group(1) if reason else ''}"
            counts[key] = counts.get(key, 0) + float(value)
    return counts


def spread(values: list[float]) -> dict[str, float]:
    if not values:
        return {"min": float("nan"), "median": float("nan"), "max": float("nan")}
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


class Bench:
    """One pair (or, with both loops, two pairs) of servers on the same bodies."""

    def __init__(self, tmp: Path, quick: bool, rate: float) -> None:
        self.tmp = tmp
        self.files = generate("layer-locality", "bench", tmp / "certs",
                              extra_sans=["127.0.0.1", "localhost"])
        self.tls = ["--tls-cert", str(self.files.cert), "--tls-key", str(self.files.key)]
        self.pins = procs.pinning()
        self.server_cpus: frozenset[int] | None = self.pins[0] if self.pins else None
        self.client_cpus: frozenset[int] | None = self.pins[1] if self.pins else None
        self.wrk = ensure_wrk()
        self.quick = quick
        self.rate = rate
        self.duration = 2.0 if quick else 3.0
        self.paced = 2.0 if quick else 2.5
        self.rounds = 2 if quick else ROUNDS
        self.checked_affinity: dict[str, list[int]] = {}

    def _files(self, traffic: Traffic) -> tuple[Path, Path]:
        script = e2e_traffic.lua_script(traffic, CONNECTIONS, self.tmp / f"{traffic.name}.lua")
        bodies = self.tmp / f"{traffic.name}.json"
        bodies.write_bytes(orjson.dumps([b.decode() for b in traffic.bodies]))
        return script, bodies

    def saturate(self, url: str, script: Path, bodies: Path, duration: float) -> dict[str, Any]:
        if self.wrk:
            return run_wrk(self.wrk, url, script, duration, CONNECTIONS, self.client_cpus)
        result = {"tool": "python-closed-loop",
                  **run_loadgen(url, self.files.ca_cert, bodies, "closed", duration,
                                connections=CONNECTIONS, cpus=self.client_cpus)}
        result["p50_ms"] = result["latency"]["p50_ms"]
        result["p99_ms"] = result["latency"]["p99_ms"]
        result["non_2xx"] = result["completed"] - result["ok"]
        return result

    def pair(self, servers: list[Server], shapes: list[Traffic], paced: bool
             ) -> list[dict[str, Any]]:
        """Rows (one per server and shape) of interleaved rounds."""
        files = {t.name: self._files(t) for t in shapes}
        ports = [procs.free_port() for _ in servers]
        bases = [f"https://127.0.0.1:{port}" for port in ports]
        rows: dict[tuple[Server, str], dict[str, Any]] = {
            (s, t.name): {"server": s.name, "loop": s.loop, "real": s.real, "pods": t.name,
                          "saturation_rounds": [], "paced_rounds": []}
            for s in servers for t in shapes}
        with contextlib.ExitStack() as stack:
            procs_ = [stack.enter_context(procs.started(
                s.argv(p, self.tls), self.tmp / f"{s.name.split()[0]}-{s.loop}-{p}.log",
                cpus=self.server_cpus)) for s, p in zip(servers, ports, strict=True)]
            for proc, base in zip(procs_, bases, strict=True):
                procs.wait_https(f"{base}/readyz", self.files.ca_cert, proc)
            for server, proc in zip(servers, procs_, strict=True):
                self.checked_affinity[f"{server.name} ({server.loop})"] = sorted(
                    os.sched_getaffinity(proc.pid))
            for base in bases:  # warm-up, discarded
                for t in shapes:
                    self.saturate(f"{base}/mutate", *files[t.name], 1.0)
            order = list(zip(servers, bases, procs_, strict=True))
            for k in range(self.rounds):
                turn = order if k % 2 == 0 else order[::-1]  # alternate who goes first
                for t in shapes:
                    for server, base, _ in turn:
                        rows[server, t.name]["saturation_rounds"].append(
                            self.saturate(f"{base}/mutate", *files[t.name], self.duration))
                    for server, base, _ in turn if paced else ():
                        rows[server, t.name]["paced_rounds"].append(run_loadgen(
                            f"{base}/mutate", self.files.ca_cert, files[t.name][1], "paced",
                            self.paced, rate=self.rate, cpus=self.client_cpus))
            for server, base, proc in order:
                rss = report.rss_kib(proc.pid) / 1024
                reviews = scrape_reviews(f"{base}/metrics", self.files.ca_cert) if server.real \
                    else {}
                for t in shapes:
                    rows[server, t.name]["rss_mb"] = rss
                    rows[server, t.name]["reviews"] = reviews
        for t in shapes:
            for server in servers:
                null = next(s for s in servers if not s.real and s.loop == server.loop)
                _summarise(rows[server, t.name], rows[null, t.name])
        return list(rows.values())


def _summarise(row: dict[str, Any], null: dict[str, Any]) -> None:
    rps = [r["throughput_rps"] for r in row["saturation_rounds"]]
    row["throughput_rps"] = spread(rps)
    row["saturation_p99_ms"] = spread([r["p99_ms"] for r in row["saturation_rounds"]])
    row["paced_p99_ms"] = spread([r["latency"]["p99_ms"] for r in row["paced_rounds"]])
    row["paced_p50_ms"] = spread([r["latency"]["p50_ms"] for r in row["paced_rounds"]])
    row["failed"] = sum(r.get("non_2xx", 0) for r in row["saturation_rounds"]) + sum(
        r["completed"] - r["ok"] + sum(r["errors"].values()) for r in row["paced_rounds"])
    if row["real"]:
        row["ratio_rounds"] = [r["throughput_rps"] / n["throughput_rps"] for r, n in zip(
            row["saturation_rounds"], null["saturation_rounds"], strict=True)]
        row["ratio"] = spread(row["ratio_rounds"])
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
    tmp = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    bench = Bench(tmp, quick, rate)
    world = workload.build_world()
    (tmp / "nodes.json").write_bytes(workload.node_list_bytes(world, NODES))
    (tmp / "catalog.json").write_bytes(workload.catalog_bytes(world))
    real = ("webhook", "serve", "--nodes", str(tmp / "nodes.json"), "--catalog",
            str(tmp / "catalog.json"), "--offline")

    def servers(label: str, args: tuple[str, ...]) -> list[Server]:
        return [s for loop in loops for s in (Server("null webhook", loop, False,
                                                     ("bench.null_webhook",)),
                                              Server(label, loop, True, args))]

    rows = bench.pair(servers("layer-locality --demo (8 nodes)", ("webhook", "serve", "--demo")),
                      [e2e_traffic.demo(world)], paced=False)
    rows += bench.pair(servers(f"layer-locality {NODES:,} nodes", real),
                       [e2e_traffic.shaped(world), e2e_traffic.distinct(world)], paced=True)
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
        ["server", "loop", "pods", "sat rps", "ratio", "sat p99 ms", "paced p99 ms",
         "failed", "RSS MB"],
        [[r["server"], r["loop"], r["pods"], _fmt3(r["throughput_rps"], 0),
          _fmt3(r["ratio"]) if r["real"] else "-", _fmt3(r["saturation_p99_ms"], 1),
          _fmt3(r["paced_p99_ms"], 1), r["failed"], r["rss_mb"]] for r in rows]))
    targets = [{
        "target": f"e2e throughput >= {r['target_ratio']}x the null webhook at {NODES:,} nodes, "
                  f"{'workload-shaped' if r['pods'] == 'shaped' else 'every pod distinct'}"
                  + ("" if r["loop"] == "asyncio" else f" ({r['loop']})"),
        "measured": f"{r['ratio']['median']:.2f}x (median of {bench.rounds}; "
                    f"{r['ratio']['min']:.2f}-{r['ratio']['max']:.2f}), "
                    f"{r['throughput_rps']['median']:,.0f} vs null "
                    f"{_null_of(rows, r)['throughput_rps']['median']:,.0f}/s",
        "met": bool(r["met"]),
        "why": "" if r["met"] else "the review's own CPU per request (see docs/performance.md)",
    } for r in rows if r["real"] and r.get("target_ratio") is not None]
    return {"rows": rows, "tool": "wrk" if bench.wrk else "python-closed-loop", "rate": rate,
            "duration_s": bench.duration, "paced_s": bench.paced, "rounds": bench.rounds,
            "pinning": pinning, "loops": list(loops), "targets": targets,
            "met": all(t["met"] for t in targets), "quick": quick}


def _null_of(rows: list[dict[str, Any]], row: dict[str, Any]) -> dict[str, Any]:
    return next(n for n in rows if not n["real"] and n["pods"] == row["pods"]
                and n["loop"] == row["loop"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="short smoke run")
    parser.add_argument("--rate", type=float, default=500.0, help="paced offered rate")
    parser.add_argument("--event-loop", choices=("asyncio", "uvloop", "both"),
                        default="asyncio", help="loop of every server (both: twice the time)")
    args = parser.parse_args(argv)
    loops = ("asyncio", "uvloop") if args.event_loop == "both" else (args.event_loop,)
    result = run(quick=args.quick, rate=args.rate, loops=loops)
    print(f"-> {report.write('e2e' if loops == ('asyncio',) else 'e2e-loops', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
