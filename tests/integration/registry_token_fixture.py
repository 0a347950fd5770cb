"""Token auth for the real registry (registry_fixture.py): a JWT issuer the registry verifies
(ES256, the libtrust key ID), the token endpoint on 127.0.0.1 in a thread of its own (plain
HTTP, and HTTPS when given a certificate), and a token fetched as `docker login` would. All
traffic stays on 127.0.0.0/8."""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import json
import secrets
import ssl
import threading
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.x509.oid import NameOID

from webhook.devcluster.processes import free_port


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
