"""The server over a real TLS socket on loopback, verified against the generated CA, and the
serving certificate rotating underneath it without a restart."""

from __future__ import annotations

import asyncio
import socket
import ssl
import warnings
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import orjson
import pytest
from aiohttp import web
from cryptography import x509

from tests.helpers import decode_patch, pod, review
from webhook.config import Settings
from webhook.serving.certs import CertificateFiles, generate
from webhook.serving.metrics import Metrics
from webhook.serving.mutate import Mutator
from webhook.serving.server import create_app, tls_reloader
from webhook.serving.tls import ServingCertificate
from webhook.serving.wiring import build_parts


async def start(files: CertificateFiles, reload_seconds: float = 3600) -> tuple[web.AppRunner, int]:
    parts = build_parts(Settings(demo=True))
    certificate = ServingCertificate(files.cert, files.key)
    metrics = Metrics()
    app = create_app(Mutator(parts.sources, parts.inventory, Settings().policy), parts.inventory,
                     metrics)
    app.cleanup_ctx.append(tls_reloader(certificate, metrics, reload_seconds))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=certificate.context)
    await site.start()
    port = runner.addresses[0][1]
    return runner, port


@pytest.fixture
async def server(tls_files: CertificateFiles) -> AsyncIterator[int]:
    runner, port = await start(tls_files)
    yield port
    await runner.cleanup()


def client_context(*cas: Path) -> ssl.SSLContext:
    context = ssl.create_default_context()
    for ca in cas:
        context.load_verify_locations(cafile=str(ca))
    return context


async def test_review_over_verified_tls(server: int, tls_files: CertificateFiles) -> None:
    context = client_context(tls_files.ca_cert)
    context.minimum_version = context.maximum_version = ssl.TLSVersion.TLSv1_2
    async with aiohttp.ClientSession() as session:
        resp = await session.post(
            f"https://127.0.0.1:{server}/mutate", ssl=context,
            data=orjson.dumps(review(pod(["python:3.11"]), uid="tls-1")),
            headers={"Content-Type": "application/json"},
        )
        answer = await resp.json()
    assert answer["response"]["uid"] == "tls-1"
    assert decode_patch(answer)


async def test_untrusted_client_is_refused_by_verification(server: int) -> None:
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await session.get(f"https://127.0.0.1:{server}/healthz",
                              ssl=ssl.create_default_context())


def _handshake(port: int, version: ssl.TLSVersion) -> str:
    """Attempt a handshake pinned to `version`; returns the peer's protocol or the alert."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_ciphers("DEFAULT:@SECLEVEL=0")  # let this client offer what old peers offer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLSv1_1 is deprecated: the point
        context.minimum_version = context.maximum_version = version
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        try:
            with context.wrap_socket(raw) as tls:
                return str(tls.version())
        except ssl.SSLError as exc:
            return str(exc.reason)


async def test_server_refuses_a_tls_1_1_handshake(server: int) -> None:
    """A real TLS 1.1 ClientHello is refused (asyncio's TLS closes the connection, plain
    OpenSSL sends a protocol_version alert); the same client pinned to TLS 1.2 completes, so
    the refusal is the server's, not this client's."""
    old = await asyncio.to_thread(_handshake, server, ssl.TLSVersion.TLSv1_1)
    assert old in ("TLSV1_ALERT_PROTOCOL_VERSION", "UNEXPECTED_EOF_WHILE_READING")
    assert await asyncio.to_thread(_handshake, server, ssl.TLSVersion.TLSv1_2) == "TLSv1.2"


async def peer_serial(port: int, context: ssl.SSLContext) -> int:
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=context)
    der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    writer.close()
    await writer.wait_closed()
    return x509.load_der_x509_certificate(der).serial_number


async def test_rotated_certificate_is_served_to_new_connections(
    rotating_tls_files: CertificateFiles, tmp_path: Path
) -> None:
    old_serial = x509.load_pem_x509_certificate(rotating_tls_files.cert.read_bytes()).serial_number
    old_ca = tmp_path / "old-ca.crt"
    old_ca.write_bytes(rotating_tls_files.ca_cert.read_bytes())
    runner, port = await start(rotating_tls_files, reload_seconds=0.05)
    try:
        assert await peer_serial(port, client_context(old_ca)) == old_serial
        new = generate("layer-locality", "layer-locality", rotating_tls_files.cert.parent,
                       days=2, extra_sans=["127.0.0.1"])
        new_serial = x509.load_pem_x509_certificate(new.cert.read_bytes()).serial_number
        context = client_context(old_ca, new.ca_cert)
        seen = old_serial
        for _ in range(200):  # the reloader polls every 50 ms; give it many chances
            seen = await peer_serial(port, context)
            if seen == new_serial:
                break
            await asyncio.sleep(0.05)
        assert seen == new_serial
        # A client trusting only the new CA now verifies the server too.
        assert await peer_serial(port, client_context(new.ca_cert)) == new_serial
    finally:
        await runner.cleanup()


def test_mismatched_pair_keeps_the_old_certificate(rotating_tls_files: CertificateFiles,
                                                   tmp_path: Path) -> None:
    certificate = ServingCertificate(rotating_tls_files.cert, rotating_tls_files.key)
    other = generate("other", "ns", tmp_path / "other", days=1)
    rotating_tls_files.cert.write_bytes(other.cert.read_bytes())  # key no longer matches
    with pytest.raises(ssl.SSLError):
        certificate.reload_if_changed()
    rotating_tls_files.key.write_bytes(other.key.read_bytes())
    assert certificate.reload_if_changed()
    assert not certificate.reload_if_changed()
