"""A small OCI distribution client on aiohttp: manifests (HEAD for tag -> digest, GET by
digest with content verification), config blobs, the Bearer/Basic auth dance.

Every URL it touches (the registry, a redirect target, a token realm) goes through the
`HostPolicy` first; hostnames are also checked after DNS resolution (`transport.GuardedResolver`).
Redirects are followed by hand (at most 3) and only to allowed hosts; the Authorization header
never leaves the host it belongs to. Bodies are capped (manifests 4 MiB).
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlencode, urljoin, urlsplit

import aiohttp
import orjson

from webhook import __version__
from webhook.core.images import is_digest
from webhook.registry.auth import (
    AuthError,
    BasicCredentials,
    Challenge,
    TokenCache,
    parse_challenges,
    token_from_answer,
)
from webhook.registry.guard import HostPolicy
from webhook.registry.manifest import (
    ACCEPT,
    Manifest,
    ManifestError,
    digest_of,
    parse_manifest,
    verify,
)
from webhook.registry.realm import judge_realm
from webhook.registry.transport import GuardedResolver, parse_retry_after, response_headers

log = logging.getLogger(__name__)

MAX_MANIFEST_BYTES = 4 << 20
MAX_CONFIG_BYTES = 1 << 20
MAX_TOKEN_BYTES = 64 << 10
MAX_REDIRECTS = 3
_REDIRECTS = frozenset({301, 302, 303, 307, 308})

RequestHook = Callable[[str, str], None]  # (registry, outcome: status code | timeout | error...)


MAX_REMEMBERED_HOSTS = 1024


class RegistryError(Exception):
    """A registry answer that yields no layers. `kind` is a metric label."""

    def __init__(self, message: str, kind: str = "error", status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.status = status
        self.retry_after = retry_after


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where the images of one registry name are fetched (after mirrors and aliases)."""

    registry: str  # the registry name whose credentials apply (mirror target or image registry)
    scheme: str
    host: str
    port: int

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return f"{self.scheme}://{host}" + ("" if self.port == default else f":{self.port}")

    def url(self, repository: str, kind: str, reference: str) -> str:
        return f"{self.origin}/v2/{repository}/{kind}/{reference}"


@dataclass(frozen=True, slots=True)
class _Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes
    answered_by: tuple[str, int]  # (host, port) after redirects


