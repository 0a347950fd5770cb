"""`explain` against an API server it cannot use: one clear line and exit code 2 within
seconds, not a 60 s sync timeout behind pages of urllib3 retry warnings. Real processes and
real loopback sockets: a port nobody listens on, a listener that accepts and never answers,
and the stand-in API server for a refusal on demand (and a server that works)."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
import yaml

from tests.helpers import node_object
from tests.kit.apiserver import FakeApiServer, running_fake
from webhook.inventory.kube import PROBE_SECONDS
from webhook.serving.wiring import demo_catalog

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


async def explain_against(server: FakeApiServer, tmp_path: Path) -> tuple[int, str, str]:
    """explain as a process against the stand-in API server served by this test's loop."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "webhook", "explain", "--kubeconfig",
        str(server.kubeconfig(tmp_path / "kubeconfig")), "--offline", "--catalog",
        str(ROOT / "webhook" / "data" / "demo-catalog.json"), "--output", "json",
        "--pod", str(ROOT / "examples" / "pod.yaml"),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={"PATH": "/usr/bin:/bin"})
    out, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_explain_against_a_working_server_and_one_that_refuses(tmp_path: Path) -> None:
    """The probe passes a server that lists nodes (the decision as usual), and names the
    status of one that refuses the list (the stand-in API server: a 403 on demand)."""
    python = next(i for i in demo_catalog().images() if i.ref.endswith("/python:3.11-slim"))
    async for server in running_fake():
        server.put("nodes", node_object("warm", [python]))
        server.put("nodes", node_object("cold"))
        code, out, err = await explain_against(server, tmp_path)
        assert code == 0, err
        doc = orjson.loads(out)
        assert doc["result"] == "patched"
        assert {r["node"]: r["weight"] for r in doc["nodes"]} == {"warm": 100, "cold": 0}
        assert "note:" not in err  # the Service has no endpoints: nothing the webhook said
        # The installed webhook refuses the API server's calls: explain repeats its /readyz.
        server.proxied = {"layer-locality/https:layer-locality:443/readyz": (
            200, "ready\nwarning: admission calls refused in the last 300 s (4 wrong_name)\n")}
        code, out, err = await explain_against(server, tmp_path)
        assert code == 0 and orjson.loads(out)["result"] == "patched"
        notes = [line for line in err.splitlines() if line.startswith("note:")]
        assert notes == ["note: the installed webhook (layer-locality/layer-locality) says: "
                         "admission calls refused in the last 300 s (4 wrong_name)"]
        server.proxied = {"layer-locality/https:layer-locality:443/readyz": (
            503, "inventory not synced\n")}
        code, out, err = await explain_against(server, tmp_path)
        assert "says: not ready (503): inventory not synced" in err
        server.fail("nodes", "list", 403)
        code, out, err = await explain_against(server, tmp_path)
        assert code == 2 and out == ""
        [line] = err.strip().splitlines()
        assert line.startswith("layer-locality: error: the API server http://127.0.0.1:")
        assert line.endswith("answered 403 Forbidden to a list of nodes"), line
