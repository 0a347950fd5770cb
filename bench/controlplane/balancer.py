"""The TCP balancer on the webhook's URL (tests/kit/tcp_balancer.py, as a Service's kube-proxy
balances connections) in front of the webhook's replicas, or of null webhooks in their place
(tests/kit/null_webhook.py), for bench.controlplane."""

from __future__ import annotations

import ssl
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

import orjson

ROOT = Path(__file__).resolve().parents[2]
NULL_MODES = ("null", "null-direct")  # null webhooks behind the balancer / on the URL itself


class Balancer:
    """The balancer's process and what it balances to: "replicas" or one of NULL_MODES. The
    connections each backend received are recorded in `result["balancer_connections"]`."""

    def __init__(self, cluster: Any, root: Path, result: dict[str, Any]) -> None:
        self.cluster, self.root, self.result = cluster, root, result
        self.proxy: subprocess.Popen[bytes] | None = None
        self.proxy_log: IO[bytes] | None = None
        self.backends = "replicas"

    def start_proxy(self, backends: Sequence[int]) -> None:
        """The TCP balancer on the webhook's URL, to `backends` (a running one is replaced)."""
        self.stop_proxy()
        log = self.root / "l4proxy.log"
        self.proxy_log = open(log, "ab")  # noqa: SIM115 (closed in stop_proxy())
        self.proxy = subprocess.Popen(
            [sys.executable, "-m", "tests.kit.tcp_balancer", "--listen",
             str(self.cluster.webhook_port), *(a for p in backends for a in ("--backend", str(p)))],
            stdout=subprocess.PIPE, stderr=self.proxy_log, cwd=ROOT)
        assert self.proxy.stdout is not None
        line = self.proxy.stdout.readline()
        if b"listening" not in line:
            raise RuntimeError(f"l4proxy did not start: {line!r} (see {log})")

    def stop_proxy(self) -> list[int]:
        """Stop the balancer; the connections each backend received."""
        if self.proxy is None:
            return []
        proxy, self.proxy = self.proxy, None
        proxy.terminate()
        counts: list[int] = []
        try:
            out, _ = proxy.communicate(timeout=10)
            if out:
                counts = orjson.loads(out.splitlines()[-1])["connections"]
                self.result.setdefault("balancer_connections", []).append(
                    {"backends": self.backends, "connections": counts})
        except Exception:
            proxy.kill()
            proxy.wait()
        assert self.proxy_log is not None
        self.proxy_log.close()
        return counts

    def start_null(self, direct: bool) -> None:
        """Null webhooks (tests/kit/null_webhook.py: aiohttp, the same TLS, answers allowed with
        no patch) in place of the replicas: two behind the balancer, or (`direct`) one on the
        webhook's URL itself with no balancer: the floor of a Python webhook's latency at
        this API server on this machine, with and without the balancer's hop."""
        from webhook.devcluster.processes import fetch, free_port, spawn, wait_until

        certs = self.cluster.webhook_certs
        context = ssl.create_default_context(cafile=str(certs.ca_cert))
        if direct:
            self.stop_proxy()
        ports = [self.cluster.webhook_port] if direct else [free_port(), free_port()]
        for i, port in enumerate(ports):
            process = spawn(f"null-webhook-{i}", [
                sys.executable, "-m", "tests.kit.null_webhook", "--listen", f"127.0.0.1:{port}",
                "--tls-cert", str(certs.cert), "--tls-key", str(certs.key)],
                self.root / f"null-webhook-{i}.log", cwd=ROOT)
            self.cluster.plane.processes[f"null-webhook-{i}"] = process
        self.cluster.plane.save()
        for i, port in enumerate(ports):
            def ready(url: str = f"https://127.0.0.1:{port}/readyz") -> bool:
                return fetch(url, context) is not None

            wait_until(self.cluster.plane.processes[f"null-webhook-{i}"], ready, 60.0,
                       "ready (/readyz)")
        if not direct:
            self.start_proxy(ports)

    def stop_null(self, replica_ports: Sequence[int]) -> None:
        """The null webhooks stopped, the balancer to the replicas again."""
        from webhook.devcluster.processes import stop

        for i in range(2):
            process = self.cluster.plane.processes.pop(f"null-webhook-{i}", None)
            if process is not None:
                stop(process)
        self.start_proxy(replica_ports)
