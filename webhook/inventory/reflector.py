"""Keep one API resource mirrored through callbacks: list, then watch (after client-go's
tools/cache reflector).

A paginated list reports every object, then objects the handler was told about earlier and
the list no longer holds as deleted, then `on_synced`. A watch from the list's resourceVersion
(bookmarks on) reports each event; the stream ends (server timeout, dropped connection) and is
resumed from the last version seen. An expired version (410 Gone, however it arrives) relists;
any other failure, and a stream that ends at once without an event, resumes after an
exponential backoff with jitter. Nothing here knows what the objects mean.

With `watch_list` (kube-apiserver 1.34 and later serve it by default: the WatchList
feature), the list is a watch that streams the current objects first (`sendInitialEvents`,
from the watch cache), marks their end with a bookmark annotated `k8s.io/initial-events-end`,
then goes on as the watch: one request instead of a page per 100 objects, nothing between the
list and the watch to miss. A server or client that refuses it gets pages, as before.

The blocking `kubernetes` client runs in worker threads and returns raw JSON
(`_preload_content=False`), decoded there too (streams.py); callbacks run on the event loop
only, in slices that let reviews go first (pacing.py).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Mapping, Set
from typing import Any

import orjson

from webhook.inventory.pacing import pacer
from webhook.inventory.reflector_terms import (
    Expired,
    NoMetrics,
    ReflectorMetrics,
    ReflectorSettings,
    Unavailable,
    expired,
    refused,
)
from webhook.inventory.streams import Feed, Pager, read_all
from webhook.inventory.syncgate import SyncGate

log = logging.getLogger(__name__)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
BOOKMARK = "BOOKMARK"
INITIAL_EVENTS_END = "k8s.io/initial-events-end"  # the bookmark that ends a watch-list's state
_PRODUCTIVE_STREAM_SECONDS = 10.0
KeyOf = Callable[[Mapping[str, Any]], str | None]
# (kind, key, object); the object is None for a deletion a relist found (final state unknown).
OnEvent = Callable[[str, str, Mapping[str, Any] | None], None]
Sleep = Callable[[float], Awaitable[None]]


class _EmptyStream(Exception):
    """A watch ended at once without a single event: treated as a failure (backoff)."""


class _Unfinished(Exception):
    """A watch-list ended before its initial events did: listed again, after a backoff."""


async def supervise(name: str, loop: Callable[[], Awaitable[None]], metrics: ReflectorMetrics,
                    pause: float, sleep: Sleep = asyncio.sleep) -> None:
    """Run `loop` forever: a bug in it is logged and the loop restarted after `pause`, instead
    of silently freezing what it maintains while /readyz still says ready."""
    while True:
        try:
            await loop()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("%s crashed; restarting it in %.1fs", name, pause)
            metrics.watch_restart(name)
            await sleep(pause)


class Reflector:
    """Mirror `resource` (what `list_call`, a `kubernetes` list method, returns) into
    `on_event`; `run()` until cancelled."""

    def __init__(
        self,
        resource: str,
        list_call: Callable[..., Any],
        key: KeyOf,
        on_event: OnEvent,
        on_synced: Callable[[Set[str]], None] | None = None,
        settings: ReflectorSettings = ReflectorSettings(),  # noqa: B008 - frozen, shared
        metrics: ReflectorMetrics | None = None,
        *,
        on_unavailable: Callable[[Unavailable], None] | None = None,
        held: Callable[[], Set[str]] | None = None,
        decode_page: Callable[[bytes], Mapping[str, Any]] = orjson.loads,
        decode_event: Callable[[bytes], Mapping[str, Any]] = orjson.loads,
        sleep: Sleep = asyncio.sleep,
        jitter: Callable[[float, float], float] = random.uniform,
        gate: SyncGate | None = None,
    ) -> None:
        """`gate`: told when a full list starts and ends, and when the watch fails and
        answers again (syncgate.py: readiness)."""
        self.resource = resource
        self._gate = gate
        self._call = list_call
        self._key = key
        self._on_event = on_event
        self._on_synced = on_synced
        self._settings = settings
        self._metrics: ReflectorMetrics = metrics or NoMetrics()
        self._on_unavailable = on_unavailable
        self._sleep = sleep
        self._jitter = jitter
        # What the handler holds: a relist reports the rest gone. `held` is the handler's own
        # view of it (150,000 pod uids need not be kept twice); else the reflector tracks them.
        self._keys: set[str] = set()
        self._held = held
        self._decode_page = decode_page  # a list page
        self._decode_event = decode_event  # a watch event's line
        self._version: str | None = None  # where a watch resumes; None: list first
        self._streaming = settings.watch_list  # False once the server refused a watch-list
        # While a watch-list streams its initial state: the keys it has reported (None: a
        # plain watch, or the state has ended).
        self._initial: set[str] | None = None
        self._slice_end = 0.0  # loop time at which the events being applied give way
        # The last list was refused as unavailable (an absent CRD, Leases we may not read):
        # trying it again holds nothing back from readiness, there is no picture to rebuild.
        self._unavailable = False

    def report_sync_to(self, gate: SyncGate) -> None:
        """Tell `gate` when a full list starts and ends and how the watch fares; it waits
        for this resource from now on."""
        self._gate = gate
        gate.await_(self.resource)

    async def run(self) -> None:
        await supervise(f"{self.resource} watch", self._list_watch, self._metrics,
                        self._settings.backoff_max, self._sleep)

    async def _list_watch(self) -> None:
        settings = self._settings
        backoff = settings.backoff_initial
        self._version = None  # (re)started: list first
        self._metrics.relist(self.resource, "start")
        while True:
            try:
                started = time.monotonic()
                if self._version is None and self._gate is not None and not self._unavailable:
                    self._gate.listing(self.resource)
                if self._version is None and self._streaming:
                    events = await self._watch(None)  # the state, then its changes
                    if self._version is None:
                        raise _Unfinished("stream ended before its initial events")
                else:
                    if self._version is None:
                        self._version = await self._list()
                        started = time.monotonic()
                    events = await self._watch(self._version)
                if not events and time.monotonic() - started < _PRODUCTIVE_STREAM_SECONDS:
                    # Closed at once with nothing in it (a proxy cutting streams, say): back
                    # off as for an error instead of reconnecting in a tight loop.
                    raise _EmptyStream("stream closed with no events")
                backoff = settings.backoff_initial  # a healthy stream ended: resume
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._initial = None
                if self._version is None and self._streaming and refused(exc):
                    log.info("%s: watch-list refused (%s: %s); listing in pages",
                             self.resource, type(exc).__name__, exc)
                    self._streaming = False
                    continue
                if expired(exc):  # the one place a 410 is handled, however it arrived
                    log.info("%s: resourceVersion %s expired (410 Gone); relisting",
                             self.resource, self._version)
                    self._metrics.relist(self.resource, "expired")
                    self._version = None
                    continue
                if isinstance(exc, Unavailable):
                    self._version = None
                    self._unavailable = True
                    if self._on_unavailable is not None:
                        self._on_unavailable(exc)
                    if self._gate is not None:  # nothing to list: nothing to wait for
                        self._gate.synced(self.resource)
                    await self._sleep(exc.retry_after)
                    continue
                if self._gate is not None:
                    self._gate.failing(self.resource)
                self._metrics.watch_restart(self.resource)
                delay = self._jitter(backoff / 2, backoff)  # spreads reconnect storms
                log.warning("%s watch failed (%s: %s); retrying in %.1fs", self.resource,
                            type(exc).__name__, exc, delay)
                await self._sleep(delay)
                backoff = min(backoff * 2, settings.backoff_max)

    async def _list(self) -> str:
        """A full paginated list; returns its resourceVersion."""
        seen: set[str] = set()
        version = ""
        pager = Pager(self._fetch, self._decode_page,
                      self._settings.page_size)
        fetching = asyncio.ensure_future(asyncio.to_thread(pager.run))
        try:
            more = True
            while more:
                page, more = await pager.next_page()
                metadata = page.get("metadata") or {}
                items = page.get("items") or []
                del page
                for item in items:
                    await self._pace()
                    self._report(item, seen)
                del items
                version = metadata.get("resourceVersion") or version
                pager.consumed()  # the next page but one may now travel
        finally:
            pager.stop()
            if fetching.done() and not fetching.cancelled():
                fetching.exception()  # retrieved: a failure already arrived as a page
        # No await from here to on_synced: nothing lands between the deletions and the end.
        self._synced(seen)
        return version

    def _report(self, obj: Mapping[str, Any], seen: set[str]) -> None:
        """One object of the current state (a list item, a watch-list's initial event)."""
        key = self._key(obj)
        if key is None:
            return
        held = self._held() if self._held is not None else self._keys
        self._on_event(MODIFIED if key in held else ADDED, key, obj)
        if self._held is None:
            self._keys.add(key)  # reported, even if the list fails later
        seen.add(key)

    def _synced(self, seen: set[str]) -> None:
        """The state is complete: what the handler holds beyond it is gone."""
        held = self._held() if self._held is not None else self._keys
        missing = [key for key in held if key not in seen]
        if self._held is None:
            self._keys = seen
        for key in missing:
            self._on_event(DELETED, key, None)
        if self._on_synced is not None:
            self._on_synced(seen)
        self._unavailable = False
        if self._gate is not None:  # after what the handler derives from the list
            self._gate.synced(self.resource)

    async def _pace(self) -> None:
        """Between two objects applied: past the slice, give the loop to reviews first."""
        loop = asyncio.get_running_loop()
        if loop.time() >= self._slice_end:
            await pacer().turn()
            self._slice_end = loop.time() + self._settings.slice_seconds

    def _fetch(self, token: str | None, limit: int | None = None) -> bytes:
        """One list page's raw bytes (in a worker thread); `limit` None: the first page's."""
        kwargs: dict[str, Any] = {"limit": limit or self._settings.page_size,
                                  "_preload_content": False,
                                  "_request_timeout": self._settings.request_timeout}
        if token:
            kwargs["_continue"] = token
        return read_all(self._call, kwargs)

    async def _watch(self, version: str | None) -> int:
        """Report the events of one watch stream, keeping `_version` at the last one seen (a
        stream that breaks resumes from there); returns how many events, bookmarks included,
        arrived. `version` None: a watch-list, which reports the current state first (as a
        list does) and sets `_version` only where that state ends."""
        count = 0
        kwargs: dict[str, Any] = {
            "watch": True, "allow_watch_bookmarks": True,
            "timeout_seconds": self._settings.watch_timeout_seconds,
            "_preload_content": False, "_request_timeout": self._settings.request_timeout}
        if version is None:
            # resourceVersion unset: the state as of now (a consistent read, from the cache).
            kwargs.update(send_initial_events=True, resource_version_match="NotOlderThan")
            self._initial = set()
        else:
            kwargs["resource_version"] = version
        gate = self._gate
        feed = Feed(lambda: self._call(**kwargs), self._decode_event,
                    (lambda: gate.healthy(self.resource)) if gate is not None else None)
        reader = asyncio.ensure_future(asyncio.to_thread(feed.run))
        try:
            while (item := await feed.get()) is not None:
                received, event = item
                count += 1
                change = self._initial is None  # not the state a watch-list starts with
                self._dispatch(event)
                feed.consumed()
                if change:
                    self._metrics.event_lag(time.monotonic() - received)
                await self._pace()
        finally:
            self._initial = None  # a state that did not end is listed again
            feed.stop()
            await asyncio.wait({reader}, timeout=5)
            # Retrieved even when this stream already failed: the reader's own error (a
            # stream closed under it) then says nothing new.
            exc = reader.exception() if reader.done() and not reader.cancelled() else None
        if exc is not None:
            raise exc
        return count

    def _dispatch(self, event: Mapping[str, Any]) -> None:
        """Report one watch event, then move the resume point past it."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise Expired(obj.get("message") or "410 Gone")
            raise RuntimeError(f"watch error: {obj.get('message') or obj}")
        if self._initial is not None:
            self._dispatch_initial(str(kind), obj, self._initial)
            return
        key = self._key(obj) if kind in (ADDED, MODIFIED, DELETED) else None
        if key is not None:  # a BOOKMARK only moves the version on
            self._on_event(str(kind), key, obj)
            if self._held is None and kind == DELETED:
                self._keys.discard(key)
            elif self._held is None:
                self._keys.add(key)
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self._version = str(version)

    def _dispatch_initial(self, kind: str, obj: Mapping[str, Any], seen: set[str]) -> None:
        """A watch-list's event before its state ended: an object of the state, reported as a
        list item; no resume point (the objects come in key order, not version order) until
        the bookmark that ends the state, which completes it as a list's last page does."""
        if kind == BOOKMARK:
            metadata = obj.get("metadata") or {}
            if (metadata.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                self._initial = None
                self._synced(seen)
                self._version = str(metadata.get("resourceVersion") or "")
            return
        if kind == DELETED:  # not sent before the state ends today; handled all the same
            key = self._key(obj)
            if key is not None:
                seen.discard(key)
                self._on_event(DELETED, key, obj)
                if self._held is None:
                    self._keys.discard(key)
            return
        if kind in (ADDED, MODIFIED):
            self._report(obj, seen)
