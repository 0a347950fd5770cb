"""Reviews under a flood of callers without an allowed certificate:
`python -m bench.served.callers_flood [--seconds S] [--flooders N] [--repeats R]`.

Starts `layer-locality serve --demo --client-ca CA` on 127.0.0.1 (bench.served.edge_probe.edge) and,
per repeat, measures the latency of reviews sent by an "API server" client (a certificate of
the client CA named kube-apiserver, one keep-alive connection, one review at a time) for S
seconds alone, then for S seconds while N threads flood the port: each opens a new TLS
connection, half of them without a certificate (POST /mutate: 401), half with a certificate
of another CA (refused at TLS). Prints, as JSON: review p50/p99 (ms) alone and under the
flood, refusals per second, the server's VmRSS (KiB) before, at peak and after.

Fairness on 2 cores: the server is pinned to the last CPU, the clients (the reviewer and the
flood, all threads of this process) to the others (webhook.devcluster.processes.pinning), so the
flood's own CPU does not land on the server's core; what remains is the server's own work per
refused connection (handshake, 401). Only loopback traffic. Not part of the test run.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import ssl
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.served.edge_probe import Edge, edge, review_body
from webhook.devcluster import processes as procs
from webhook.serving.certs import PEM, Authority, issue, key_pem, new_authority
from webhook.sim.results import nearest_rank


def client_files(directory: Path, name: str, authority: Authority) -> tuple[str, str]:
    key, cert = issue(authority, name, days=1, server=False, client=True)
    stem = directory / f"{name}-{cert.serial_number:x}"
    stem.with_suffix(".crt").write_bytes(cert.public_bytes(PEM))
    stem.with_suffix(".key").write_bytes(key_pem(key))
    return str(stem.with_suffix(".crt")), str(stem.with_suffix(".key"))


def context(ca: Path, pair: tuple[str, str] | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(ca))
    if pair is not None:
        ctx.load_cert_chain(*pair)
    return ctx


def reviews(server: Edge, ctx: ssl.SSLContext, seconds: float) -> list[float]:
    """Seconds per review, one at a time on one keep-alive connection, for `seconds`."""
    body = review_body("flood")
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=10)
    took: list[float] = []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            started = time.perf_counter()
            conn.request("POST", "/mutate", body=body,
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            assert response.status == 200, response.status
            took.append(time.perf_counter() - started)
    finally:
        conn.close()
    return took


def flood(server: Edge, contexts: Sequence[ssl.SSLContext], stop: threading.Event,
          counts: list[int]) -> None:
    """New connections in a loop until `stop`, alternating the contexts; counts refusals."""
    i = 0
    while not stop.is_set():
        ctx = contexts[i % len(contexts)]
        i += 1
        conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=ctx, timeout=10)
        try:
            conn.request("POST", "/mutate", body=b"{}",
                         headers={"Content-Type": "application/json"})
            status = conn.getresponse().status
            counts[0 if status == 401 else 2] += 1
        except (ssl.SSLError, ConnectionError):
            counts[1] += 1
        except OSError:
            counts[2] += 1
        finally:
            conn.close()


def rss(pid: int) -> int:
    match = re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text())
    return int(match[1]) if match else 0


def one_repeat(server: Edge, good: ssl.SSLContext, flooders: Sequence[ssl.SSLContext],
               threads: int, seconds: float) -> dict[str, Any]:
    reviews(server, good, 1.0)  # warm-up
    alone = sorted(reviews(server, good, seconds))
    before = rss(server.proc.pid)
    stop, counts, peak = threading.Event(), [0, 0, 0], [before]
    workers = [threading.Thread(target=flood, args=(server, flooders, stop, counts))
               for _ in range(threads)]
    for worker in workers:
        worker.start()

    def sample() -> None:
        while not stop.wait(0.2):
            peak[0] = max(peak[0], rss(server.proc.pid))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        flooded = sorted(reviews(server, good, seconds))
    finally:
        stop.set()
        for worker in [*workers, sampler]:
            worker.join()
    time.sleep(3)
    return {
        "alone_ms": {"p50": 1000 * nearest_rank(alone, 50),
                     "p99": 1000 * nearest_rank(alone, 99), "n": len(alone)},
        "flood_ms": {"p50": 1000 * nearest_rank(flooded, 50),
                     "p99": 1000 * nearest_rank(flooded, 99), "n": len(flooded)},
        "refused_401_per_s": counts[0] / seconds, "refused_tls_per_s": counts[1] / seconds,
        "other": counts[2],
        "rss_kib": {"before": before, "peak": peak[0], "after": rss(server.proc.pid)},
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.served.callers_flood",
                                     description=__doc__)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--flooders", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    pins = procs.pinning()
    if pins is not None:
        os.sched_setaffinity(0, set(pins[1]))
    with tempfile.TemporaryDirectory(prefix="callers-flood-") as tmp:
        directory = Path(tmp)
        authority, stranger = new_authority("client CA"), new_authority("another CA")
        ca_file = directory / "client-ca.crt"
        ca_file.write_bytes(authority.cert.public_bytes(PEM))
        with edge(["--client-ca", str(ca_file)], cpus=pins[0] if pins else None) as server:
            good = context(server.files.ca_cert,
                           client_files(directory, "kube-apiserver", authority))
            flooders = [context(server.files.ca_cert, None),
                        context(server.files.ca_cert,
                                client_files(directory, "kube-apiserver", stranger))]
            runs = [one_repeat(server, good, flooders, args.flooders, args.seconds)
                    for _ in range(args.repeats)]
    print(json.dumps({"seconds": args.seconds, "flooders": args.flooders, "pinned": bool(pins),
                      "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
