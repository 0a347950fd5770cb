"""`layer-locality serve --client-ca`: only a caller presenting a certificate the client CA
signed, with an allowed name, is answered; probes stay open. Every attack goes through a real
TLS handshake on loopback against the served process."""

from __future__ import annotations

import datetime as dt
import http.client
import re
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.helpers import decode_patch, pod, review
from webhook.devcluster.processes import free_port
from webhook.serving.certs import PEM, Authority, CertificateFiles, issue, key_pem, new_authority

API_SERVER = "kube-apiserver"


@dataclass(frozen=True)
class Client:
    """A client certificate (with any chain after it) and its key, as files."""

    cert: Path
    key: Path


def write_client(directory: Path, name: str, authority: Authority, *,
                 chain: tuple[x509.Certificate, ...] = (), days: int = 2,
                 now: dt.datetime | None = None, dns: tuple[str, ...] = ()) -> Client:
    key, cert = issue(authority, name, days=days, sans=dns, server=False, client=True, now=now)
    safe = re.sub(r"\W", "_", name)
    stem = directory / f"{safe}-{cert.serial_number:x}"
    files = Client(stem.with_suffix(".crt"), stem.with_suffix(".key"))
    files.cert.write_bytes(b"".join(c.public_bytes(PEM) for c in (cert, *chain)))
    files.key.write_bytes(key_pem(key))
    return files


@dataclass
class Served:
    port: int
    proc: subprocess.Popen[bytes]
    ca: Path  # verifies the server
    client_ca: Path
    authority: Authority  # signs good client certificates
    directory: Path

    def context(self, client: Client | None) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        if client is not None:
            context.load_cert_chain(str(client.cert), str(client.key))
        return context

    def call(self, path: str, client: Client | None,
             body: bytes | None = None) -> tuple[int, bytes]:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port,
                                           context=self.context(client), timeout=10)
        try:
            conn.request("POST" if body is not None else "GET", path, body=body,
                         headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def metrics(self) -> str:
        good = write_client(self.directory, API_SERVER, self.authority)
        status, body = self.call("/metrics", good)
        assert status == 200
        return body.decode()

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=30)
        return err.decode()


def start(tmp: Path, tls_files: CertificateFiles, authority: Authority,
          *extra: str) -> Served:
    client_ca = tmp / "client-ca.crt"
    client_ca.write_bytes(authority.cert.public_bytes(PEM))
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "webhook", "serve", "--demo", "--listen", f"127.0.0.1:{port}",
         "--tls-cert", str(tls_files.cert), "--tls-key", str(tls_files.key),
         "--client-ca", str(client_ca), "--tls-reload-seconds", "0.2", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    served = Served(port, proc, tls_files.ca_cert, client_ca, authority, tmp)
    for _ in range(300):  # bounded attempts: startup, not a timing assertion
        if proc.poll() is not None:
            pytest.fail(f"server exited: {proc.communicate()[1].decode()}")
        try:
            if served.call("/readyz", None)[0] == 200:
                return served
        except OSError:
            time.sleep(0.1)
    proc.kill()
    pytest.fail("server never became ready")


@pytest.fixture
def served(tmp_path: Path, tls_files: CertificateFiles) -> Iterator[Served]:
    s = start(tmp_path, tls_files, new_authority("api server client CA"))
    try:
        yield s
    finally:
        if s.proc.poll() is None:
            s.proc.kill()
        s.proc.communicate(timeout=30)


def mutate(served: Served, client: Client | None, uid: str = "cc") -> tuple[int, bytes]:
    return served.call("/mutate", client, orjson.dumps(review(pod(["node:18-slim"]), uid=uid)))


def refused_at_tls(served: Served, client: Client) -> bool:
    """The request fails on the TLS layer: the handshake, or (TLS 1.3: the server checks the
    client's certificate after the client finished) the first read, ends in an alert."""
    try:
        mutate(served, client)
    except (ssl.SSLError, ConnectionError):
        return True
    return False


def refusals(metrics: str, reason: str) -> float:
    match = re.search(r'layer_locality_callers_refused_total\{endpoint="admission",'
                      rf'reason="{reason}"\}} (\S+)', metrics)
    return float(match.group(1)) if match else 0.0


def test_the_api_servers_certificate_is_answered_and_probes_stay_open(served: Served) -> None:
    good = write_client(served.directory, API_SERVER, served.authority)
    status, body = mutate(served, good, uid="good")
    assert status == 200
    answer = orjson.loads(body)
    assert answer["response"]["uid"] == "good"
    assert decode_patch(answer)
    # A DNS SAN counts as the name as well as the CN does.
    by_san = write_client(served.directory, "some-cn", served.authority, dns=(API_SERVER,))
    assert mutate(served, by_san)[0] == 200
    for probe in ("/healthz", "/readyz"):
        assert served.call(probe, None)[0] == 200


