"""A real registry for tests: the Debian `docker-registry` binary (CNCF distribution 2.8) on
127.0.0.1, images pushed through its HTTP API, plus loopback helpers (a counting/tampering proxy,
a JWT token issuer the real registry verifies).

Import the fixtures explicitly from a test module:
    from tests.integration.registry_fixture import registry_images  # noqa: F401

All traffic stays on 127.0.0.0/8. Without the binary the tests skip with a reason, or fail in
CI (tests.helpers.in_ci: `.ci/run` installs the package and sets CI=true).
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import json
import os
import secrets
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from bench import procs
from tests.helpers import fail_or_skip
from webhook.devcluster.processes import free_port
from webhook.devcluster.realnodes.registry import registry_binary as find_registry_binary
from webhook.registry.manifest import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST

OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"
# urllib must never use an environment proxy: every request goes straight to loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def registry_binary() -> str | None:
    found = find_registry_binary()
    return str(found) if found else None


def require_registry_binary() -> str:
    binary = registry_binary()
    if binary is None:
        reason = ("docker-registry (CNCF distribution) is not installed: "
                  "apt-get install -y docker-registry")
        fail_or_skip(reason)
    return binary


def _request(method: str, url: str, body: bytes | None = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    assert url.startswith("http://127.0.0.1:"), url
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with _OPENER.open(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


@dataclass
class RegistryServer:
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        procs.stop(self.process)


def start_registry(binary: str, workdir: Path, storage: Path,
                   auth: dict[str, Any] | None = None) -> RegistryServer:
    """Run `binary serve CONFIG` on a free loopback port; wait until /v2/ answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config: dict[str, Any] = {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}", "secret": secrets.token_hex(16)},
    }
    if auth:
        config["auth"] = auth
    config_path = workdir / "config.yml"
    config_path.write_text(yaml.safe_dump(config))
    log_path = workdir / "registry.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen([binary, "serve", str(config_path)], stdout=log_file,
                                   stderr=subprocess.STDOUT, env={"PATH": "/usr/bin:/bin"})
    server = RegistryServer(process, port, log_path)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"registry exited: {server.log()}")
        try:
            status, _, _ = _request("GET", f"{server.url}/v2/")
            if status in (200, 401):
                return server
        except OSError:
            pass
        time.sleep(0.05)
    server.stop()
    raise RuntimeError(f"registry did not start: {server.log()}")


# -- pushing images ----------------------------------------------------------------------------


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class PushedPlatform:
    platform: str
    digest: str
    layers: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class PushedImage:
    repository: str
    tag: str
    digest: str  # what the tag points to (index or manifest)
    platforms: tuple[PushedPlatform, ...]

    def ref(self, host: str) -> str:
        return f"{host}/{self.repository}:{self.tag}"

    def pinned(self, host: str) -> str:
        return f"{host}/{self.repository}@{self.digest}"

    def platform(self, name: str) -> PushedPlatform:
        return next(p for p in self.platforms if p.platform == name)


