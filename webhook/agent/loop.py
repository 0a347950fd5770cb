"""The agent loop: a pass (runtime snapshot -> NodeLayers object), publish; then image events
(debounced) and a periodic resync trigger the next pass. The runtime going away (socket absent,
daemon restarting) is retried with capped exponential backoff, one log line per outage; a failed
publish is retried the same way. Readiness turns true at the first publish."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from webhook.core.layers import Platform

from .nodelayers import Bounds, NodeRef, build_object, build_spec
from .publish import PublishError
from .source import RuntimeSource, SourceUnavailable

log = logging.getLogger(__name__)
Publish = Callable[[dict[str, Any]], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class AgentSettings:
    resync_seconds: int = 300
    # A change is published after this quiet time (a pull emits several events at once), and
    # publishes of one node are at least `min_publish_seconds` apart: a pulled image reaches
    # the webhook in well under a second, and a node pulling non-stop writes twice a second.
    debounce_seconds: float = 0.25
    min_publish_seconds: float = 0.5
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    bounds: Bounds = field(default_factory=Bounds)


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.passes = Counter("layer_locality_agent_passes", "Runtime reads", registry=r)
        self.outages = Counter("layer_locality_agent_runtime_outages",
                               "Times the runtime became unreachable", registry=r)
        self.publishes = Counter("layer_locality_agent_publishes", "NodeLayers writes",
                                 registry=r)
        self.publish_failures = Counter("layer_locality_agent_publish_failures",
                                        "NodeLayers writes that failed (retried)", registry=r)
        self.skipped = Gauge("layer_locality_agent_images_skipped",
                             "Images whose manifest is missing from the content store (last pass)",
                             registry=r)
        self.images = Gauge("layer_locality_agent_images", "Images published (last pass)",
                            registry=r)
        self.truncated = Gauge("layer_locality_agent_truncated_images",
                               "Images left out by the object's bounds (last pass)", registry=r)
        self.ready = Gauge("layer_locality_agent_ready", "1 once the first publish succeeded",
                           registry=r)


class Backoff:
    def __init__(self, initial: float, cap: float) -> None:
        self.initial, self.cap = initial, cap
        self.delay = initial

    def next(self) -> float:
        delay, self.delay = self.delay, min(self.delay * 2, self.cap)
        return delay

    def reset(self) -> None:
        self.delay = self.initial


class Agent:
    def __init__(self, source: RuntimeSource, node: NodeRef, platform: Platform,
                 settings: AgentSettings, publish: Publish | None = None,
                 metrics: AgentMetrics | None = None) -> None:
        self.source, self.node, self.platform = source, node, platform
        self.settings = settings
        self.publish = publish
        self.metrics = metrics or AgentMetrics()
        self.ready = asyncio.Event()
        self.skipped = 0
        self._outage: str | None = None
        self._backoff = Backoff(settings.backoff_initial, settings.backoff_max)
        self._published_at = -math.inf  # monotonic time of the last write

    async def build(self) -> dict[str, Any]:
        """One pass: the object as it would be published now. Raises SourceUnavailable."""
        snapshot = await self.source.snapshot(self.platform)
        heartbeat = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        spec = build_spec(self.node.name, self.source.runtime, self.platform,
                          self.settings.resync_seconds, heartbeat, snapshot.images,
                          self.settings.bounds)
        self.skipped = snapshot.skipped
        self.metrics.passes.inc()
        self.metrics.skipped.set(snapshot.skipped)
        self.metrics.images.set(len(spec["images"]))
        self.metrics.truncated.set(spec["truncated"]["images"])
        if spec["truncated"]["images"]:
            log.warning("nodelayers bounds: left out %d images (%d layers)",
                        spec["truncated"]["images"], spec["truncated"]["layers"])
        return build_object(self.node, spec)

    async def build_when_available(self) -> dict[str, Any]:
        """`build`, retried with backoff while the runtime is unreachable (--once)."""
        while True:
            try:
                built = await self.build()
            except SourceUnavailable as exc:
                await asyncio.sleep(self._unavailable(exc))
                continue
            self._available()
            return built

    async def run(self) -> None:
        """Forever: pass and publish, then on events (debounced) or the resync period."""
        while True:
            try:
                await self._connected()
            except SourceUnavailable as exc:
                await asyncio.sleep(self._unavailable(exc))

    async def _connected(self) -> None:
        changed = asyncio.Event()
        gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def watch() -> None:
            try:
                async for _topic in self.source.changes():
                    changed.set()
            except SourceUnavailable as exc:
                if not gone.done():
                    gone.set_exception(exc)
            except Exception as exc:  # a stream error of another kind: reconnect all the same
                if not gone.done():
                    gone.set_exception(SourceUnavailable(f"event stream: {exc!r}"))

        # Subscribe before the first pass, so a change during it is not lost.
        watcher = asyncio.create_task(watch())
        try:
            retry = Backoff(self.settings.backoff_initial, self.settings.backoff_max)
            wait: float = 0
            while True:
                woke: asyncio.Future[Any] = asyncio.ensure_future(changed.wait())
                waiters: set[asyncio.Future[Any]] = {woke, gone}
                done, _ = await asyncio.wait(waiters, timeout=wait,
                                             return_when=asyncio.FIRST_COMPLETED)
                woke.cancel()
                if gone in done:
                    gone.result()  # raises SourceUnavailable
                if woke in done:
                    since = time.monotonic() - self._published_at
                    await asyncio.sleep(max(self.settings.debounce_seconds,  # coalesce a burst
                                            self.settings.min_publish_seconds - since))
                changed.clear()
                built = await self.build()
                self._available()
                wait = self.settings.resync_seconds
                if not await self._publish(built):
                    wait = retry.next()
                else:
                    retry.reset()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            if not gone.done():
                gone.cancel()

    async def publish_until_done(self, built: dict[str, Any]) -> None:
        """--once: publish `built`, retrying failures with backoff."""
        retry = Backoff(self.settings.backoff_initial, self.settings.backoff_max)
        while True:
            if await self._publish(built):
                return
            await asyncio.sleep(retry.next())

    async def _publish(self, built: dict[str, Any]) -> bool:
        if self.publish is None:
            self.ready.set()
            return True
        try:
            wrote = await self.publish(built)
        except PublishError as exc:
            self.metrics.publish_failures.inc()
            log.warning("publish failed, retrying: %s", exc)
            return False
        if wrote:
            self.metrics.publishes.inc()
            self._published_at = time.monotonic()
        if not self.ready.is_set():
            log.info("published nodelayers/%s: %d images, %d layers", self.node.name,
                     len(built["spec"]["images"]), len(built["spec"]["layers"]))
        self.ready.set()
        self.metrics.ready.set(1)
        return True

    def _unavailable(self, exc: SourceUnavailable) -> float:
        if self._outage is None:  # one line per outage, however long it lasts
            self._outage = str(exc)
            self.metrics.outages.inc()
            log.warning("%s unreachable, retrying with backoff: %s", self.source.runtime, exc)
        return self._backoff.next()

    def _available(self) -> None:
        if self._outage is not None:
            log.info("%s reachable again", self.source.runtime)
            self._outage = None
        self._backoff.reset()