def test_callers_without_an_allowed_certificate_are_refused(served: Served) -> None:
    stranger = write_client(served.directory, "system:anonymous", served.authority)
    assert mutate(served, None)[0] == 401
    assert served.call("/metrics", None)[0] == 401  # on this port too
    assert served.call("/mutate/holdout-exempt", None, b"{}")[0] == 401
    assert mutate(served, stranger)[0] == 403
    other_ca = new_authority("another CA")
    impostor = write_client(served.directory, API_SERVER, other_ca)
    assert refused_at_tls(served, impostor)
    past = dt.datetime.now(dt.UTC) - dt.timedelta(days=3)
    expired = write_client(served.directory, API_SERVER, served.authority, days=1, now=past)
    assert refused_at_tls(served, expired)
    # The right CA and name, but a server certificate (no client-auth key usage).
    key, cert = issue(served.authority, API_SERVER, days=2, server=True, client=False)
    server_only = Client(served.directory / "server-only.crt", served.directory / "server-only.key")
    server_only.cert.write_bytes(cert.public_bytes(PEM))
    server_only.key.write_bytes(key_pem(key))
    assert refused_at_tls(served, server_only)
    metrics = served.metrics()
    assert refusals(metrics, "no_certificate") == 2  # /mutate and the exempt path
    assert refusals(metrics, "wrong_name") == 1
    assert refusals(metrics, "handshake") == 3
    assert 'reason="",result="patched"' not in metrics  # nothing was reviewed
    # /readyz stays 200 (fail open) but says so while nothing was accepted.
    status, text = served.call("/readyz", None)
    assert status == 200
    assert b"warning: admission calls refused" in text
    good = write_client(served.directory, API_SERVER, served.authority)
    assert mutate(served, good)[0] == 200
    assert served.call("/readyz", None)[1] == b"ready\n"
    # Each refused peer is logged once a minute, not once a call.
    log = served.stop()
    assert len(re.findall(r"caller 127\.0\.0\.1 refused on ", log)) == 1
    assert len(re.findall(r"caller 127\.0\.0\.1 refused at TLS", log)) == 1
    assert "Traceback" not in log


def _intermediate(parent: Authority, name: str) -> Authority:
    """A CA certificate signed by `parent`, which (path length 0) may sign no CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(parent.cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=2))
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(parent.key, hashes.SHA256()))
    return Authority(key, cert)


def test_chains_the_ca_did_not_allow_are_refused_at_tls(served: Served) -> None:
    # One intermediate under the CA (its path length 0 forbids any).
    middle = _intermediate(served.authority, "rogue intermediate")
    chained = write_client(served.directory, API_SERVER, middle, chain=(middle.cert,))
    assert refused_at_tls(served, chained)
    # A chain of 400 certificates (about 200 KB): OpenSSL refuses the message as too large
    # before verifying anything; the server's memory stays bounded, and it keeps serving.
    chain = [served.authority]
    for i in range(400):
        chain.append(_intermediate(chain[-1], f"link {i}"))
    long = write_client(served.directory, API_SERVER, chain[-1],
                        chain=tuple(a.cert for a in reversed(chain[1:])))
    assert long.cert.stat().st_size > 150_000
    before = _rss(served.proc.pid)
    refused_before = refusals(served.metrics(), "handshake")
    for _ in range(30):
        assert refused_at_tls(served, long)
    assert _rss(served.proc.pid) - before < 32 << 20
    # Refused before any check of ours (the message too large), counted as the refusal it is:
    # the /readyz warning and the alert see it.
    assert refusals(served.metrics(), "handshake") == refused_before + 30
    good = write_client(served.directory, API_SERVER, served.authority)
    assert mutate(served, good)[0] == 200


def test_a_new_client_ca_is_picked_up_without_a_restart(served: Served) -> None:
    old = write_client(served.directory, API_SERVER, served.authority)
    assert mutate(served, old)[0] == 200
    rotated = new_authority("the next client CA")
    served.client_ca.write_bytes(rotated.cert.public_bytes(PEM))
    new = write_client(served.directory, API_SERVER, rotated)
    for _ in range(100):  # the reload loop polls every 0.2 s
        if not refused_at_tls(served, new):
            break
        time.sleep(0.1)
    assert mutate(served, new)[0] == 200
    assert refused_at_tls(served, old)
    assert "client CA reloaded" in served.stop()


def test_a_replaced_client_ca_closes_the_connections_it_admitted(served: Served) -> None:
    """A keep-alive connection the old CA admitted is closed once the new CA is in service
    (within a second of the reload): taking a compromised CA out cuts its callers."""
    old = write_client(served.directory, API_SERVER, served.authority)
    conn = http.client.HTTPSConnection("127.0.0.1", served.port, context=served.context(old),
                                       timeout=10)
    body = orjson.dumps(review(pod(["node:18-slim"]), uid="keep"))

    def ask() -> int:
        conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        response = conn.getresponse()
        response.read()
        return response.status

    try:
        assert ask() == 200 and ask() == 200  # one connection, kept alive
        rotated = new_authority("the next client CA")
        served.client_ca.write_bytes(rotated.cert.public_bytes(PEM))
        new = write_client(served.directory, API_SERVER, rotated)
        for _ in range(100):  # the reload loop polls every 0.2 s
            if not refused_at_tls(served, new):
                break
            time.sleep(0.1)
        time.sleep(1.5)  # the connection check runs every second
        with pytest.raises((ConnectionError, http.client.HTTPException, ssl.SSLError)):
            ask()
    finally:
        conn.close()
    assert "connection(s) it no longer admits closed" in served.stop()


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_the_metrics_port_asks_no_certificate(tmp_path: Path,
                                              tls_files: CertificateFiles) -> None:
    """With --metrics-listen, /metrics answers there whatever certificate a scraper has (none,
    or one of another CA), and the admission port keeps asking for the API server's."""
    port = free_port()
    served = start(tmp_path, tls_files, new_authority("api server client CA"),
                   "--metrics-listen", f"127.0.0.1:{port}")
    try:
        foreign = write_client(tmp_path, "prometheus", new_authority("a scraper's CA"))
        for client in (None, foreign):
            conn = http.client.HTTPSConnection("127.0.0.1", port,
                                               context=served.context(client), timeout=10)
            conn.request("GET", "/metrics")
            response = conn.getresponse()
            assert response.status == 200
            assert b"layer_locality_reviews" in response.read()
            conn.close()
        assert served.call("/metrics", None)[0] == 401  # not on the admission port
        good = write_client(tmp_path, API_SERVER, served.authority)
        assert served.call("/metrics", good)[0] == 404
    finally:
        served.stop()