class Pusher:
    """Blob uploads (POST, then PUT with the digest) and manifest PUTs, as `docker push`.
    `token(repository)` gives a Bearer token with push access for a registry with token auth."""

    def __init__(self, base_url: str, token: Callable[[str], str] | None = None) -> None:
        self.base = base_url
        self.token = token

    def _auth(self, repository: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(repository)}"} if self.token else {}

    def blob(self, repository: str, data: bytes) -> tuple[str, int]:
        status, headers, body = _request("POST", f"{self.base}/v2/{repository}/blobs/uploads/",
                                         headers=self._auth(repository))
        assert status == 202, (status, body)
        location = headers["Location"]
        if location.startswith("/"):
            location = self.base + location
        digest = sha256(data)
        sep = "&" if "?" in location else "?"
        status, _, body = _request("PUT", f"{location}{sep}digest={digest}", data,
                                   {"Content-Type": "application/octet-stream",
                                    **self._auth(repository)})
        assert status == 201, (status, body)
        return digest, len(data)

    def manifest(self, repository: str, reference: str, document: dict[str, Any]) -> str:
        body = json.dumps(document, indent=3).encode()  # not canonical: hashes must use bytes
        status, headers, answer = _request(
            "PUT", f"{self.base}/v2/{repository}/manifests/{reference}", body,
            {"Content-Type": document["mediaType"], **self._auth(repository)},
        )
        assert status == 201, (status, answer)
        assert headers["Docker-Content-Digest"] == sha256(body)
        return sha256(body)

    def image_manifest(self, repository: str, layers: list[bytes], platform: str,
                       oci: bool, tag: str | None = None,
                       diff_ids: list[str] | None = None) -> PushedPlatform:
        """`diff_ids`: the uncompressed layers' digests, for a runtime that unpacks."""
        os_name, arch, *variant = platform.split("/")
        config: dict[str, Any] = {"architecture": arch, "os": os_name,
                                  "rootfs": {"type": "layers", "diff_ids": diff_ids or []}}
        if variant:
            config["variant"] = variant[0]
        config_digest, config_size = self.blob(repository, json.dumps(config).encode())
        descriptors = [self.blob(repository, data) for data in layers]
        document = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST if oci else DOCKER_MANIFEST,
            "config": {"mediaType": OCI_CONFIG if oci else DOCKER_CONFIG,
                       "digest": config_digest, "size": config_size},
            "layers": [{"mediaType": OCI_LAYER if oci else DOCKER_LAYER, "digest": d, "size": s}
                       for d, s in descriptors],
        }
        reference = tag
        body_digest = sha256(json.dumps(document, indent=3).encode())
        digest = self.manifest(repository, reference or body_digest, document)
        return PushedPlatform(platform, digest, tuple(descriptors))

    def index(self, repository: str, tag: str, children: list[PushedPlatform],
              oci: bool, attestation: bool = False) -> str:
        entries: list[dict[str, Any]] = []
        for child in children:
            os_name, arch, *variant = child.platform.split("/")
            platform: dict[str, str] = {"os": os_name, "architecture": arch}
            if variant:
                platform["variant"] = variant[0]
            entries.append({"mediaType": OCI_MANIFEST if oci else DOCKER_MANIFEST,
                            "digest": child.digest, "size": 1, "platform": platform})
        if attestation:
            entries.append({"mediaType": OCI_MANIFEST, "digest": children[0].digest, "size": 1,
                            "platform": {"os": "unknown", "architecture": "unknown"},
                            "annotations": {"vnd.docker.reference.type": "attestation-manifest"}})
        for entry, child in zip(entries, children, strict=False):
            entry["size"] = len(_manifest_bytes(self.base, repository, child.digest,
                                                 self._auth(repository)))
        document = {"schemaVersion": 2, "mediaType": OCI_INDEX if oci else DOCKER_LIST,
                    "manifests": entries}
        return self.manifest(repository, tag, document)


def _manifest_bytes(base: str, repository: str, digest: str,
                    auth: dict[str, str]) -> bytes:
    status, _, body = _request("GET", f"{base}/v2/{repository}/manifests/{digest}",
                               headers={"Accept": f"{OCI_MANIFEST}, {DOCKER_MANIFEST}", **auth})
    assert status == 200
    return body


def layer(size: int) -> bytes:
    """Random bytes behind a gzip magic: real-looking, incompressible layer content."""
    return b"\x1f\x8b\x08\x00" + os.urandom(size - 4)


@dataclass
class RegistryImages:
    """The open registry with its pushed images; `storage` can back other instances."""

    server: RegistryServer
    storage: Path
    binary: str
    images: dict[str, PushedImage] = field(default_factory=dict)
    shared_base: tuple[tuple[str, int], ...] = ()

    @property
    def host(self) -> str:
        return self.server.host


def push_test_images(pusher: Pusher) -> tuple[dict[str, PushedImage], tuple[tuple[str, int], ...]]:
    images: dict[str, PushedImage] = {}
    base_layers = [layer(40_000), layer(25_000)]
    # Docker v2 single-arch base image, and an app built FROM it (shares both base layers).
    base = pusher.image_manifest("library/base", base_layers, "linux/amd64", oci=False, tag="1")
    images["base"] = PushedImage("library/base", "1", base.digest, (base,))
    app = pusher.image_manifest("team/app", [*base_layers, layer(12_000)], "linux/amd64",
                                oci=False, tag="v1")
    images["app"] = PushedImage("team/app", "v1", app.digest, (app,))
    # An OCI single manifest for arm64 (its platform comes from the config blob).
    tool = pusher.image_manifest("oci/tool", [layer(9_000)], "linux/arm64", oci=True,
                                 tag="latest")
    images["tool"] = PushedImage("oci/tool", "latest", tool.digest, (tool,))
    # A multi-arch OCI index: amd64 and arm64 with different layers, plus an attestation entry.
    amd64 = pusher.image_manifest("multi/arch", [layer(30_000), layer(8_000)], "linux/amd64",
                                  oci=True)
    arm64 = pusher.image_manifest("multi/arch", [layer(28_000)], "linux/arm64/v8", oci=True)
    digest = pusher.index("multi/arch", "2.0", [amd64, arm64], oci=True, attestation=True)
    images["multi"] = PushedImage("multi/arch", "2.0", digest, (amd64, arm64))
    # A Docker manifest list (amd64 + arm/v7).
    l_amd = pusher.image_manifest("list/img", [layer(6_000)], "linux/amd64", oci=False)
    l_arm = pusher.image_manifest("list/img", [layer(5_000)], "linux/arm/v7", oci=False)
    digest = pusher.index("list/img", "3", [l_amd, l_arm], oci=False)
    images["list"] = PushedImage("list/img", "3", digest, (l_amd, l_arm))
    shared = tuple((sha256(data), len(data)) for data in base_layers)
    return images, shared


