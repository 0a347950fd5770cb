"""The agent loop: a pass (runtime snapshot -> NodeLayers object and the node's layers), publish
(only a changed object is written), then the node's layer labels (only changed ones are
patched); image events (debounced) and a periodic resync trigger the next pass. The runtime
going away (socket absent, daemon restarting) is retried with capped exponential backoff, one
log line per outage; a failed publish or label patch is retried the same way. Readiness turns
true at the first publish, and the node's agent Lease is renewed from then on, beside the loop
and whatever the runtime does."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from webhook.core.layers import Platform

from .kube import ApiError
from .labels import FINAL, NodeLabeler
from .lease import LeaseRenewer
from .metrics import AgentMetrics, Backoff
from .nodelayers import Bounds, NodeRef, build_object, build_spec, layer_count
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


@dataclass(frozen=True, slots=True)
class Pass:
    """What one pass read: the object to publish and every distinct layer of the node's images
    (digest -> compressed size, before the object's bounds), for the layer labels."""

    body: dict[str, Any]
    layers: Mapping[str, int]


class Agent:
    def __init__(self, source: RuntimeSource, node: NodeRef, platform: Platform,
                 settings: AgentSettings, publish: Publish | None = None,
                 metrics: AgentMetrics | None = None, labeler: NodeLabeler | None = None,
                 lease: LeaseRenewer | None = None) -> None:
        self.source, self.node, self.platform = source, node, platform
        self.settings = settings
        self.publish = publish
        self.metrics = metrics or AgentMetrics()
        self.labeler, self.lease = labeler, lease
        self.ready = asyncio.Event()
        self.skipped = 0
        self._outage: str | None = None
        self._backoff = Backoff(settings.backoff_initial, settings.backoff_max)
        self._published_at = -math.inf  # monotonic time of the last write (object or labels)

    async def build(self) -> dict[str, Any]:
        """One pass: the object as it would be published now. Raises SourceUnavailable."""
        return (await self.read()).body

    async def read(self) -> Pass:
        """One pass: the object and the node's layers. Raises SourceUnavailable."""
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
        layers = {layer.digest: layer.size for image in snapshot.images
                  for layer in image.layers}
        return Pass(build_object(self.node, spec), layers)

    async def build_when_available(self) -> dict[str, Any]:
        """`build`, retried with backoff while the runtime is unreachable."""
        return (await self.read_when_available()).body

    async def read_when_available(self) -> Pass:
        """`read`, retried with backoff while the runtime is unreachable (--once)."""
        while True:
            try:
                done = await self.read()
            except SourceUnavailable as exc:
                await asyncio.sleep(self._unavailable(exc))
                continue
            self._available()
            return done

    async def run(self) -> None:
        """Forever: pass, publish and label, then on events (debounced) or the resync period;
        the Lease renewed beside it once the first publish succeeded."""
        renewing = asyncio.create_task(self._renew_when_ready())
        try:
            while True:
                try:
                    await self._connected()
                except SourceUnavailable as exc:
                    await asyncio.sleep(self._unavailable(exc))
        finally:
            renewing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewing

    async def _renew_when_ready(self) -> None:
        # Not before the first publish: a Lease says this node's object and labels are
        # current, which the object left by a previous run need not be.
        if self.lease is not None:
            await self.ready.wait()
            await self.lease.run()

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
                seen = await self.read()
                self._available()
                wait = self.settings.resync_seconds
                published = await self._publish(seen.body)
                if not await self.label(seen.layers) or not published:
                    wait = retry.next()
                else:
                    retry.reset()
        finally:
            watcher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await watcher
            if not gone.done():
                gone.cancel()

    async def publish_until_done(self, built: dict[str, Any] | Pass) -> None:
        """--once: publish `built` (and label the node from a Pass), retrying failures with
        backoff."""
        retry = Backoff(self.settings.backoff_initial, self.settings.backoff_max)
        body = built.body if isinstance(built, Pass) else built
        published = False
        while True:
            published = published or await self._publish(body)
            if published and (not isinstance(built, Pass) or await self.label(built.layers)):
                return
            await asyncio.sleep(retry.next())

    async def label(self, layers: Mapping[str, int]) -> bool:
        """Patch the node's layer labels when they differ from what `layers` give; False when
        it should be retried soon (a refusal waits for the next pass: retrying cannot heal
        it)."""
        if self.labeler is None:
            return True
        try:
            wrote = await asyncio.to_thread(self.labeler.reconcile, layers)
        except ApiError as exc:
            return exc.status in FINAL
        if wrote:
            self._published_at = time.monotonic()
        return True

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
                     len(built["spec"]["images"]), layer_count(built["spec"]))
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
