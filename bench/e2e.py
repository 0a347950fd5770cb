"""2. End to end over TLS with keep-alive: the real server process (`python -m webhook serve`)
against a null aiohttp TLS webhook (bench/null_webhook.py) on the same machine, driven by the
same load generators in a separate process:

- saturation: `wrk` (Debian package; installed with apt-get when missing and running as
  root) with a Lua script posting AdmissionReviews over keep-alive connections; without wrk
  the Python client (bench/loadgen.py) in closed-loop mode, which the results then say;
- fixed offered rate: bench/loadgen.py paced (wrk2 is not in Debian), latency from the
  scheduled send time.

Each server runs next to its null webhook (idle while the other is loaded); saturation runs
alternate between the two (3 rounds, median ratio), so both see the same machine. Servers:
the real one with the embedded demo inventory (`--demo`, 8 nodes) and with a synthetic
5,000-node inventory (`--nodes FILE --catalog FILE --offline`). Only 127.0.0.1.
"""

from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import orjson

from bench import procs, report, workload
from webhook.certs import generate

TARGET_RATIO = 0.70
ROUNDS = 3
_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def ensure_wrk() -> str | None:
    path = shutil.which("wrk")
    if path is None and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "wrk"],
                       check=False, capture_output=True, env=env)
        path = shutil.which("wrk")
    return path