@pytest.fixture(scope="module")
def registry_images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryImages]:
    """The real registry (no auth) on 127.0.0.1 with the test images pushed (per module)."""
    binary = require_registry_binary()
    root = tmp_path_factory.mktemp("registry")
    storage = root / "storage"
    server = start_registry(binary, root / "open", storage)
    try:
        images, shared = push_test_images(Pusher(server.url))
        yield RegistryImages(server, storage, binary, images, shared)
    finally:
        server.stop()


# -- loopback helpers: a counting proxy and a token issuer --------------------------------------


@dataclass
class Proxy:
    """An HTTP proxy in front of the registry that counts requests and can misbehave."""

    upstream: str
    port: int = 0
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    connections: int = 0
    hold: asyncio.Event | None = None  # manifest GETs wait for this event
    held: int = 0
    reached: asyncio.Event = field(default_factory=asyncio.Event)  # a request is being held
    tamper: bool = False  # flip a byte of manifest bodies
    answer: tuple[int, bytes, dict[str, str]] | None = None  # fixed answer instead of upstream
    runner: web.AppRunner | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.counts[(request.method, request.path)] += 1
        if self.answer is not None:
            status, body, headers = self.answer
            return web.Response(status=status, body=body, headers=headers)
        if self.hold is not None and "/manifests/" in request.path and request.method == "GET":
            self.held += 1
            self.reached.set()
            await self.hold.wait()
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in ("accept", "authorization")}
        status, answer_headers, body = await asyncio.to_thread(
            _request, request.method, self.upstream + request.path_qs, None, headers)
        if self.tamper and "/manifests/" in request.path and body:
            body = body.replace(b'"size": ', b'"size": 1', 1)
        keep = {k: v for k, v in answer_headers.items()
                if k.lower() in ("content-type", "docker-content-digest", "www-authenticate")}
        return web.Response(status=status, body=body if request.method != "HEAD" else None,
                            headers=keep)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port or free_port())
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self.hold is not None:
            self.hold.set()
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def proxy_factory() -> AsyncIterator[Callable[..., Any]]:
    proxies: list[Proxy] = []

    async def make(upstream: str, **options: Any) -> Proxy:
        proxy = Proxy(upstream, **options)
        await proxy.start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        await proxy.stop()


class ConnectionCounter:
    """A TCP listener that only counts connections (for 'never contacted' assertions)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self.connections = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            writer.close()

        self._server = await asyncio.start_server(accept, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def libtrust_key_id(public_key: ec.EllipticCurvePublicKey) -> str:
    """The key ID distribution's token auth uses to find a trusted key (docker/libtrust)."""
    der = public_key.public_bytes(serialization.Encoding.DER,
                                  serialization.PublicFormat.SubjectPublicKeyInfo)
    text = base64.b32encode(hashlib.sha256(der).digest()[:30]).decode().rstrip("=")
    return ":".join(text[i : i + 4] for i in range(0, len(text), 4))


