"""`layer-locality serve` in live-cluster mode as a real process (the Deployment's mode), against
the stand-in API server of tests/kit/apiserver.py (changes and faults on demand; the same
process on the real control plane: test_cluster_*.py): the process lists and watches through the
real `kubernetes` client and a kubeconfig."""

from __future__ import annotations

import asyncio
import signal
import ssl
import sys
from pathlib import Path

import aiohttp
import orjson
import pytest

from tests.helpers import AMD64, decode_patch, image, node_object, pod, review
from tests.kit.apiserver import FakeApiServer
from webhook.core.scoring import MiB
from webhook.devcluster.processes import free_port
from webhook.registry.catalog import catalog_document
from webhook.serving.certs import CertificateFiles

APP = image("registry.example.com/team/app:1", {AMD64: [("base", 200 * MiB), ("app", 90 * MiB)]})


async def test_serve_follows_the_cluster(
    apiserver: FakeApiServer, tls_files: CertificateFiles, tmp_path: Path
) -> None:
    catalog = tmp_path / "catalog.json"
    catalog.write_bytes(orjson.dumps(catalog_document([APP])))
    apiserver.put("nodes", node_object("warm", [APP]))
    apiserver.put("nodes", node_object("cold"))
    apiserver.put("nodes", node_object("empty"))
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "webhook", "serve", "--listen", f"127.0.0.1:{port}",
        "--kubeconfig", str(apiserver.kubeconfig(tmp_path / "kubeconfig")),
        "--catalog", str(catalog), "--offline",
        "--tls-cert", str(tls_files.cert), "--tls-key", str(tls_files.key),
        stderr=log,
    )
    context = ssl.create_default_context(cafile=str(tls_files.ca_cert))
    base = f"https://127.0.0.1:{port}"
    try:
        async with aiohttp.ClientSession() as session:

            async def status(path: str) -> int:
                try:
                    async with session.get(base + path, ssl=context) as resp:
                        return resp.status
                except aiohttp.ClientConnectionError:
                    return 0

            async def preferred() -> dict[str, int]:
                body = orjson.dumps(review(pod([APP.ref])))
                async with session.post(base + "/mutate", data=body, ssl=context,
                                        headers={"Content-Type": "application/json"}) as resp:
                    answer = await resp.json()
                for op in decode_patch(answer):
                    if op["path"].startswith("/metadata"):
                        decision = orjson.loads(op["value"]["layer-locality.io/decision"])
                        return {t["node"]: t["bytes"] for t in decision["top"]}
                return {}

            for _ in range(600):  # bounded chances, not a timing assertion
                assert proc.returncode is None, "server exited"
                if await status("/readyz") == 200:
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("never ready")
            assert await preferred() == {"warm": 290 * MiB}

            apiserver.put("nodes", node_object("cold", [APP]))
            for _ in range(600):
                if await preferred() == {"cold": 290 * MiB, "warm": 290 * MiB}:
                    break
                await asyncio.sleep(0.05)
            else:
                pytest.fail("the node update never reached the reviews")
    finally:
        proc.send_signal(signal.SIGTERM)
        exit_code = await asyncio.wait_for(proc.wait(), 30)
        log.close()
    assert exit_code == 0, (tmp_path / "serve.log").read_text()
    assert apiserver.watch_calls["nodes"] >= 1
    assert apiserver.unauthorised == 0
