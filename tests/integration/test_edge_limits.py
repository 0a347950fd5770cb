"""The HTTPS edge under hostile clients, against the real `serve --demo` process on 127.0.0.1:
many slow or idle TLS connections, bodies that never finish, compressed bodies, clients that
abort, oversized headers, a port already taken."""

from __future__ import annotations

import contextlib
import resource
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import decode_patch, fail_or_skip, pod, review
from webhook.config import Settings
from webhook.devcluster.processes import free_port
from webhook.serving.certs import CertificateFiles
from webhook.value_parsers import parse_size

DEPLOYMENT = Path(__file__).resolve().parents[2] / "manifests" / "base" / "deployment.yaml"
BODY_HEAD = (b"POST /mutate HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
             b"Content-Length: 100000\r\n\r\n{")


@dataclass
class Served:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    context: ssl.SSLContext

    def connect(self) -> ssl.SSLSocket:
        raw = socket.create_connection(("127.0.0.1", self.port), timeout=10)
        try:
            return self.context.wrap_socket(raw, server_hostname="127.0.0.1")
        except BaseException:
            raw.close()
            raise

    def call(self, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(f"https://127.0.0.1:{self.port}{path}", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, context=self.context, timeout=10) as resp:
            return resp.status, resp.read()

    def metric(self, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels` (0 when none)."""
        text = self.call("/metrics")[1].decode()
        return sum(sample.value for family in text_string_to_metric_families(text)
                   for sample in family.samples
                   if sample.name == name and labels.items() <= sample.labels.items())

    def rss_kib(self, field: str = "VmRSS") -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return next(int(line.split()[1]) for line in status.splitlines()
                    if line.startswith(field + ":"))

    def log_lines(self) -> list[str]:
        return self.log.read_text().splitlines()


@contextlib.contextmanager
def serve(files: CertificateFiles, workdir: Path) -> Iterator[Served]:
    port = free_port()
    log = workdir / f"serve-{port}.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "webhook", "serve", "--demo", "--listen", f"127.0.0.1:{port}",
             "--tls-cert", str(files.cert), "--tls-key", str(files.key)],
            stdout=err, stderr=err,
        )
    served = Served(proc, port, log, ssl.create_default_context(cafile=str(files.ca_cert)))
    try:
        for _ in range(300):  # startup: bounded attempts, not a timing assertion
            assert proc.poll() is None, log.read_text()
            with contextlib.suppress(OSError):
                if served.call("/readyz")[0] == 200:
                    break
            time.sleep(0.1)
        yield served
    finally:
        proc.kill()
        proc.wait(timeout=30)


@pytest.fixture(scope="module")
def served(tls_files: CertificateFiles, tmp_path_factory: pytest.TempPathFactory,
           ) -> Iterator[Served]:
    with serve(tls_files, tmp_path_factory.mktemp("edge")) as server:
        yield server


def answer_while_dripping(sock: ssl.SSLSocket, byte: bytes, patience: float = 20.0) -> bytes:
    """Send `byte` every 0.2 s until the server answers or closes: its first bytes (b"" when
    it closed without a word). `patience` only bounds a broken server: with no deadline at all
    the answer would never come."""
    sock.settimeout(0.2)
    give_up = time.monotonic() + patience
    while time.monotonic() < give_up:
        try:
            sock.send(byte)
            return sock.recv(4096)
        except TimeoutError:  # nothing yet (TLS session tickets do not count)
            continue
        except OSError:  # reset by the server
            return b""
    pytest.fail("the server neither answered nor closed a request that never completes")


def test_a_request_must_arrive_whole_within_the_deadline(served: Served) -> None:
    """Bytes keep coming (so no idle timer would fire) but the request never completes."""
    timeouts = served.metric("layer_locality_connections_closed_total", reason="read_timeout")
    with served.connect() as body_sock:
        body_sock.sendall(BODY_HEAD)
        assert answer_while_dripping(body_sock, b" ").startswith(b"HTTP/1.1 408 ")
    with served.connect() as head_sock:
        head_sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: t\r\nX-Slow: ")
        assert answer_while_dripping(head_sock, b"a") == b""
    assert served.metric("layer_locality_connections_closed_total",
                         reason="read_timeout") == timeouts + 2
    assert served.metric("layer_locality_bad_requests_total", status="408") >= 1


def test_a_compressed_body_is_refused_before_it_is_sent(served: Served) -> None:
    """Only the headers go out: the 415 cannot have waited for (or inflated) any body."""
    refused = served.metric("layer_locality_bad_requests_total", status="415")
    with served.connect() as sock:
        sock.sendall(b"POST /mutate HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     b"Content-Encoding: gzip\r\nContent-Length: 6000000\r\n\r\n")
        assert served.call("/healthz") == (200, b"ok\n")
        assert sock.recv(4096).startswith(b"HTTP/1.1 415 ")
    assert served.metric("layer_locality_bad_requests_total", status="415") == refused + 1


def test_aborted_bodies_and_oversized_headers_log_one_line_each(served: Served) -> None:
    aborts = 20
    before = served.metric("layer_locality_aborted_requests_total")
    lines = len(served.log_lines())
    for _ in range(aborts):
        with served.connect() as sock:
            sock.sendall(BODY_HEAD + b'"apiVersion": ')
    for _ in range(100):  # the server notices each close: bounded wait for the count
        if served.metric("layer_locality_aborted_requests_total") >= before + aborts:
            break
        time.sleep(0.1)
    assert served.metric("layer_locality_aborted_requests_total") == before + aborts
    after_aborts = served.log_lines()
    assert len(after_aborts) - lines <= aborts

    bad = served.metric("layer_locality_bad_requests_total", status="400")
    with served.connect() as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n")
        assert sock.recv(4096).split(b"\r\n")[0].endswith(b" 400 Bad Request")
    assert served.metric("layer_locality_bad_requests_total", status="400") == bad + 1
    logged = served.log_lines()
    assert len(logged) - len(after_aborts) <= 1
    assert not any("Traceback" in line for line in logged)


def test_a_port_in_use_is_a_one_line_error(tls_files: CertificateFiles) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "webhook", "serve", "--demo", "--listen", f"127.0.0.1:{port}",
             "--tls-cert", str(tls_files.cert), "--tls-key", str(tls_files.key)],
            capture_output=True, timeout=60,
        )
    assert result.returncode == 2
    lines = result.stderr.decode().splitlines()
    assert len(lines) == 1, lines  # and no "serving https://..." before it
    assert f"127.0.0.1:{port}" in lines[0]
    assert "address already in use" in lines[0]


def half_the_memory_limit_kib() -> int:
    deployment = yaml.safe_load(DEPLOYMENT.read_text())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return parse_size(container["resources"]["limits"]["memory"]) // 2 // 1024


@pytest.fixture
def many_files() -> Iterator[None]:
    """Room for 2,000 sockets on each side (the server child inherits the limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 5000:
        if hard != resource.RLIM_INFINITY and hard < 5000:
            fail_or_skip(f"RLIMIT_NOFILE hard limit {hard} is below the 5,000 this test "
                         "needs (raise it: ulimit -Hn, or LimitNOFILE= for a service)")
        resource.setrlimit(resource.RLIMIT_NOFILE, (5000, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_slow_and_idle_connections_keep_memory_bounded(
    tls_files: CertificateFiles, tmp_path: Path, many_files: None
) -> None:
    """2,000 TLS connections (1,000 idle after the handshake, 1,000 dribbling a body): the
    server's RSS stays under half the Deployment's memory limit, it keeps answering, and
    refuses or closes what exceeds its cap (counted). How soon the memory is given back
    afterwards is timing, measured by the benchmark (`python -m bench.served.edge_probe`: rss)."""
    count, cap = 2000, Settings().max_connections
    with serve(tls_files, tmp_path) as server:

        def open_one(head: bytes) -> ssl.SSLSocket | None:
            try:
                sock = server.connect()
                sock.sendall(head)
                return sock
            except OSError:  # refused by the server: expected past its cap
                return None

        with ThreadPoolExecutor(32) as pool:
            idle = [s for s in pool.map(open_one, [b""] * (count // 2)) if s]
            slow = [s for s in pool.map(open_one, [BODY_HEAD] * (count // 2)) if s]
        stop = threading.Event()

        def dribble() -> None:
            while not stop.wait(0.5):
                for sock in slow:
                    with contextlib.suppress(OSError):
                        sock.send(b" ")

        dribbler = threading.Thread(target=dribble)
        dribbler.start()
        try:
            assert server.call("/healthz") == (200, b"ok\n")
            status, body = server.call("/mutate", orjson.dumps(review(pod(["node:18-slim"]))))
            assert status == 200 and decode_patch(orjson.loads(body))
            assert server.metric("layer_locality_open_connections") <= cap
            closed = server.metric("layer_locality_connections_closed_total")
            peak = server.rss_kib("VmHWM")
        finally:
            stop.set()
            dribbler.join()
            for sock in idle + slow:
                sock.close()
        assert peak <= half_the_memory_limit_kib()
        # Every connection past the cap was refused, evicted or timed out by the server.
        assert closed >= count - cap


def test_a_review_of_megabytes_arrives_whole_over_tls(served: Served) -> None:
    """Many TLS records, read through the small read buffer, and decoded by the large-body
    parser: answered like any review."""
    obj = pod(["python:3.11-slim", "redis:7.0"],
              metadata={"annotations": {"example.com/blob": "x" * (3 << 20)}})
    status, body = served.call("/mutate", orjson.dumps(review(obj, uid="megabytes")))
    answer = orjson.loads(body)
    assert status == 200 and answer["response"]["uid"] == "megabytes"
    assert decode_patch(answer)
