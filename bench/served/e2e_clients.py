"""The end-to-end benchmark's clients and probes: wrk, the Python load generator, a metrics
scrape and a process's CPU time."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson

from bench.report import REPO
from webhook.devcluster import processes as procs
from webhook.report import promread
from webhook.report.series import sum_by

_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1000.0}


def ensure_wrk() -> str | None:
    path = shutil.which("wrk")
    if path is None and os.geteuid() == 0:
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", "wrk"],
                       check=False, capture_output=True, env=env)
        path = shutil.which("wrk")
    return path


def run_wrk(wrk: str, url: str, script: Path, duration: float, connections: int,
            cpus: frozenset[int] | None, script_args: tuple[str, ...] = ()) -> dict[str, Any]:
    """`wrk` with a connection per thread (so each thread's Lua state is one connection's)."""
    argv = [wrk, f"-t{connections}", f"-c{connections}", f"-d{int(duration)}s", "--latency",
            "-s", str(script), url, *(["--", *script_args] if script_args else [])]
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
                cpus: frozenset[int] | None = None, patch_sizes: bool = False,
                ) -> dict[str, Any]:
    argv = procs.python("-m", "bench.served.loadgen", "--url", url, "--ca", str(ca), "--bodies",
                        str(bodies), "--mode", mode, "--rate", str(rate), "--duration",
                        str(duration), "--connections", str(connections), "--warmup",
                        str(warmup), *(["--patch-sizes"] if patch_sizes else []))
    out = subprocess.run(argv, cwd=REPO, check=True, capture_output=True,
                         preexec_fn=procs.pinned_to(cpus)).stdout
    result: dict[str, Any] = orjson.loads(out.splitlines()[-1])
    return result


def scrape(url: str, ca: Path, metric: str, *labels: str) -> dict[str, float]:
    """The samples of counter `metric` summed by the values of `labels`, joined with "/" ("" for
    a label a sample lacks; {} when the metric is absent)."""
    samples = promread.scrape(url, promread.TLS(ca=str(ca)))
    return {"/".join(key): value for key, value in sum_by(samples, metric, labels).items()}


def scrape_reviews(url: str, ca: Path) -> dict[str, float]:
    """Reviews answered so far, by "result/reason"."""
    return scrape(url, ca, "layer_locality_reviews_total", "result", "reason")
