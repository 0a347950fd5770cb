"""The registry layer source: image reference -> ImageLayers, cached and bounded.

Caches (all in memory, all bounded):
- digest -> ImageLayers: content-addressed, so it never expires; an LRU over digests (the index
  digest and every platform manifest digest of an image point to the same entry).
- tag -> digest: a TTL (default 5 minutes); a moved tag costs one HEAD, and if the new digest is
  already known, nothing more.
- failures: a negative entry per reference with a short TTL that doubles on each consecutive
  failure (capped); a 429/503 with Retry-After also pauses the whole registry for that long.

`cached` answers from memory only (no I/O, no task creation). `resolve` coalesces concurrent
calls for the same reference into one registry round trip, limits concurrent requests per
registry host, and never raises: a failure is `None` (fail-open), counted in `stats`.

Platforms: an index yields every platform it lists (attestation entries `unknown/unknown`
skipped, at most `max_platforms`). A single manifest takes its platform from its config blob;
when the config cannot be read (a blob CDN outside the allowlist, say) linux/amd64 is assumed,
the platform of the overwhelming majority of single-arch images.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from webhook.core.images import ImageRef, try_parse
from webhook.core.layers import ImageLayers, Platform, PlatformLayers
from webhook.registry.client import Endpoint, RegistryClient, RegistryError
from webhook.registry.guard import GuardError, api_endpoint, split_host_port
from webhook.registry.manifest import DEFAULT_PLATFORM, IMAGE_TYPES, config_platform

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ResolverStats:
    """Plain counters, exported by webhook.serving.metrics (no Prometheus dependency here)."""

    cache: Counter[str] = field(default_factory=Counter)  # hit | miss | negative | coalesced
    requests: Counter[tuple[str, str]] = field(default_factory=Counter)  # (registry, outcome)
    failures: Counter[str] = field(default_factory=Counter)  # RegistryError.kind
    resolved: int = 0

    def on_request(self, registry: str, outcome: str) -> None:
        self.requests[(registry, outcome)] += 1


@dataclass(frozen=True, slots=True)
class ResolverLimits:
    max_digests: int = 16384
    max_tags: int = 16384
    max_negative: int = 16384
    tag_ttl: float = 300.0
    negative_ttl: float = 30.0
    negative_max_ttl: float = 600.0
    per_registry: int = 4
    max_platforms: int = 32
    max_inflight: int = 1024  # distinct lookups under way; more are shed (answered None)


class RegistryResolver:
    def __init__(
        self,
        client: RegistryClient,
        mirrors: Mapping[str, str] | None = None,
        limits: ResolverLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        stats: ResolverStats | None = None,
    ) -> None:
        self.client = client
        self.limits = limits or ResolverLimits()
        self.stats = stats or ResolverStats()
        self._mirrors = dict(mirrors or {})
        self._clock = clock
        self._images: OrderedDict[str, ImageLayers] = OrderedDict()
        self._tags: OrderedDict[str, tuple[str, float]] = OrderedDict()
        # reference -> (retry time, consecutive failures, why the last attempt failed)
        self._negative: OrderedDict[str, tuple[float, int, str]] = OrderedDict()
        self._paused: dict[str, float] = {}  # registry host -> monotonic time it may be retried
        self._inflight: dict[str, asyncio.Task[ImageLayers | None]] = {}
        self._semaphores: dict[str, asyncio.Semaphore] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    # -- LayerSource --------------------------------------------------------------------------

    def cached(self, ref: ImageRef) -> ImageLayers | None:
        digest = ref.digest
        if digest is None:
            tag = self._tags.get(str(ref))
            if tag is None or tag[1] <= self._clock():
                return None
            digest = tag[0]
        image = self._images.get(digest)
        if image is not None:
            self._images.move_to_end(digest)
        return image

    def failure(self, ref: ImageRef) -> str | None:
        """Why the last lookup of `ref` failed (None once it resolved, or never tried)."""
        negative = self._negative.get(str(ref))
        return negative[2] if negative is not None else None

    async def resolve(self, ref: ImageRef) -> ImageLayers | None:
        image = self.cached(ref)
        if image is not None:
            self.stats.cache["hit"] += 1
            return image
        self._bind_loop()
        key = str(ref)
        negative = self._negative.get(key)
        if negative is not None and negative[0] > self._clock():
            self.stats.cache["negative"] += 1
            return None
        task = self._inflight.get(key)
        if task is None and len(self._inflight) >= self.limits.max_inflight:
            self.stats.cache["shed"] += 1  # bounded work: this pod gets no preference
            return None
        if task is None:
            self.stats.cache["miss"] += 1
            task = asyncio.ensure_future(self._fetch(ref))
            self._inflight[key] = task
            task.add_done_callback(lambda done: self._forget(key, done))
        else:
            self.stats.cache["coalesced"] += 1
        # A waiter that gives up (the review budget) must not cancel the shared lookup.
        return await asyncio.shield(task)

    # -- housekeeping -------------------------------------------------------------------------

    async def close(self) -> None:
        tasks = list(self._inflight.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._inflight.clear()
        await self.client.close()

    def add(self, image: ImageLayers) -> None:
        """Remember an image resolved elsewhere (a preloaded catalog)."""
        self._remember(image)

    def __len__(self) -> int:
        return len({id(image) for image in self._images.values()})

    def _bind_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            # A new event loop (a CLI step run with asyncio.run): loop-bound state starts over.
            self._loop = loop
            self._inflight = {}
            self._semaphores = {}

    def _forget(self, key: str, task: asyncio.Task[ImageLayers | None]) -> None:
        if self._inflight.get(key) is task:
            del self._inflight[key]

    # -- fetching -----------------------------------------------------------------------------

    def endpoint(self, registry: str) -> Endpoint:
        """Where `registry`'s images are fetched; raises GuardError when refused."""
        scheme, host, port = api_endpoint(registry, self._mirrors, self.client.policy)
        mirror = self._mirrors.get(registry.lower())
        credentials_for = registry
        if mirror is not None:
            mirror_host, mirror_port = split_host_port(mirror)
            credentials_for = mirror if mirror_port is not None else mirror_host
        return Endpoint(credentials_for, scheme, host, port)

    async def _fetch(self, ref: ImageRef) -> ImageLayers | None:
        key = str(ref)
        try:
            endpoint = self.endpoint(ref.registry)
        except GuardError as exc:
            self.stats.failures["refused"] += 1
            self._fail(key, None, str(exc))
            log.info("not resolving %s: %s", ref, exc)
            return None
        try:
            paused = self._paused.get(self.client.policy.bucket(endpoint.host), 0.0)
            if paused > self._clock():
                raise RegistryError(f"{endpoint.host} is paused after a rate limit",
                                    kind="paused")
            digest = ref.digest
            if digest is None:
                assert ref.tag is not None
                async with self._slot(endpoint):
                    digest = await self.client.tag_digest(endpoint, ref.repository, ref.tag)
                self._remember_tag(key, digest)
                known = self._images.get(digest)
                if known is not None:
                    return known
            image = await self._image(endpoint, ref, digest)
        except RegistryError as exc:
            self.stats.failures[exc.kind] += 1
            if exc.retry_after is not None and exc.status in (429, 503):
                self._paused[self.client.policy.bucket(endpoint.host)] = self._clock() + min(
                    exc.retry_after, self.limits.negative_max_ttl
                )
            self._fail(key, exc.retry_after, str(exc))
            log.info("cannot resolve %s: %s", ref, exc)
            return None
        self._negative.pop(key, None)
        self._remember(image)
        self.stats.resolved += 1
        return image

    async def _image(self, endpoint: Endpoint, ref: ImageRef, digest: str) -> ImageLayers:
        async with self._slot(endpoint):
            manifest = await self.client.manifest(endpoint, ref.repository, digest)
        name = str(ref) if ref.digest is not None or ref.tagged is None else ref.tagged
        if not manifest.is_index:
            platform = await self._config_platform(endpoint, ref, manifest.config_digest)
            layers = PlatformLayers(digest, manifest.layers)
            return ImageLayers(name, digest, {platform: layers})
        wanted: dict[Platform, str] = {}
        for entry in manifest.entries:
            if entry.platform is None or entry.platform in wanted:
                continue
            if entry.media_type and entry.media_type not in IMAGE_TYPES:
                continue  # a nested index or an artifact
            wanted[entry.platform] = entry.digest
            if len(wanted) >= self.limits.max_platforms:
                break

        async def child(platform: Platform, child_digest: str) -> tuple[Platform, PlatformLayers]:
            async with self._slot(endpoint):
                found = await self.client.manifest(endpoint, ref.repository, child_digest)
            if found.is_index:
                raise RegistryError(f"{child_digest}: nested index", kind="bad_manifest")
            return platform, PlatformLayers(child_digest, found.layers)

        results = await asyncio.gather(*(child(p, d) for p, d in wanted.items()),
                                       return_exceptions=True)
        platforms: dict[Platform, PlatformLayers] = {}
        first_error: RegistryError | None = None
        for result in results:
            if isinstance(result, RegistryError):
                log.info("skipping a platform of %s: %s", ref, result)
                first_error = first_error or result
                continue
            if isinstance(result, BaseException):
                raise result
            platforms[result[0]] = result[1]
        if not platforms:
            if first_error is not None:
                raise first_error
            raise RegistryError(f"{ref}: index lists no usable platform", kind="bad_manifest")
        return ImageLayers(name, digest, platforms)

    async def _config_platform(self, endpoint: Endpoint, ref: ImageRef,
                               config_digest: str | None) -> Platform:
        if config_digest is None:
            return DEFAULT_PLATFORM
        try:
            async with self._slot(endpoint):
                body = await self.client.blob(endpoint, ref.repository, config_digest)
        except RegistryError as exc:
            log.info("config of %s unreadable, assuming %s: %s", ref, DEFAULT_PLATFORM, exc)
            return DEFAULT_PLATFORM
        return config_platform(body) or DEFAULT_PLATFORM

    def _slot(self, endpoint: Endpoint) -> asyncio.Semaphore:
        key = f"{self.client.policy.bucket(endpoint.host)}:{endpoint.port}"
        semaphore = self._semaphores.get(key)
        if semaphore is None:
            semaphore = self._semaphores[key] = asyncio.Semaphore(self.limits.per_registry)
        return semaphore

    # -- cache bookkeeping --------------------------------------------------------------------

    def _remember(self, image: ImageLayers) -> None:
        for digest in image.digests():
            self._images[digest] = image
            self._images.move_to_end(digest)
        while len(self._images) > self.limits.max_digests:
            self._images.popitem(last=False)

    def _remember_tag(self, key: str, digest: str) -> None:
        self._tags[key] = (digest, self._clock() + self.limits.tag_ttl)
        self._tags.move_to_end(key)
        while len(self._tags) > self.limits.max_tags:
            self._tags.popitem(last=False)

    def _fail(self, key: str, retry_after: float | None, reason: str) -> None:
        previous = self._negative.get(key)
        failures = previous[1] + 1 if previous is not None else 1
        ttl = min(self.limits.negative_ttl * 2 ** (failures - 1), self.limits.negative_max_ttl)
        if retry_after is not None:
            ttl = min(max(ttl, retry_after), self.limits.negative_max_ttl)
        self._negative[key] = (self._clock() + ttl, failures, reason)
        self._negative.move_to_end(key)
        while len(self._negative) > self.limits.max_negative:
            self._negative.popitem(last=False)


async def resolve_names(registry: RegistryResolver, names: Iterable[str],
                        concurrency: int = 16) -> None:
    """Resolve image `names` through the registry (bounded; failures are only logged)."""
    gate = asyncio.Semaphore(concurrency)

    async def one(name: str) -> None:
        ref = try_parse(name)
        if ref is None:
            return
        async with gate:
            await registry.resolve(ref)

    await asyncio.gather(*(one(name) for name in dict.fromkeys(names)))