def lua_script(bodies: list[bytes], path: Path) -> Path:
    lines = ["local bodies = {}"]
    for body in bodies:
        lines.append(f"bodies[#bodies + 1] = [==[{body.decode()}]==]")
    lines += [
        "local requests = {}",
        "local i = 0",
        "init = function(args)",
        "  for k, body in ipairs(bodies) do",
        '    requests[k] = wrk.format("POST", "/mutate", '
        '{["Content-Type"] = "application/json"}, body)',
        "  end",
        "end",
        "request = function()",
        "  i = i % #requests + 1",
        "  return requests[i]",
        "end",
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def run_wrk(wrk: str, url: str, script: Path, duration: float, connections: int
            ) -> dict[str, Any]:
    argv = [wrk, "-t1", f"-c{connections}", f"-d{int(duration)}s", "--latency", "-s",
            str(script), url]
    out = subprocess.run(argv, check=True, capture_output=True, text=True).stdout
    result: dict[str, Any] = {"tool": "wrk", "connections": connections, "raw": out}
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


def _saturate(wrk: str | None, url: str, script: Path, ca: Path, bodies: Path,
              duration: float) -> dict[str, Any]:
    if wrk:
        return run_wrk(wrk, url, script, duration, 16)
    result = {"tool": "python-closed-loop",
              **run_loadgen(url, ca, bodies, "closed", duration, connections=16)}
    result["p50_ms"] = result["latency"]["p50_ms"]
    result["p99_ms"] = result["latency"]["p99_ms"]
    return result


def run_loadgen(url: str, ca: Path, bodies: Path, mode: str, duration: float,
                rate: float = 0.0, connections: int = 32) -> dict[str, Any]:
    argv = procs.python("-m", "bench.loadgen", "--url", url, "--ca", str(ca), "--bodies",
                        str(bodies), "--mode", mode, "--rate", str(rate), "--duration",
                        str(duration), "--connections", str(connections))
    out = subprocess.run(argv, cwd=procs.REPO, check=True, capture_output=True).stdout
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


def run(quick: bool = False, rate: float = 500.0) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    files = generate("layer-locality", "bench", tmp / "certs",
                     extra_sans=["127.0.0.1", "localhost"])
    world = workload.build_world()
    nodes = 5_000
    (tmp / "nodes.json").write_bytes(workload.node_list_bytes(world, nodes))
    (tmp / "catalog.json").write_bytes(workload.catalog_bytes(world))
    demo_pods = [workload.pod(f"demo-{i}", [workload.short_ref(a.ref), workload.short_ref(b.ref)])
                 for i, (a, b) in enumerate(zip(world.bases, world.bases[7:] + world.bases[:7],
                                                strict=True))]
    bodies = {
        "synthetic": workload.review_bodies(world, 50),
        "demo": [orjson.dumps(workload.review_doc(p, f"00000000-0000-4000-8000-{i:012d}"))
                 for i, p in enumerate(demo_pods)],
    }
    for name, items in bodies.items():
        (tmp / f"{name}.json").write_bytes(orjson.dumps([b.decode() for b in items]))
        lua_script(items, tmp / f"{name}.lua")
    tls = ["--tls-cert", str(files.cert), "--tls-key", str(files.key)]
    null_args = ["-m", "bench.null_webhook"]
    pairs = [
        ("layer-locality --demo (8 nodes)", "demo", ["-m", "webhook", "serve", "--demo"]),
        (f"layer-locality {nodes} nodes", "synthetic",
         ["-m", "webhook", "serve", "--nodes", str(tmp / "nodes.json"), "--catalog",
          str(tmp / "catalog.json"), "--offline"]),
    ]
    wrk = ensure_wrk()
    duration = 3.0 if quick else 6.0
    paced = 4.0 if quick else 10.0
    rounds = 2 if quick else ROUNDS
    rows: list[dict[str, Any]] = []
    for label, workload_name, args in pairs:
        ports = procs.free_port(), procs.free_port()
        bases = [f"https://127.0.0.1:{port}" for port in ports]
        argvs = [procs.python(*a, "--listen", f"127.0.0.1:{port}", *tls)
                 for a, port in zip((null_args, args), ports, strict=True)]
        script = tmp / f"{workload_name}.lua"
        bodies_file = tmp / f"{workload_name}.json"
        with procs.started(argvs[0], tmp / f"null-{workload_name}.log") as null, \
             procs.started(argvs[1], tmp / f"server-{workload_name}.log") as server:
            procs.wait_https(f"{bases[0]}/readyz", files.ca_cert, null)
            procs.wait_https(f"{bases[1]}/readyz", files.ca_cert, server)
            pair: list[dict[str, Any]] = [
                {"target": "null webhook", "pods": workload_name, "real": False,
                 "saturation_rounds": []},
                {"target": label, "pods": workload_name, "real": True, "saturation_rounds": []},
            ]
            for base in bases:  # warm-up, discarded
                _saturate(wrk, f"{base}/mutate", script, files.ca_cert, bodies_file, 2)
            for _ in range(rounds):  # interleaved, so both see the same machine
                for row, base in zip(pair, bases, strict=True):
                    row["saturation_rounds"].append(_saturate(
                        wrk, f"{base}/mutate", script, files.ca_cert, bodies_file, duration))
            for row, base, proc in zip(pair, bases, (null, server), strict=True):
                row["fixed_rate"] = run_loadgen(f"{base}/mutate", files.ca_cert, bodies_file,
                                                "paced", paced, rate=rate, connections=32)
                row["rss_mb"] = report.rss_kib(proc.pid) / 1024
            pair[1]["reviews"] = scrape_reviews(f"{bases[1]}/metrics", files.ca_cert)
        ratios = [r["throughput_rps"] / n["throughput_rps"] for n, r in zip(
            pair[0]["saturation_rounds"], pair[1]["saturation_rounds"], strict=True)]
        for row in pair:
            rps = [r["throughput_rps"] for r in row["saturation_rounds"]]
            best = sorted(row["saturation_rounds"], key=lambda r: r["throughput_rps"])
            row["saturation"] = best[len(best) // 2]  # the median round
            row["saturation_rps_rounds"] = rps
        pair[1]["throughput_ratio_rounds"] = ratios
        pair[1]["throughput_ratio_vs_null"] = statistics.median(ratios)
        pair[1]["met"] = pair[1]["throughput_ratio_vs_null"] >= TARGET_RATIO
        rows += pair
    print(f"\n[e2e] HTTPS keep-alive on 127.0.0.1; saturation: "
          f"{'wrk -t1 -c16' if wrk else 'Python closed loop, 16 connections (wrk missing)'}, "
          f"{duration:.0f}s x {rounds} interleaved rounds (median shown); fixed rate: Python paced "
          f"client, {rate:.0f}/s for {paced:.0f}s, 32 connections")
    print(report.table(
        ["server", "sat rps", "ratio", "sat p50", "sat p99", "rate", "done/s", "p50 ms",
         "p99 ms", "non-200", "patched", "RSS MB"],
        [[r["target"], r["saturation"]["throughput_rps"],
          r.get("throughput_ratio_vs_null", "-") if r["real"] else "-",
          r["saturation"]["p50_ms"], r["saturation"]["p99_ms"], rate,
          r["fixed_rate"]["throughput_rps"], r["fixed_rate"]["latency"]["p50_ms"],
          r["fixed_rate"]["latency"]["p99_ms"],
          r["fixed_rate"]["completed"] - r["fixed_rate"]["ok"] + sum(
              r["fixed_rate"]["errors"].values()) + r["saturation"].get("non_2xx", 0),
          r["fixed_rate"]["patched"], r["rss_mb"]] for r in rows]))
    for r in rows:
        for sat in r["saturation_rounds"]:
            sat.pop("raw", None)
    return {"rows": rows, "tool": "wrk" if wrk else "python-closed-loop", "rate": rate,
            "duration_s": duration, "target_ratio": TARGET_RATIO,
            "met": all(r["met"] for r in rows if r["real"]), "quick": quick}
