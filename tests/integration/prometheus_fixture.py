"""A real Prometheus (Debian's `prometheus` package) on 127.0.0.1, and a stand-in exporter of the
outcome metrics.

Prometheus runs with its storage in a temporary directory, `--web.listen-address` on a free
loopback port, and the scrape and rule configuration a test writes. A missing binary fails under
CI (tests.helpers.in_ci) and skips elsewhere, like the docker-registry fixture.

The stand-in exporter serves the outcome series (binds, bytes present at bind, kubelet pulls,
bytes avoided) under their contract names. `serve --demo` has no cluster, so no pod is ever
bound and kubelet sends no event: without this exporter the panels and report figures for the
three questions could only be checked to run, not to return the right numbers. Each scrape adds
the same batch of observations (BATCH), so every series grows in proportion: ratios and
quantiles over any window equal those of one batch, worked out by hand in the test.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from tests.helpers import fail_or_skip
from webhook.devcluster.processes import free_port, stop_child
from webhook.serving.metrics import PULL_BUCKETS, RATIO_BUCKETS

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback, no proxy
GiB = 1 << 30


def require_tool(name: str) -> str:
    """The path of a binary from Debian's prometheus package (prometheus, promtool)."""
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists()
                                   else None)
    if found is None:
        reason = (f"{name} is not installed (Debian package `prometheus`; `make system-deps` "
                  "installs it)")
        fail_or_skip(reason)
    return found


def get_json(url: str) -> Any:
    assert url.startswith("http://127.0.0.1:"), url
    with _OPENER.open(url, timeout=10) as response:
        return orjson.loads(response.read())


@dataclass
class PrometheusServer:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def query(self, expression: str, at: float | None = None) -> dict[str, Any]:
        """The whole /api/v1/query answer (status, data or error); never raises on a 4xx."""
        params = urllib.parse.urlencode({"query": expression,
                                         **({"time": f"{at:.3f}"} if at is not None else {})})
        try:
            answer: dict[str, Any] = get_json(f"{self.url}/api/v1/query?{params}")
        except urllib.error.HTTPError as exc:  # 400/422 carry the PromQL error as JSON
            answer = orjson.loads(exc.read())
        return answer

    def vector(self, expression: str, at: float | None = None) -> list[dict[str, Any]]:
        answer = self.query(expression, at)
        assert answer["status"] == "success", (expression, answer)
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def wait_for(self, expression: str, what: str, tries: int = 300) -> list[dict[str, Any]]:
        """Poll until the expression returns data (bounded tries, not a timing assertion)."""
        for _ in range(tries):
            if self.process.poll() is not None:
                pytest.fail(f"prometheus exited:\n{self.log()}")
            result = self.vector(expression)
            if result:
                return result
            time.sleep(0.1)
        pytest.fail(f"prometheus never saw {what} ({expression}):\n{self.log()}")

    def stop(self) -> None:
        stop_child(self.process, timeout=15)


def start_prometheus(binary: str, workdir: Path, config: dict[str, Any]) -> PrometheusServer:
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config))
    log_path = workdir / "prometheus.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            [binary, f"--config.file={config_path}", f"--storage.tsdb.path={workdir / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=info"],
            stdout=log_file, stderr=subprocess.STDOUT, cwd=workdir, env={"PATH": "/usr/bin:/bin"})
    server = PrometheusServer(process, port, log_path)
    for _ in range(600):
        if process.poll() is not None:
            raise RuntimeError(f"prometheus exited:\n{server.log()}")
        try:
            with _OPENER.open(f"{server.url}/-/ready", timeout=2) as response:
                if response.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"prometheus did not start:\n{server.log()}")


# What one scrape of the stand-in exporter adds (see the module docstring).
BATCH: dict[str, Any] = {
    "binds": {"top": 3, "preferred": 1, "other": 1},
    "present": [0.2, 0.6, 0.8, 0.95],
    "pull_seconds": {"true": [0.4, 0.8, 1.5, 3.0], "false": [2.5, 4.0, 7.0, 20.0]},
    "pulls": {("true", "present"): 3, ("true", "pulled"): 1,
              ("false", "present"): 1, ("false", "pulled"): 3},
    "bytes_avoided": GiB,
}


class OutcomeExporter:
    """Serves /metrics on 127.0.0.1 with the outcome series; each GET adds one BATCH."""

    def __init__(self) -> None:
        registry = CollectorRegistry(auto_describe=True)
        self._binds = Counter("layer_locality_binds", "stand-in", ["outcome"], registry=registry)
        # The webhook's own bucket layouts: Prometheus merges the webhook's (zero) series and
        # these by `le`, as it would merge two replicas.
        self._present = Histogram("layer_locality_bind_present_ratio", "stand-in",
                                  buckets=RATIO_BUCKETS, registry=registry)
        self._pull = Histogram("layer_locality_image_pull_seconds", "stand-in", ["patched"],
                               buckets=PULL_BUCKETS, registry=registry)
        self._pulls = Counter("layer_locality_image_pulls", "stand-in", ["patched", "result"],
                              registry=registry)
        self._avoided = Counter("layer_locality_bytes_avoided", "stand-in", registry=registry)
        self._unparsed = Counter("layer_locality_pull_events_unparsed", "stand-in",
                                 registry=registry)
        self._lock = threading.Lock()
        self.batches = 0
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exporter.scrape()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE_LATEST)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._registry = registry
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def scrape(self) -> bytes:
        with self._lock:  # a page always holds whole batches
            for outcome, count in BATCH["binds"].items():
                self._binds.labels(outcome=outcome).inc(count)
            for value in BATCH["present"]:
                self._present.observe(value)
            for patched, values in BATCH["pull_seconds"].items():
                for value in values:
                    self._pull.labels(patched=patched).observe(value)
            for (patched, result), count in BATCH["pulls"].items():
                self._pulls.labels(patched=patched, result=result).inc(count)
            self._avoided.inc(BATCH["bytes_avoided"])
            self._unparsed.inc(0)
            self.batches += 1
            return generate_latest(self._registry)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
