"""Keep one API resource mirrored through callbacks: list, then watch (after client-go's
tools/cache reflector).

A paginated list reports every object, then objects the handler was told about earlier and
the list no longer holds as deleted, then `on_synced`. A watch from the list's resourceVersion
(bookmarks on) reports each event; the stream ends (server timeout, dropped connection) and is
resumed from the last version seen. An expired version (410 Gone, however it arrives) relists;
any other failure, and a stream that ends at once without an event, resumes after an
exponential backoff with jitter. Nothing here knows what the objects mean.

The blocking `kubernetes` client runs in worker threads and returns raw JSON
(`_preload_content=False`, decoded with orjson); callbacks run on the event loop only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Set
from dataclasses import dataclass
from typing import Any, Protocol

import msgspec
import orjson

log = logging.getLogger(__name__)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
_MAX_LINE = 16 << 20  # one watch event; Node and Pod objects are far smaller
_PRODUCTIVE_STREAM_SECONDS = 10.0

KeyOf = Callable[[Mapping[str, Any]], str | None]
# (kind, key, object); the object is None for a deletion a relist found (final state unknown).
OnEvent = Callable[[str, str, Mapping[str, Any] | None], None]
Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class ReflectorSettings:
    page_size: int = 100  # small pages keep a big list's transient objects few
    watch_timeout_seconds: int = 300  # server-side; the stream then ends and is resumed
    connect_timeout_seconds: float = 10.0
    read_timeout_seconds: float = 330.0  # longer than the server-side watch timeout
    backoff_initial: float = 0.5
    backoff_max: float = 30.0

    @property
    def request_timeout(self) -> tuple[float, float]:
        """(connect, read): a short connect timeout keeps shutdown quick."""
        return (self.connect_timeout_seconds, self.read_timeout_seconds)


class ReflectorMetrics(Protocol):
    """Counters a reflector reports to (webhook.serving.metrics.InventoryMetrics)."""

    def watch_restart(self, resource: str) -> None: ...
    def relist(self, resource: str, reason: str) -> None: ...
    def event_lag(self, seconds: float) -> None: ...


class NoMetrics:
    def watch_restart(self, resource: str) -> None:
        pass

    def relist(self, resource: str, reason: str) -> None:
        pass

    def event_lag(self, seconds: float) -> None:
        pass


class Expired(Exception):
    """The resourceVersion is too old (410 Gone in a watch ERROR event): relist."""


class Unavailable(Exception):
    """The resource is not served (an optional CRD not installed): the list call raises this
    to be retried after `retry_after` seconds, quietly (the caller logs what it means)."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class _EmptyStream(Exception):
    """A watch ended at once without a single event: treated as a failure (backoff)."""


def expired(exc: BaseException) -> bool:
    """410 Gone, as an ERROR event or as the HTTP status of a list or watch request (an
    expired `continue` token, say): the one test every path goes through."""
    return isinstance(exc, Expired) or getattr(exc, "status", None) == 410


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
        settings: ReflectorSettings = ReflectorSettings(),
        metrics: ReflectorMetrics | None = None,
        *,
        on_unavailable: Callable[[Unavailable], None] | None = None,
        held: Callable[[], Set[str]] | None = None,
        decode_page: Callable[[bytes], Mapping[str, Any]] = orjson.loads,
        decode_event: Callable[[bytes], Mapping[str, Any]] = orjson.loads,
        sleep: Sleep = asyncio.sleep,
        jitter: Callable[[float, float], float] = random.uniform,
    ) -> None:
        self.resource = resource
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
        self._decode_head = _continue_token
        self._version: str | None = None  # where a watch resumes; None: list first

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
                if expired(exc):  # the one place a 410 is handled, however it arrived
                    log.info("%s: resourceVersion %s expired (410 Gone); relisting",
                             self.resource, self._version)
                    self._metrics.relist(self.resource, "expired")
                    self._version = None
                    continue
                if isinstance(exc, Unavailable):
                    self._version = None
                    if self._on_unavailable is not None:
                        self._on_unavailable(exc)
                    await self._sleep(exc.retry_after)
                    continue
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
        pager = _Pager(self._fetch, self._decode_head)
        fetching = asyncio.ensure_future(asyncio.to_thread(pager.run))
        try:
            more = True
            while more:  # no await between the last page's events and on_synced
                data, more = await pager.next_page()
                page = self._decode_page(data)
                del data
                metadata = page.get("metadata") or {}
                held = self._held() if self._held is not None else self._keys
                for item in page.get("items") or []:
                    key = self._key(item)
                    if key is not None:
                        self._on_event(MODIFIED if key in held else ADDED, key, item)
                        if self._held is None:
                            self._keys.add(key)  # reported, even if a later page fails
                        seen.add(key)
                version = metadata.get("resourceVersion") or version
                del page
                pager.consumed()  # the next page but one may now travel
        finally:
            pager.stop()
            if fetching.done() and not fetching.cancelled():
                fetching.exception()  # retrieved: a failure already arrived as a page
        held = self._held() if self._held is not None else self._keys
        missing = [key for key in held if key not in seen]
        if self._held is None:
            self._keys = seen
        for key in missing:
            self._on_event(DELETED, key, None)
        if self._on_synced is not None:
            self._on_synced(seen)
        return version

    def _fetch(self, token: str | None) -> bytes:
        """One list page's raw bytes (in a worker thread)."""
        kwargs: dict[str, Any] = {"limit": self._settings.page_size,
                                  "_preload_content": False,
                                  "_request_timeout": self._settings.request_timeout}
        if token:
            kwargs["_continue"] = token
        return _read_all(self._call, kwargs)

    async def _watch(self, version: str) -> int:
        """Report the events of one watch stream, keeping `_version` at the last one seen (a
        stream that breaks resumes from there); returns how many events, bookmarks included,
        arrived."""
        loop = asyncio.get_running_loop()
        count = 0
        kwargs = {"watch": True, "resource_version": version, "allow_watch_bookmarks": True,
                  "timeout_seconds": self._settings.watch_timeout_seconds,
                  "_preload_content": False,
                  "_request_timeout": self._settings.request_timeout}
        # Unbounded on purpose: the thread must never block on a loop that stopped reading.
        events: asyncio.Queue[tuple[float, bytes] | None] = asyncio.Queue()
        stop = threading.Event()
        opened: list[Any] = []

        def pump() -> None:
            try:
                resp = self._call(**kwargs)
                opened.append(resp)
                if stop.is_set():  # cancelled while connecting
                    _close(resp)
                    return
                try:
                    for line in _lines(resp):
                        if stop.is_set():
                            break
                        loop.call_soon_threadsafe(events.put_nowait, (time.monotonic(), line))
                except Exception:
                    # A stream we closed ourselves (stop, shutdown) breaks mid-read: expected,
                    # and nobody may be left to retrieve the error.
                    if not stop.is_set():
                        raise
                finally:
                    _close(resp)
            finally:
                if not loop.is_closed():
                    loop.call_soon_threadsafe(events.put_nowait, None)

        reader = asyncio.ensure_future(asyncio.to_thread(pump))
        try:
            while (item := await events.get()) is not None:
                received, line = item
                count += 1
                self._dispatch(self._decode_event(line))
                self._metrics.event_lag(time.monotonic() - received)
        finally:
            stop.set()
            for resp in opened:
                _close(resp)  # unblocks the thread if it is still reading (or on cancel)
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


