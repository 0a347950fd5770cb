"""`explain` against an API server it cannot use: one clear line and exit code 2 within
seconds, not a 60 s sync timeout behind pages of urllib3 retry warnings. Real processes and
real loopback sockets: a port nobody listens on, and a listener that accepts and never
answers."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from webhook.inventory.kube import PROBE_SECONDS

ROOT = Path(__file__).resolve().parents[2]


def kubeconfig(path: Path, port: int) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}",
                                               "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    return path


class Silent:
    """Accepts connections, counts them, holds them open and never says a word."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port: int = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.accepted.append(self.listener.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        self.listener.close()
        for connection in self.accepted:
            connection.close()


@pytest.fixture
def silent() -> Iterator[Silent]:
    server = Silent()
    yield server
    server.close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def explain(config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook", "explain", "--kubeconfig", str(config), "--offline",
         "--pod", str(ROOT / "examples" / "pod.yaml")],
        capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("server", ["refused", "silent"])
def test_explain_fails_fast_with_one_line(server: str, tmp_path: Path, silent: Silent) -> None:
    """One request with a short timeout and no retries (the silent server sees one
    connection), then one line naming the server and the reason."""
    port = closed_port() if server == "refused" else silent.port
    result = explain(kubeconfig(tmp_path / "kubeconfig", port))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"layer-locality: error: cannot reach the API server "
                               f"https://127.0.0.1:{port} within {PROBE_SECONDS:g}s: ")
    assert ("Connection refused" if server == "refused" else "timed out") in lines[0]
    if server == "silent":
        assert len(silent.accepted) == 1