class TokenIssuer:
    """Signs distribution-style JWTs (ES256, `kid` = libtrust key ID) with a key made here; the
    registry trusts it through `rootcertbundle` (a self-signed certificate for the key)."""

    def __init__(self, issuer: str = "test-issuer", service: str = "test-registry") -> None:
        self.issuer = issuer
        self.service = service
        self.key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test token issuer")])
        now = datetime.datetime.now(datetime.UTC)
        self.certificate = (
            x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=1))
            .sign(self.key, hashes.SHA256())
        )
        self.key_id = libtrust_key_id(self.key.public_key())

    def bundle(self, path: Path) -> Path:
        path.write_bytes(self.certificate.public_bytes(serialization.Encoding.PEM))
        return path

    def token(self, subject: str, scope: str, lifetime: int = 300,
              granted: tuple[str, ...] = ("pull",)) -> str:
        """A token for the requested `scope`, limited to the `granted` actions (the registry
        checks the `access` claim against what each request needs: pull, push)."""
        access = []
        kind, _, rest = scope.partition(":")
        name, _, actions = rest.rpartition(":")
        if kind == "repository" and name:
            access.append({"type": "repository", "name": name,
                           "actions": [a for a in actions.split(",") if a in granted]})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "ES256", "kid": self.key_id}
        claims = {"iss": self.issuer, "sub": subject, "aud": self.service, "iat": now,
                  "nbf": now - 30, "exp": now + lifetime, "jti": secrets.token_hex(8),
                  "access": access}
        signing_input = (_b64url(json.dumps(header).encode()) + "."
                         + _b64url(json.dumps(claims).encode()))
        der = self.key.sign(signing_input.encode(), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        signature = r.to_bytes(32, "big") + s.to_bytes(32, "big")
        return signing_input + "." + _b64url(signature)


@dataclass(frozen=True)
class TokenRequest:
    port: int  # the listener it reached (the HTTPS or the plain one)
    authorization: str | None
    query: dict[str, str]

    def basic(self) -> tuple[str, str] | None:
        """The decoded `user:password` of a Basic Authorization header."""
        if self.authorization is None or not self.authorization.startswith("Basic "):
            return None
        user, _, password = base64.b64decode(self.authorization[6:]).decode().partition(":")
        return user, password


class TokenServer:
    """The token endpoint on 127.0.0.1, in a thread with its own event loop, so it answers while
    a test blocks (a CLI run in-process, a sync push). One plain-HTTP listener, plus an HTTPS one
    when given a certificate. Checks Basic credentials against `users` (empty: anonymous pull),
    grants `grants[user]` actions (default pull) and records every request."""

    def __init__(self, issuer: TokenIssuer, users: dict[str, str] | None = None,
                 grants: dict[str, tuple[str, ...]] | None = None,
                 tls: tuple[Path, Path] | None = None) -> None:
        self.issuer = issuer
        self.users = users or {}
        self.grants = grants or {}
        self.tls = tls  # (certificate chain, key)
        self.requests: list[TokenRequest] = []
        self.port = 0  # plain HTTP
        self.tls_port = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None

    @property
    def realm(self) -> str:
        return f"http://127.0.0.1:{self.port}/token"

    @property
    def tls_realm(self) -> str:
        return f"https://127.0.0.1:{self.tls_port}/token"

    def since(self, mark: int) -> list[TokenRequest]:
        return self.requests[mark:]

    async def handle(self, request: web.Request) -> web.Response:
        authorization = request.headers.get("Authorization")
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        self.requests.append(TokenRequest(sockname[1] if sockname else 0, authorization,
                                          dict(request.query)))
        subject = "anonymous"
        if self.users:
            if not authorization or not authorization.startswith("Basic "):
                return web.json_response({"details": "login required"}, status=401)
            user, _, password = base64.b64decode(authorization[6:]).decode().partition(":")
            if self.users.get(user) != password:
                return web.json_response({"details": "bad credentials"}, status=401)
            subject = user
        token = self.issuer.token(subject, request.query.get("scope", ""),
                                  granted=self.grants.get(subject, ("pull",)))
        return web.json_response({"token": token, "expires_in": 300})

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/token", self.handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        if self.tls is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(*self.tls)
            self.tls_port = free_port()
            await web.TCPSite(self._runner, "127.0.0.1", self.tls_port,
                              ssl_context=context).start()

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)

    def stop(self) -> None:
        if self._runner is not None:
            asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._loop.close()


def fetch_token(realm: str, service: str, scope: str, user: str, password: str,
                cafile: Path | None = None) -> str:
    """A token from a loopback realm, as `docker login` + push would get it (Basic auth)."""
    assert realm.startswith(("http://127.0.0.1:", "https://127.0.0.1:")), realm
    query = urllib.parse.urlencode({"service": service, "scope": scope})
    basic = base64.b64encode(f"{user}:{password}".encode()).decode()
    request = urllib.request.Request(f"{realm}?{query}",
                                     headers={"Authorization": f"Basic {basic}"})
    context = ssl.create_default_context(cafile=str(cafile)) if cafile is not None else None
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                         urllib.request.HTTPSHandler(context=context))
    with opener.open(request, timeout=10) as response:
        token: str = json.loads(response.read())["token"]
    return token