class _ListHead(msgspec.Struct):
    metadata: Any = None  # the items are skipped, not built


_LIST_HEAD = msgspec.json.Decoder(_ListHead)


def _continue_token(data: bytes) -> str | None:
    """A list page's `continue` token, read without building its items (C speed): the next
    page is asked for before this one is decoded. None: the last page, or not JSON (the
    page's own decode then says what is wrong)."""
    try:
        metadata = _LIST_HEAD.decode(data).metadata
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    token = metadata.get("continue") if isinstance(metadata, dict) else None
    return str(token) if token else None


class _Pager:
    """Fetches a list's pages back to back in a worker thread, each as soon as the previous
    one has arrived (its `continue` token read from the raw bytes), at most one page ahead of
    the one being processed: the API server produces the next page while this process
    decodes and applies the current one (on 2 cores the two overlap instead of taking turns).
    A failure arrives in place of the page."""

    AHEAD = 2  # pages fetched and not yet processed: the current one and the next

    def __init__(self, fetch: Callable[[str | None], bytes],
                 token_of: Callable[[bytes], str | None]) -> None:
        self._fetch = fetch
        self._token_of = token_of
        self._loop = asyncio.get_running_loop()
        self._pages: asyncio.Queue[tuple[bytes, bool] | BaseException] = asyncio.Queue()
        self._room = threading.Semaphore(self.AHEAD)
        self._stopped = threading.Event()

    def run(self) -> None:
        """The worker thread: every page and whether more follow (or the failure)."""
        token: str | None = None
        try:
            while True:
                self._room.acquire()
                if self._stopped.is_set():
                    return
                data = self._fetch(token)
                if self._stopped.is_set():
                    return
                token = self._token_of(data)
                self._put((data, token is not None))
                if token is None:
                    return
        except BaseException as exc:  # handed to the list, which raises it
            self._put(exc)

    def _put(self, item: tuple[bytes, bool] | BaseException) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._pages.put_nowait, item)

    async def next_page(self) -> tuple[bytes, bool]:
        item = await self._pages.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def consumed(self) -> None:
        self._room.release()

    def stop(self) -> None:
        self._stopped.set()
        self._room.release()  # a thread waiting for room wakes up and ends


def _read_all(call: Callable[..., Any], kwargs: Mapping[str, Any]) -> bytes:
    resp = call(**kwargs)
    try:
        data: bytes = resp.data
        return data
    finally:
        _close(resp)


def _lines(resp: Any) -> Iterator[bytes]:
    """Newline-delimited JSON events from a streaming urllib3 response."""
    buffer = b""
    for chunk in resp.stream(65536, decode_content=True):
        buffer += chunk
        if len(buffer) > _MAX_LINE and b"\n" not in buffer:
            raise ValueError("watch event larger than the line cap")
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def _close(resp: Any) -> None:
    """Close a response, unblocking a thread that is reading it (urllib3 >= 2.3 shutdown)."""
    for step in ("shutdown", "close", "release_conn"):
        with contextlib.suppress(Exception):  # closing a broken connection may itself fail
            getattr(resp, step, lambda: None)()
