"""The metrics port's caller check, as controller-runtime's authenticated metrics filter: a
bearer token TokenReview accepts, whose user SubjectAccessReview allows `get` on the
non-resource URL (/metrics). Answers are cached (bounded, by a hash of the token, short-lived:
a deleted ServiceAccount's token stops working within `deny`/`allow` seconds), reviews run at
most `concurrency` at a time and at most `queue` are running or waiting (the rest are told
429 at once): a flood of tokens costs the API server
a bounded rate and this process bounded memory."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Literal, Protocol

from webhook.logthrottle import ThrottledLog

log = logging.getLogger(__name__)

# What a scraper's answer says: 200, 401 (no token, malformed, not authenticated), 403
# (authenticated, not allowed), 503 (the API server could not be asked), 429 (too many
# reviews waiting).
Decision = Literal["ok", "no_token", "malformed", "unauthenticated", "forbidden",
                   "unavailable", "busy"]
STATUS: dict[Decision, int] = {"ok": 200, "no_token": 401, "malformed": 401,
                               "unauthenticated": 401, "forbidden": 403, "unavailable": 503,
                               "busy": 429}
MAX_TOKEN_CHARS = 8192  # service-account JWTs are about 1 KB; OIDC ones a few


class ReviewUnavailable(Exception):
    """The API server did not answer a review (unreachable, timed out, 5xx)."""


@dataclass(frozen=True, slots=True)
class User:
    name: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


class Reviews(Protocol):
    """The two reviews, blocking (they run on the authorizer's own threads)."""

    def authenticate(self, token: str) -> User | None:
        """The token's user, or None when the API server does not accept it; raises
        ReviewUnavailable."""

    def allowed(self, user: User, path: str, verb: str) -> bool:
        """Whether `user` may `verb` the non-resource URL `path`; raises ReviewUnavailable."""


def bearer_token(header: str | None) -> str | Literal[False] | None:
    """The token of an `Authorization: Bearer <token>` header; None when there is no header,
    False when it is not a well-formed bearer token (pure)."""
    if header is None:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > MAX_TOKEN_CHARS:
        return False
    if not token.isascii() or not token.isprintable() or " " in token:
        return False
    return token


class TokenAuthorizer:
    def __init__(self, reviews: Reviews, *, allow_seconds: float = 60.0,
                 deny_seconds: float = 10.0, entries: int = 1024, concurrency: int = 2,
                 queue: int = 16, clock: Callable[[], float] = time.monotonic) -> None:
        self.reviews = reviews
        self.allow_seconds = allow_seconds
        self.deny_seconds = deny_seconds
        self.entries = entries
        self.queue = queue
        self.clock = clock
        self._cache: OrderedDict[bytes, tuple[Decision, float]] = OrderedDict()
        self._executor = ThreadPoolExecutor(concurrency, thread_name_prefix="token-review")
        self._slots = asyncio.Semaphore(concurrency)
        self._waiting = 0  # reviews running or waiting for a slot
        self._unavailable = ThrottledLog(log)

    async def check(self, header: str | None, path: str, verb: str = "get") -> Decision:
        token = bearer_token(header)
        if token is None:
            return "no_token"
        if token is False:
            return "malformed"
        key = hashlib.sha256(f"{verb} {path} {token}".encode()).digest()
        cached = self._cached(key)
        if cached is not None:
            return cached
        if self._waiting >= self.queue:
            return "busy"
        self._waiting += 1
        try:
            async with self._slots:
                cached = self._cached(key)  # another request may have asked meanwhile
                if cached is not None:
                    return cached
                loop = asyncio.get_running_loop()
                decision = await loop.run_in_executor(self._executor, self._review, token,
                                                      path, verb)
        finally:
            self._waiting -= 1
        if decision != "unavailable":
            ttl = self.allow_seconds if decision == "ok" else self.deny_seconds
            self._cache[key] = (decision, self.clock() + ttl)
            self._cache.move_to_end(key)
            while len(self._cache) > self.entries:
                self._cache.popitem(last=False)
        return decision

    def _cached(self, key: bytes) -> Decision | None:
        entry = self._cache.get(key)
        if entry is None:
            return None
        if entry[1] <= self.clock():
            del self._cache[key]
            return None
        self._cache.move_to_end(key)  # least recently used goes first
        return entry[0]

    def _review(self, token: str, path: str, verb: str) -> Decision:
        try:
            user = self.reviews.authenticate(token)
            if user is None:
                return "unauthenticated"
            return "ok" if self.reviews.allowed(user, path, verb) else "forbidden"
        except ReviewUnavailable as exc:
            self._unavailable.warning("unavailable", "token review failed: %s", exc)
            return "unavailable"

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
