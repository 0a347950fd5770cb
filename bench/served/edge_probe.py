"""Probe of the HTTPS edge: `python -m bench.served.edge_probe [--connections N] [--hold S]`.

Starts `layer-locality serve --demo` on 127.0.0.1 and prints, as JSON:

- big_body: RSS while one review just under 7 MiB is answered (many small JSON objects, or
  one huge string): peak over the baseline, and what is left after 1 s and 3 s;
- idle: KiB per idle TLS connection (--idle of them, handshake done, no request);
- rss: the server's VmRSS (KiB) at baseline, the peak while N TLS connections are open (half
  idle after the handshake, half sending headers then one body byte every --drip seconds),
  and 10 s after they closed, with the seconds until half the growth over the baseline was
  given back (rss_half_back_seconds); how many connections the server refused or closed,
  and the time /healthz and a valid review took while they were open;
- compressed: the time to the 415 for a gzip body declared in the headers but never sent,
  and the time /healthz took meanwhile;
- logs: server log lines per aborted request body (--aborts of them) and per oversized header.

Only loopback traffic. Not part of the test run (no assertions): the tests in
tests/integration/test_edge_limits.py assert the bounds.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import http.client
import json
import resource
import socket
import ssl
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from bench import report
from bench.report import REPO
from tests.kit import workload
from webhook.devcluster import processes as procs
from webhook.devcluster.processes import free_port
from webhook.serving.certs import CertificateFiles, generate

SLOW_HEAD = (b"POST /mutate HTTP/1.1\r\nHost: probe\r\nContent-Type: application/json\r\n"
             b"Content-Length: 100000\r\n\r\n{")


def review_body(uid: str = "probe") -> bytes:
    return orjson.dumps(workload.review_doc(workload.pod("probe-1", ["python:3.11-slim"]), uid))


class Edge:
    """A running `serve --demo` child and how to talk to it."""

    def __init__(self, proc: Any, port: int, files: CertificateFiles, log: Path) -> None:
        self.proc, self.port, self.files, self.log = proc, port, files, log
        self.context = ssl.create_default_context(cafile=str(files.ca_cert))

    def tls(self, timeout: float = 10.0) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        try:
            return self.context.wrap_socket(raw, server_hostname="127.0.0.1")
        except BaseException:
            raw.close()
            raise

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, bytes, float]:
        """One request on a fresh connection: status, body, seconds taken."""
        started = time.perf_counter()
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.context,
                                           timeout=10)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            return resp.status, resp.read(), time.perf_counter() - started
        finally:
            conn.close()

    def metrics(self) -> str:
        return self.request("GET", "/metrics")[1].decode()

    def log_lines(self) -> int:
        return len(self.log.read_bytes().splitlines())


@contextlib.contextmanager
def edge(extra: Sequence[str] = (), cpus: frozenset[int] | None = None) -> Iterator[Edge]:
    with tempfile.TemporaryDirectory(prefix="edge-probe-") as tmp:
        files = generate("layer-locality", "layer-locality", Path(tmp) / "certs", days=1,
                         extra_sans=["127.0.0.1"])
        port = free_port()
        log = Path(tmp) / "serve.log"
        argv = procs.python("-m", "webhook", "serve", "--demo", "--listen", f"127.0.0.1:{port}",
                            "--tls-cert", str(files.cert), "--tls-key", str(files.key), *extra)
        with procs.started(argv, log, cpus=cpus, cwd=REPO) as proc:
            procs.wait_https(f"https://127.0.0.1:{port}/readyz", files.ca_cert, proc)
            yield Edge(proc, port, files, log)


def open_many(server: Edge, count: int, head: bytes = b"") -> tuple[list[ssl.SSLSocket], int]:
    """`count` TLS connections (each sends `head` when given); returns the open ones and how
    many failed (refused or closed during the handshake)."""

    def one(_: int) -> ssl.SSLSocket | None:
        try:
            sock = server.tls()
            if head:
                sock.sendall(head)
            return sock
        except OSError:
            return None

    with concurrent.futures.ThreadPoolExecutor(32) as pool:
        opened = list(pool.map(one, range(count)))
    alive = [s for s in opened if s is not None]
    return alive, count - len(alive)


def drip(socks: list[ssl.SSLSocket], every: float, stop: threading.Event) -> None:
    """One body byte per connection every `every` seconds, until `stop`."""
    while not stop.wait(every):
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.send(b" ")


def probe_rss(server: Edge, connections: int, hold: float, drip_every: float) -> dict[str, Any]:
    pid = server.proc.pid
    baseline = report.status_kib(pid)
    stop = threading.Event()
    samples: list[int] = []
    idle, idle_failed = open_many(server, connections // 2)
    slow, slow_failed = open_many(server, connections - connections // 2, SLOW_HEAD)
    dripper = threading.Thread(target=drip, args=(slow, drip_every, stop), daemon=True)
    dripper.start()
    during: dict[str, Any] = {}
    try:
        deadline = time.monotonic() + hold
        while time.monotonic() < deadline:
            samples.append(report.status_kib(pid))
            time.sleep(0.2)
        health = server.request("GET", "/healthz")
        mutate = server.request("POST", "/mutate", review_body(),
                                {"Content-Type": "application/json"})
        during = {"healthz_status": health[0], "healthz_seconds": round(health[2], 3),
                  "review_status": mutate[0], "review_seconds": round(mutate[2], 3)}
        samples.append(report.status_kib(pid))
    finally:
        stop.set()
        dripper.join()
        for sock in idle + slow:
            sock.close()
    # How soon the memory comes back once they closed: half of the growth over the baseline
    # (the VmHWM peak), sampled every 0.2 s for 10 s (this was a test's timed wait).
    peak = report.status_kib(pid, "VmHWM")
    closed_at = time.monotonic()
    after: list[int] = []
    half_back_seconds = None
    for _ in range(50):
        time.sleep(0.2)
        after.append(report.status_kib(pid))
        if half_back_seconds is None and after[-1] - baseline <= (peak - baseline) / 2:
            half_back_seconds = round(time.monotonic() - closed_at, 1)
    metrics = server.metrics()
    return {
        "connections": connections, "client_failed": idle_failed + slow_failed,
        "rss_baseline_kib": baseline, "rss_peak_during_kib": max(samples),
        "vmhwm_kib": peak, "rss_after_kib": after[-1],
        "rss_half_back_seconds": half_back_seconds,  # None: not within 10 s
        **during,
        "metrics": [line for line in metrics.splitlines()
                    if line.startswith(("layer_locality_connections", "layer_locality_open",
                                        "layer_locality_bad_requests"))],
    }


def big_review(size: int, shape: str) -> bytes:
    """A review just under `size` bytes: a pod whose container has many small env entries
    (`objects`: the costliest JSON for a parser) or one huge annotation (`string`)."""
    pod = workload.pod("big-1", ["python:3.11-slim"])
    doc = workload.review_doc(pod, "big")
    room = size - len(orjson.dumps(doc)) - 64
    if shape == "string":
        pod["metadata"]["annotations"] = {"example.com/blob": "x" * room}
    else:
        entry = len(orjson.dumps({"name": "V0000000", "value": "v"})) + 1
        pod["spec"]["containers"][0]["env"] = [{"name": f"V{i:07d}", "value": "v"}
                                               for i in range(room // entry)]
    return orjson.dumps(doc)


def probe_big_body(server: Edge, size: int, shape: str) -> dict[str, Any]:
    """RSS while one review of `size` bytes is read, parsed and answered: the peak over the
    baseline (VmHWM, reset first through clear_refs), and what is left a second and three
    seconds later."""
    pid = server.proc.pid
    body = big_review(size, shape)
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    baseline = report.status_kib(pid)
    status, answer, seconds = server.request("POST", "/mutate", body,
                                             {"Content-Type": "application/json"})
    peak = report.status_kib(pid, "VmHWM")
    time.sleep(1.0)
    after_1s = report.status_kib(pid)
    time.sleep(2.0)
    return {"shape": shape, "bytes": len(body), "status": status,
            "patched": b'"patch"' in answer, "seconds": round(seconds, 3),
            "rss_baseline_kib": baseline, "peak_over_baseline_kib": peak - baseline,
            "after_1s_over_baseline_kib": after_1s - baseline,
            "after_3s_over_baseline_kib": report.status_kib(pid) - baseline}


def probe_idle(server: Edge, connections: int) -> dict[str, Any]:
    """Memory per idle TLS connection (handshake done, no request): RSS with them open."""
    pid = server.proc.pid
    before = report.status_kib(pid)
    socks, failed = open_many(server, connections)
    try:
        time.sleep(1.0)
        during = report.status_kib(pid)
    finally:
        for sock in socks:
            sock.close()
    return {"connections": len(socks), "failed": failed, "rss_before_kib": before,
            "rss_open_kib": during,
            "kib_per_connection": round((during - before) / max(1, len(socks)), 1)}


def probe_compressed(server: Edge) -> dict[str, Any]:
    """A gzip body announced (6 MB) but never sent: the answer must not wait for it."""
    result: dict[str, Any] = {}
    sock = server.tls()
    try:
        started = time.perf_counter()
        sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: probe\r\nContent-Type: application/json\r\n"
                     b"Content-Encoding: gzip\r\nContent-Length: 6000000\r\n\r\n")
        health = server.request("GET", "/healthz")
        sock.settimeout(10)
        try:
            first = sock.recv(256).split(b"\r\n", 1)[0].decode()
        except TimeoutError:
            first = "no answer within 10 s"
        result = {"answer": first, "answer_seconds": round(time.perf_counter() - started, 3),
                  "healthz_status": health[0], "healthz_seconds": round(health[2], 3)}
    finally:
        sock.close()
    return result


def probe_logs(server: Edge, aborts: int) -> dict[str, Any]:
    before = server.log_lines()
    for _ in range(aborts):
        sock = server.tls()
        sock.sendall(SLOW_HEAD + b"x" * 100)
        time.sleep(0.05)
        sock.close()
    time.sleep(1.0)
    after_aborts = server.log_lines()
    sock = server.tls()
    try:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: probe\r\nX-Big: " + b"a" * 20000
                     + b"\r\n\r\n")
        sock.settimeout(5)
        with contextlib.suppress(OSError):
            sock.recv(256)
    finally:
        sock.close()
    time.sleep(1.0)
    return {"aborts": aborts, "log_lines_per_abort": (after_aborts - before) / aborts,
            "log_lines_oversized_header": server.log_lines() - after_aborts}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.served.edge_probe", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--connections", type=int, default=2000)
    parser.add_argument("--hold", type=float, default=5.0, help="seconds to hold them open")
    parser.add_argument("--drip", type=float, default=1.0, help="seconds between body bytes")
    parser.add_argument("--aborts", type=int, default=20)
    parser.add_argument("--idle", type=int, default=400, help="idle TLS connections to open")
    parser.add_argument("--big-body", type=int, default=(7 << 20) - 4096,
                        help="bytes of the big review (the limit is 7 MiB)")
    parser.add_argument("--serve-arg", action="append", default=[],
                        help="extra flag for serve, e.g. --serve-arg=--max-connections=500")
    parser.add_argument("--show-log", action="store_true", help="include the server's log")
    args = parser.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, max(soft, 2 * args.connections + 256))
    resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))  # the child inherits it
    with edge(args.serve_arg) as server:
        # First, while the process is fresh: idle connections, then the big bodies.
        idle = probe_idle(server, args.idle)
        big = [probe_big_body(server, args.big_body, shape) for shape in ("objects", "string")]
        out: dict[str, Any] = {"big_body": big, "idle": idle,
               "rss": probe_rss(server, args.connections, args.hold, args.drip),
               "compressed": probe_compressed(server),
               "logs": probe_logs(server, args.aborts)}
        if args.show_log:
            out["log"] = server.log.read_text().splitlines()
    json.dump(out, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
