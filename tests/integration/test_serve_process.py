"""`layer-locality serve --demo` as a real process, as `make run` starts it."""

from __future__ import annotations

import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

import orjson
import pytest

from tests.helpers import decode_patch, pod, review
from webhook.devcluster.processes import free_port
from webhook.serving.certs import CertificateFiles


@pytest.fixture
def served(tls_files: CertificateFiles) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "webhook", "serve", "--demo", "--listen", f"127.0.0.1:{port}",
         "--tls-cert", str(tls_files.cert), "--tls-key", str(tls_files.key),
         "--log-level", "debug"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        yield port, proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


def get(url: str, context: ssl.SSLContext, data: bytes | None = None) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_serve_demo_process(served: tuple[int, subprocess.Popen[bytes]],
                            tls_files: CertificateFiles) -> None:
    port, proc = served
    context = ssl.create_default_context(cafile=str(tls_files.ca_cert))
    base = f"https://127.0.0.1:{port}"
    for _ in range(300):  # wait for startup: bounded attempts, not a timing assertion
        if proc.poll() is not None:
            pytest.fail(f"server exited: {proc.stderr.read().decode() if proc.stderr else ''}")
        try:
            status, _ = get(f"{base}/readyz", context)
            if status == 200:
                break
        except (urllib.error.URLError, ConnectionError):
            time.sleep(0.1)
    else:
        pytest.fail("server never became ready")
    status, body = get(f"{base}/mutate", context,
                       orjson.dumps(review(pod(["node:18-slim"]), uid="proc-1")))
    assert status == 200
    answer = orjson.loads(body)
    assert answer["response"]["uid"] == "proc-1"
    assert decode_patch(answer)
    status, metrics = get(f"{base}/metrics", context)
    assert b'layer_locality_reviews_total{reason="",result="patched"} 1.0' in metrics
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    assert proc.stderr is not None
    logs = proc.stderr.read().decode()
    assert "uid=proc-1" in logs and "result=patched" in logs
    assert "containers" not in logs, "whole objects must never be logged"


def test_serve_refuses_bad_settings(tls_files: CertificateFiles) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "serve", "--demo", "--max-weight", "150",
         "--tls-cert", str(tls_files.cert), "--tls-key", str(tls_files.key)],
        capture_output=True, timeout=60,
    )
    assert result.returncode == 2
    assert b"max_weight must be within 1..100" in result.stderr


def test_sigterm_drains_before_closing(tls_files: CertificateFiles) -> None:
    """SIGTERM: the process keeps answering for --drain-seconds, on connections it already
    holds too, each answer closing its connection, /readyz 503; then it exits 0."""
    import http.client

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "webhook", "serve", "--demo", "--listen", f"127.0.0.1:{port}",
         "--tls-cert", str(tls_files.cert), "--tls-key", str(tls_files.key),
         "--drain-seconds", "3"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    context = ssl.create_default_context(cafile=str(tls_files.ca_cert))
    try:
        for _ in range(300):  # bounded attempts until it is ready, not a timing assertion
            try:
                if get(f"https://127.0.0.1:{port}/readyz", context)[0] == 200:
                    break
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.1)
        held = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        held.request("GET", "/healthz")
        first = held.getresponse()
        first.read()
        assert first.getheader("Connection", "").lower() != "close"
        proc.send_signal(signal.SIGTERM)
        for _ in range(100):  # until the drain began (new connections: /readyz 503)
            if get(f"https://127.0.0.1:{port}/readyz", context)[0] == 503:
                break
            time.sleep(0.05)
        held.request("POST", "/mutate", body=orjson.dumps(review(pod(["node:18-slim"]))),
                     headers={"Content-Type": "application/json"})
        answer = held.getresponse()
        assert answer.status == 200
        assert answer.getheader("Connection", "").lower() == "close"
        assert decode_patch(orjson.loads(answer.read()))
        assert proc.wait(timeout=30) == 0
        assert proc.stderr is not None
        assert "stopping: serving 3.0 s more" in proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