class RegistryClient:
    def __init__(
        self,
        policy: HostPolicy,
        credentials: Mapping[str, BasicCredentials] | None = None,
        *,
        ssl_context: ssl.SSLContext | None = None,
        timeout: float = 10.0,
        max_manifest_bytes: int = MAX_MANIFEST_BYTES,
        on_request: RequestHook | None = None,
        tokens: TokenCache | None = None,
    ) -> None:
        self.policy = policy
        self._credentials = dict(credentials or {})
        self._ssl: ssl.SSLContext | bool = ssl_context if ssl_context is not None else True
        self._timeout = timeout
        self._max_manifest = max_manifest_bytes
        self._on_request = on_request
        self._tokens = tokens or TokenCache()
        self._challenges: dict[tuple[str, int], Challenge] = {}
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    # -- public API -------------------------------------------------------------------------

    async def tag_digest(self, endpoint: Endpoint, repository: str, tag: str) -> str:
        """The digest `tag` points to, from HEAD's `Docker-Content-Digest` (GET if absent)."""
        url = endpoint.url(repository, "manifests", tag)
        answer = await self._fetch(endpoint, repository, "HEAD", url, {"Accept": ACCEPT}, 0)
        self._raise_for(answer, f"{repository}:{tag}")
        digest = answer.headers.get("Docker-Content-Digest", "")
        if is_digest(digest):
            return digest
        answer = await self._fetch(endpoint, repository, "GET", url, {"Accept": ACCEPT},
                                   self._max_manifest)
        self._raise_for(answer, f"{repository}:{tag}")
        return digest_of(answer.body)

    async def manifest(self, endpoint: Endpoint, repository: str, digest: str) -> Manifest:
        """The manifest `digest` names; the body must hash to `digest`."""
        url = endpoint.url(repository, "manifests", digest)
        answer = await self._fetch(endpoint, repository, "GET", url, {"Accept": ACCEPT},
                                   self._max_manifest)
        self._raise_for(answer, f"{repository}@{digest}")
        if not verify(answer.body, digest):
            raise RegistryError(f"manifest {repository}@{digest}: body does not match its digest",
                                kind="digest_mismatch")
        try:
            return parse_manifest(answer.body, answer.headers.get("Content-Type", ""))
        except ManifestError as exc:
            raise RegistryError(f"manifest {repository}@{digest}: {exc}", kind="bad_manifest") \
                from exc

    async def blob(self, endpoint: Endpoint, repository: str, digest: str,
                   max_bytes: int = 1 << 20) -> bytes:
        url = endpoint.url(repository, "blobs", digest)
        answer = await self._fetch(endpoint, repository, "GET", url, {}, max_bytes)
        self._raise_for(answer, f"blob {repository}@{digest}")
        if not verify(answer.body, digest):
            raise RegistryError(f"blob {repository}@{digest}: body does not match its digest",
                                kind="digest_mismatch")
        return answer.body

    async def close(self) -> None:
        """Close the session; later requests fail fast instead of opening a new one."""
        self._closed = True
        if self._session is not None:
            await self._session.close()
        self._session = None

    # -- transport --------------------------------------------------------------------------

    def _session_for_loop(self) -> aiohttp.ClientSession:
        if self._closed:
            raise RegistryError("registry client is closed (shutting down)", kind="closed")
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            connector = aiohttp.TCPConnector(
                resolver=GuardedResolver(self.policy), limit=64, ttl_dns_cache=60
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                headers={"User-Agent": f"layer-locality/{__version__}"},
                auto_decompress=True,
            )
            self._loop = loop
        return self._session

    def _raise_for(self, answer: _Answer, what: str) -> None:
        if answer.status == 200:
            return
        if answer.status == 404:
            raise RegistryError(f"{what}: not found", kind="not_found", status=404)
        if answer.status in (401, 403):
            raise RegistryError(f"{what}: unauthorized ({answer.status})", kind="unauthorized",
                                status=answer.status)
        if answer.status == 429:
            raise RegistryError(f"{what}: rate limited", kind="rate_limited", status=429,
                                retry_after=parse_retry_after(answer.headers.get("Retry-After")))
        raise RegistryError(f"{what}: HTTP {answer.status}", kind="http_error",
                            status=answer.status,
                            retry_after=parse_retry_after(answer.headers.get("Retry-After")))

    async def _fetch(self, endpoint: Endpoint, repository: str, method: str, url: str,
                     headers: Mapping[str, str], max_bytes: int) -> _Answer:
        """One request with auth: a 401 challenge is answered once (Bearer or Basic)."""
        key = (endpoint.host, endpoint.port)
        authorization = await self._authorization(endpoint, repository)
        answer = await self._send(endpoint, method, url, headers, authorization, max_bytes)
        # Only the registry's own challenge is answered: a host a redirect led to gets neither
        # the registry's credentials nor a say in which realm they go to (the pattern of
        # containerd's CVE-2020-15157).
        if answer.status == 401 and answer.answered_by == key:
            challenges = parse_challenges(answer.headers.get("WWW-Authenticate", ""))
            usable = [c for c in challenges if c.scheme in ("bearer", "basic")]
            if usable:
                usable.sort(key=lambda c: c.scheme != "bearer")
                if len(self._challenges) >= MAX_REMEMBERED_HOSTS:
                    self._challenges.clear()  # bounded; challenges are re-learned on a 401
                self._challenges[key] = usable[0]
                self._tokens.drop(self._token_key(endpoint, usable[0], repository))
                authorization = await self._authorization(endpoint, repository)
                if authorization is not None:
                    answer = await self._send(endpoint, method, url, headers, authorization,
                                              max_bytes)
        return answer

    def _token_key(self, endpoint: Endpoint, challenge: Challenge,
                   repository: str) -> tuple[str, str, str]:
        service = challenge.params.get("service", "")
        return (f"{endpoint.host}:{endpoint.port}", service, f"repository:{repository}:pull")

    async def _authorization(self, endpoint: Endpoint, repository: str) -> str | None:
        challenge = self._challenges.get((endpoint.host, endpoint.port))
        if challenge is None:
            return None
        credentials = self._credentials.get(endpoint.registry)
        if challenge.scheme == "basic":
            return credentials.header() if credentials is not None else None
        realm = challenge.realm
        if not realm:
            return None
        # A challenge seen for one repository is reused for the next (same realm and service),
        # which saves the unauthenticated round trip; the scope is always this repository.
        cache_key = self._token_key(endpoint, challenge, repository)
        token = self._tokens.get(cache_key)
        if token is None:
            token = await self._token(endpoint, realm, cache_key, credentials)
        return f"Bearer {token}"

    async def _token(self, endpoint: Endpoint, realm: str, cache_key: tuple[str, str, str],
                     credentials: BasicCredentials | None) -> str:
        _, service, scope = cache_key
        verdict = judge_realm(realm, endpoint.registry, (endpoint.host, endpoint.port),
                              self.policy)
        if not verdict.contact:
            self._count(endpoint, "refused")
            raise RegistryError(verdict.reason, kind="refused")
        query = {k: v for k, v in (("service", service), ("scope", scope)) if v}
        url = realm + ("&" if urlsplit(realm).query else "?") + urlencode(query)
        # The registry's credentials when the realm may have them (as docker and containerd
        # send them), else those listed for the realm host itself, else an anonymous request.
        own = credentials if verdict.registry_credentials else None
        own = own or self._credentials.get(verdict.credentials_key)
        answer = await self._send(endpoint, "GET", url, {"Accept": "application/json"},
                                  own.header() if own is not None else None, MAX_TOKEN_BYTES,
                                  (verdict.host, verdict.port))
        if answer.status != 200:
            withheld = credentials is not None and not verdict.registry_credentials
            raise RegistryError(
                f"token realm {verdict.host}:{verdict.port} answered HTTP {answer.status}"
                + (f" (credentials withheld: {verdict.reason})" if withheld else ""),
                kind="auth", status=answer.status)
        try:
            token, expiry = token_from_answer(orjson.loads(answer.body), self._tokens.now())
        except (orjson.JSONDecodeError, AuthError) as exc:
            raise RegistryError(f"token realm {verdict.host}: {exc}", kind="auth") from exc
        self._tokens.put(cache_key, token, expiry)
        return token

    def _check(self, host: str, port: int, scheme: str, endpoint: Endpoint, what: str) -> None:
        decision = self.policy.check(host, port)
        if not decision.allowed:
            self._count(endpoint, "refused")
            raise RegistryError(f"{what} {host}:{port} refused: {decision.reason}",
                                kind="refused")
        if scheme != "https" and self.policy.scheme(host, port) != "http":
            self._count(endpoint, "refused")
            raise RegistryError(f"{what} {host}:{port}: plain HTTP is not allowed for this host",
                                kind="refused")

    async def _send(self, endpoint: Endpoint, method: str, url: str,
                    headers: Mapping[str, str], authorization: str | None,
                    max_bytes: int, auth_for: tuple[str, int] | None = None) -> _Answer:
        """One request, following redirects to allowed hosts; `authorization` goes only to
        `auth_for` (default: the endpoint), never to a host a redirect points elsewhere."""
        session = self._session_for_loop()
        origin = auth_for or (endpoint.host, endpoint.port)
        for _ in range(MAX_REDIRECTS + 1):
            parts = urlsplit(url)
            host = (parts.hostname or "").lower().rstrip(".")
            try:
                port = parts.port or (443 if parts.scheme == "https" else 80)
            except ValueError as exc:
                raise RegistryError(f"bad URL {url!r}", kind="refused") from exc
            self._check(host, port, parts.scheme, endpoint, "host")
            request_headers = dict(headers)
            if authorization is not None and (host, port) == origin:
                request_headers["Authorization"] = authorization
            try:
                async with session.request(
                    method, url, headers=request_headers, allow_redirects=False,
                    ssl=self._ssl, timeout=aiohttp.ClientTimeout(total=self._timeout),
                ) as response:
                    if response.status in _REDIRECTS and "Location" in response.headers:
                        url = urljoin(url, response.headers["Location"])
                        self._count(endpoint, str(response.status))
                        continue
                    body = await _read_capped(response, max_bytes) if method != "HEAD" else b""
                    self._count(endpoint, str(response.status))
                    return _Answer(response.status, response_headers(response), body, (host, port))
            except TimeoutError as exc:
                self._count(endpoint, "timeout")
                raise RegistryError(f"{method} {host}: timed out", kind="timeout") from exc
            except (aiohttp.ClientError, OSError) as exc:
                self._count(endpoint, "error")
                raise RegistryError(f"{method} {host}: {exc}", kind="connection") from exc
        raise RegistryError(f"{method} {url}: too many redirects", kind="refused")

    def _count(self, endpoint: Endpoint, outcome: str) -> None:
        if self._on_request is not None:
            self._on_request(self.policy.bucket(endpoint.registry), outcome)


async def _read_capped(response: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    length = response.content_length
    if length is not None and length > max_bytes:
        raise RegistryError(f"response of {length} bytes exceeds the {max_bytes} byte cap",
                            kind="too_large")
    chunks: list[bytes] = []
    total = 0
    async for chunk in response.content.iter_chunked(64 << 10):
        total += len(chunk)
        if total > max_bytes:
            raise RegistryError(f"response exceeds the {max_bytes} byte cap", kind="too_large")
        chunks.append(chunk)
    return b"".join(chunks)
