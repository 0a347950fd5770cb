"""Registry credentials: `WWW-Authenticate` challenges, Docker `config.json` Basic credentials,
and the Bearer token cache. Parsing is pure; fetching tokens lives in the client.

Credentials belong to one registry host: they are sent only to that host (Basic) or to a
token realm that host names when `realm.judge_realm` says the realm may have them.
"""

from __future__ import annotations

import base64
import binascii
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import orjson

_TOKEN68 = re.compile(r"[A-Za-z0-9._~+/-]+=*")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_BARE_VALUE = re.compile(r'[^\s,"]+')
DEFAULT_TOKEN_SECONDS = 60  # the distribution token spec's default when expires_in is absent
MIN_TOKEN_SECONDS = 10
MAX_TOKEN_SECONDS = 3600


class AuthError(ValueError):
    """A credentials file or a token answer that cannot be used."""


@dataclass(frozen=True, slots=True)
class Challenge:
    scheme: str  # lower case: "bearer" or "basic"
    params: Mapping[str, str]

    @property
    def realm(self) -> str | None:
        return self.params.get("realm")


def parse_challenges(header: str) -> list[Challenge]:
    """RFC 7235 `WWW-Authenticate`: one or more challenges, each `scheme` followed by
    comma-separated `name=value` / `name="quoted"` params. Unparseable input yields what parsed
    before it (never raises): the header comes from the network."""
    challenges: list[Challenge] = []
    pos, n = 0, len(header)

    def skip(chars: str) -> None:
        nonlocal pos
        while pos < n and header[pos] in chars:
            pos += 1

    while pos < n:
        skip(" \t,")
        match = _TOKEN.match(header, pos)
        if not match:
            break
        scheme = match.group().lower()
        pos = match.end()
        params: dict[str, str] = {}
        skip(" \t")
        while pos < n:
            start = pos
            name = _TOKEN.match(header, pos)
            if not name:
                break
            pos = name.end()
            skip(" \t")
            if pos >= n or header[pos] != "=":
                # The next challenge's scheme (or a token68 value for this one).
                pos = start
                break
            pos += 1
            skip(" \t")
            if pos < n and header[pos] == '"':
                pos += 1
                value_chars: list[str] = []
                while pos < n and header[pos] != '"':
                    if header[pos] == "\\" and pos + 1 < n:
                        pos += 1
                    value_chars.append(header[pos])
                    pos += 1
                if pos >= n:
                    return challenges  # unterminated quote: drop the broken challenge
                pos += 1
                value = "".join(value_chars)
            else:
                # Lenient: RFC 7235 wants a token, some servers send bare URLs.
                token = _BARE_VALUE.match(header, pos)
                value = token.group() if token else ""
                pos = token.end() if token else pos
            params.setdefault(name.group().lower(), value)
            skip(" \t")
            if pos < n and header[pos] == ",":
                pos += 1
                skip(" \t")
            elif pos < n:
                break
        if not params:
            token68 = _TOKEN68.match(header, pos)
            if token68 and scheme not in ("bearer", "basic"):
                pos = token68.end()
        challenges.append(Challenge(scheme, params))
    return challenges


def normalise_registry_key(key: str) -> str:
    """A config.json `auths` key (`https://index.docker.io/v1/`, `ghcr.io`, `host:5000`)
    -> the registry name it is for (`docker.io`, `ghcr.io`, `host:5000`)."""
    text = key.strip()
    if "://" not in text:
        text = "//" + text
    host = (urlsplit(text).netloc or "").lower().rstrip("/")
    if host in ("index.docker.io", "registry-1.docker.io", "docker.io"):
        return "docker.io"
    return host


@dataclass(frozen=True, slots=True)
class BasicCredentials:
    username: str
    password: str

    def header(self) -> str:
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode()

    def __repr__(self) -> str:  # never log a password
        return f"BasicCredentials(username={self.username!r}, password=***)"


def parse_docker_config(raw: object, source: str = "config.json") -> dict[str, BasicCredentials]:
    """`{"auths": {"ghcr.io": {"auth": base64(user:pass)} | {"username", "password"}}}` ->
    {registry name: credentials}. Credential helpers (`credsStore`) are not supported."""
    if not isinstance(raw, Mapping):
        raise AuthError(f"{source}: expected a JSON object")
    auths = raw.get("auths", {})
    if not isinstance(auths, Mapping):
        raise AuthError(f"{source}: 'auths' must be an object")
    result: dict[str, BasicCredentials] = {}
    for key, entry in auths.items():
        if not isinstance(key, str) or not isinstance(entry, Mapping):
            raise AuthError(f"{source}: auths entries must be objects")
        username, password = entry.get("username"), entry.get("password")
        encoded = entry.get("auth")
        if isinstance(encoded, str) and encoded:
            try:
                decoded = base64.b64decode(encoded, validate=True).decode()
            except (binascii.Error, UnicodeDecodeError) as exc:
                raise AuthError(f"{source}: auths[{key!r}].auth is not base64 user:pass") from exc
            username, sep, password = decoded.partition(":")
            if not sep:
                raise AuthError(f"{source}: auths[{key!r}].auth is not base64 user:pass")
        if isinstance(username, str) and isinstance(password, str) and username:
            result[normalise_registry_key(key)] = BasicCredentials(username, password)
    return result


def load_docker_config(path: Path) -> dict[str, BasicCredentials]:
    try:
        raw = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError) as exc:
        raise AuthError(f"cannot read registry credentials {path}: {exc}") from exc
    return parse_docker_config(raw, source=str(path))


def token_from_answer(raw: object, now: float) -> tuple[str, float]:
    """A token endpoint's JSON -> (token, expiry on the monotonic clock)."""
    if not isinstance(raw, Mapping):
        raise AuthError("token answer is not a JSON object")
    token = raw.get("token") or raw.get("access_token")
    if not isinstance(token, str) or not token:
        raise AuthError("token answer has no token")
    expires = raw.get("expires_in", DEFAULT_TOKEN_SECONDS)
    if not isinstance(expires, int | float) or isinstance(expires, bool):
        expires = DEFAULT_TOKEN_SECONDS
    seconds = min(max(float(expires), MIN_TOKEN_SECONDS), MAX_TOKEN_SECONDS)
    # Refresh a little early so a token does not expire between check and use.
    return token, now + seconds * 0.9


class TokenCache:
    """Bearer tokens per (registry host, service, scope), dropped when they expire."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, max_entries: int = 1024):
        self._clock = clock
        self._max = max_entries
        self._tokens: dict[tuple[str, str, str], tuple[str, float]] = {}

    def get(self, key: tuple[str, str, str]) -> str | None:
        entry = self._tokens.get(key)
        if entry is None:
            return None
        if entry[1] <= self._clock():
            del self._tokens[key]
            return None
        return entry[0]

    def put(self, key: tuple[str, str, str], token: str, expiry: float) -> None:
        if len(self._tokens) >= self._max:
            self._tokens.pop(next(iter(self._tokens)))
        self._tokens[key] = (token, expiry)

    def drop(self, key: tuple[str, str, str]) -> None:
        self._tokens.pop(key, None)

    def now(self) -> float:
        return self._clock()
