"""The live inventory: Nodes and bound Pods from the API server, kept in the layer index.

List (paginated) then watch from the list's resourceVersion with bookmarks; on 410 Gone relist;
on any other failure resume with exponential backoff and jitter. The official `kubernetes`
client does configuration, authentication and the requests; its blocking calls run in worker
threads and hand events to the event loop, which alone touches the index.

Node images become layers through the layer sources (`cached` first; unknown images are
resolved in the background and the nodes that reported them re-indexed when they arrive).
Pods just bound to a node count their layers as present there ("in flight") until the node
status reports the image or `inflight_seconds` pass: the next pod of the same image sees the
first one's node as warm before the kubelet has pulled anything.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from webhook.images import try_parse
from webhook.inventory.index import LayerIndex
from webhook.inventory.nodes import NodeError, NodeInfo, node_from_object
from webhook.layers import ImageLayers, LayerSource, SourceChain
from webhook.pods import pod_images

log = logging.getLogger(__name__)

_MAX_LINE = 16 << 20  # one watch event; Node objects are far smaller
_PRODUCTIVE_STREAM_SECONDS = 10.0


class Gone(Exception):
    """The resourceVersion is too old (HTTP 410): relist."""


class _EmptyStream(Exception):
    """A watch ended at once without a single event: treated as a failure (backoff)."""


@dataclass(frozen=True, slots=True)
class WatchSettings:
    page_size: int = 500
    watch_timeout_seconds: int = 300  # server-side; the stream then ends and is resumed
    connect_timeout_seconds: float = 10.0
    read_timeout_seconds: float = 330.0  # longer than the server-side watch timeout
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    inflight_seconds: float = 600.0

    @property
    def request_timeout(self) -> tuple[float, float]:
        """(connect, read): a short connect timeout keeps shutdown quick."""
        return (self.connect_timeout_seconds, self.read_timeout_seconds)
    resolve_concurrency: int = 4
    max_pending_resolutions: int = 10_000
    max_known_images: int = 50_000  # last answer per node image name (LRU)


class LiveMetrics(Protocol):
    """Counters the watch loops report to (webhook.metrics.InventoryMetrics)."""

    def watch_restart(self, resource: str) -> None: ...
    def relist(self, resource: str) -> None: ...
    def event_lag(self, seconds: float) -> None: ...


class _NoMetrics:
    def watch_restart(self, resource: str) -> None:
        pass

    def relist(self, resource: str) -> None:
        pass

    def event_lag(self, seconds: float) -> None:
        pass


@dataclass
class _InFlight:
    image: ImageLayers
    expires: float


class LiveInventory:
    """`index` and `ready` for the Mutator; `run()` keeps them current until cancelled."""

    def __init__(
        self,
        api: Any,  # kubernetes.client.CoreV1Api (typed Any: the client ships no type hints)
        sources: Sequence[LayerSource],
        settings: WatchSettings = WatchSettings(),
        metrics: LiveMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._api = api
        self._sources = SourceChain(sources)
        self._settings = settings
        self._metrics: LiveMetrics = metrics or _NoMetrics()
        self._clock = clock
        self._index = LayerIndex()
        self._ready = asyncio.Event()
        self._nodes: dict[str, NodeInfo] = {}
        self._reported: dict[str, frozenset[str]] = {}  # node -> digests of reported images
        self._inflight: dict[str, dict[str, _InFlight]] = {}  # node -> image digest -> entry
        self._waiting: dict[str, set[str]] = {}  # unresolved image name -> nodes reporting it
        self._known: OrderedDict[str, ImageLayers] = OrderedDict()
        self._resolve_queue: asyncio.Queue[str] = asyncio.Queue()
        self._pod_seen: set[str] = set()  # pod uids already counted
        self._responses: set[Any] = set()

    # -- what reviews read ---------------------------------------------------------------

    @property
    def index(self) -> LayerIndex:
        return self._index

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    async def wait_ready(self) -> None:
        await self._ready.wait()

    async def settled(self) -> None:
        """Ready, and every node image queued for resolution so far has been tried."""
        await self._ready.wait()
        await self._resolve_queue.join()

    # -- lifecycle ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Watch nodes and pods, resolve images, expire in-flight entries; until cancelled."""
        loops: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("node watch", lambda: self._list_watch("nodes", self._api.list_node,
                                                    self._apply_nodes)),
            ("pod watch", lambda: self._list_watch("pods", self._list_bound_pods,
                                                   self._apply_pods)),
            ("in-flight expiry", self._expire_loop),
            *((f"resolver {i}", self._resolve_loop)
              for i in range(self._settings.resolve_concurrency)),
        ]
        tasks = [asyncio.create_task(self._supervise(name, loop)) for name, loop in loops]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            for resp in list(self._responses):
                _close(resp)  # unblocks the threads reading watch streams
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _supervise(self, name: str, loop: Callable[[], Awaitable[None]]) -> None:
        """Run `loop` forever: a bug in one loop is logged and the loop restarted, instead of
        silently freezing the inventory while /readyz still says ready."""
        while True:
            try:
                await loop()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("live inventory %s crashed; restarting it", name)
                self._metrics.watch_restart(name)
                await asyncio.sleep(self._settings.backoff_max)

    def _list_bound_pods(self, **kwargs: Any) -> Any:
        return self._api.list_pod_for_all_namespaces(field_selector="spec.nodeName!=", **kwargs)

    async def _list_watch(
        self,
        resource: str,
        call: Callable[..., Any],
        apply: Callable[[str, Mapping[str, Any]], None],
    ) -> None:
        backoff = self._settings.backoff_initial
        version: str | None = None
        while True:
            try:
                if version is None:
                    version = await self._list(resource, call, apply)
                    self._metrics.relist(resource)
                    if resource == "nodes":
                        self._ready.set()
                started = time.monotonic()
                version, events = await self._watch(resource, call, apply, version)
                if not events and time.monotonic() - started < _PRODUCTIVE_STREAM_SECONDS:
                    # Closed at once with nothing in it (a proxy cutting streams, say): back
                    # off as for an error instead of reconnecting in a tight loop.
                    raise _EmptyStream("stream closed with no events")
                backoff = self._settings.backoff_initial  # a healthy stream ended: resume
            except asyncio.CancelledError:
                raise
            except Gone:
                log.info("%s watch expired (410 Gone): relisting", resource)
                version = None
            except Exception as exc:
                if getattr(exc, "status", None) == 410:
                    version = None
                    continue
                self._metrics.watch_restart(resource)
                delay = random.uniform(backoff / 2, backoff)  # jitter spreads reconnect storms
                log.warning("%s watch failed (%s: %s); retrying in %.1fs", resource,
                            type(exc).__name__, exc, delay)
                await asyncio.sleep(delay)
                backoff = min(backoff * 2, self._settings.backoff_max)

    async def _list(
        self,
        resource: str,
        call: Callable[..., Any],
        apply: Callable[[str, Mapping[str, Any]], None],
    ) -> str:
        """A full paginated list; objects missing from it are removed afterwards."""
        seen: set[str] = set()
        token: str | None = None
        version = ""
        while True:
            kwargs: dict[str, Any] = {"limit": self._settings.page_size,
                                      "_preload_content": False,
                                      "_request_timeout": self._settings.request_timeout}
            if token:
                kwargs["_continue"] = token
            raw = await asyncio.to_thread(_read_all, call, kwargs)
            page = orjson.loads(raw)
            metadata = page.get("metadata") or {}
            for item in page.get("items") or []:
                key = _key(resource, item)
                if key:
                    seen.add(key)
                    apply("ADDED", item)
            token = metadata.get("continue") or None
            version = metadata.get("resourceVersion") or version
            if not token:
                break
        self._forget_missing(resource, seen)
        return version

    async def _watch(
        self,
        resource: str,
        call: Callable[..., Any],
        apply: Callable[[str, Mapping[str, Any]], None],
        version: str,
    ) -> tuple[str, int]:
        """Apply the events of one watch stream; returns the last resourceVersion seen and
        how many events (bookmarks included) arrived."""
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
                resp = call(**kwargs)
                opened.append(resp)
                if stop.is_set():  # cancelled while connecting
                    _close(resp)
                    return
                loop.call_soon_threadsafe(self._responses.add, resp)
                try:
                    for line in _lines(resp):
                        if stop.is_set():
                            break
                        loop.call_soon_threadsafe(events.put_nowait, (time.monotonic(), line))
                finally:
                    loop.call_soon_threadsafe(self._responses.discard, resp)
                    _close(resp)
            finally:
                if not loop.is_closed():
                    loop.call_soon_threadsafe(events.put_nowait, None)

        reader = asyncio.ensure_future(asyncio.to_thread(pump))
        try:
            while True:
                item = await events.get()
                if item is None:
                    break
                received, line = item
                count += 1
                event = orjson.loads(line)
                kind = event.get("type")
                obj = event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise RuntimeError(f"watch error: {obj.get('message') or obj}")
                new_version = (obj.get("metadata") or {}).get("resourceVersion")
                if kind != "BOOKMARK":
                    apply(str(kind), obj)
                if new_version:
                    version = new_version
                self._metrics.event_lag(time.monotonic() - received)
        finally:
            stop.set()
            for resp in opened:
                _close(resp)  # unblocks the thread if it is still reading
            await asyncio.wait({reader}, timeout=5)
        exc = reader.exception() if reader.done() and not reader.cancelled() else None
        if isinstance(exc, Exception) and getattr(exc, "status", None) == 410:
            raise Gone() from exc
        if exc is not None:
            raise exc
        return version, count

    def _forget_missing(self, resource: str, seen: set[str]) -> None:
        if resource == "nodes":
            for name in [n for n in self._nodes if n not in seen]:
                self._apply_nodes("DELETED", {"metadata": {"name": name}})
        else:
            self._pod_seen &= seen

    # -- nodes ---------------------------------------------------------------------------

    def _apply_nodes(self, kind: str, obj: Mapping[str, Any]) -> None:
        name = (obj.get("metadata") or {}).get("name")
        if not isinstance(name, str):
            return
        if kind == "DELETED":
            self._nodes.pop(name, None)
            self._reported.pop(name, None)
            self._inflight.pop(name, None)
            self._index.remove(name)
            return
        try:
            node = node_from_object(obj)
        except NodeError as exc:
            log.warning("ignoring node %s: %s", name, exc)
            return
        if self._nodes.get(name) == node:
            return  # a heartbeat-style update: nothing scoring uses changed
        self._nodes[name] = node
        self._reindex(name)

    def _reindex(self, name: str) -> None:
        node = self._nodes.get(name)
        if node is None:
            return
        layers: set[str] = set()
        reported: set[str] = set()
        for names in node.images:
            image = self._lookup(names, name)
            if image is not None:
                reported.add(image.digest)
                manifest = image.for_platform(node.platform)
                if manifest is not None:
                    layers.update(layer.digest for layer in manifest.layers)
        self._reported[name] = frozenset(reported)
        inflight = self._inflight.get(name, {})
        for digest in [d for d in inflight if d in reported]:
            del inflight[digest]  # the kubelet reports it now: no longer in flight
        for entry in inflight.values():
            manifest = entry.image.for_platform(node.platform)
            if manifest is not None:
                layers.update(layer.digest for layer in manifest.layers)
        self._index.upsert(node, layers)

    def _lookup(self, names: Sequence[str], node: str) -> ImageLayers | None:
        ordered = sorted(names, key=lambda n: "@" not in n)  # digests identify content
        first = ordered[0]
        for text in ordered:
            ref = try_parse(text)
            if ref is not None:
                image = self._sources.cached(ref)
                if image is not None:
                    self._known[first] = image
                    self._known.move_to_end(first)
                    if len(self._known) > self._settings.max_known_images:
                        self._known.popitem(last=False)
                    return image
        self._queue_resolution(first, node)
        # A tag the sources no longer vouch for (its TTL ran out) keeps its last answer until
        # the refresh arrives: the layers of an image do not vanish from a node meanwhile.
        return self._known.get(first)

    def _queue_resolution(self, name: str, node: str | None) -> None:
        waiting = self._waiting.get(name)
        if waiting is None:
            if len(self._waiting) >= self._settings.max_pending_resolutions:
                return
            self._waiting[name] = waiting = set()
            self._resolve_queue.put_nowait(name)
        if node is not None:
            waiting.add(node)

    async def _resolve_loop(self) -> None:
        while True:
            name = await self._resolve_queue.get()
            try:
                image = await self._resolve(name)
                nodes = self._waiting.pop(name, set())
                if image is not None:
                    for node in nodes:
                        self._reindex(node)
            except Exception as exc:  # never let one image stop the loop
                log.warning("re-indexing after resolving %s failed: %s", name, exc)
            finally:
                self._resolve_queue.task_done()

    async def _resolve(self, name: str) -> ImageLayers | None:
        ref = try_parse(name)
        return await self._sources.resolve(ref) if ref is not None else None

    # -- bound pods: layers in flight -------------------------------------------------------

    def _apply_pods(self, kind: str, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        uid = metadata.get("uid") or f"{metadata.get('namespace')}/{metadata.get('name')}"
        node_name = (obj.get("spec") or {}).get("nodeName")
        if kind == "DELETED" or not node_name:
            self._pod_seen.discard(uid)
            return  # the layers stay on the node; the entry expires on its own
        if uid in self._pod_seen:
            return
        self._pod_seen.add(uid)
        if (obj.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return
        reported = self._reported.get(node_name, frozenset())
        expires = self._clock() + self._settings.inflight_seconds
        added = False
        for text in pod_images(obj):
            ref = try_parse(text)
            image = self._sources.cached(ref) if ref is not None else None
            if image is None and ref is not None:
                # Unknown yet: resolve it so the next pod of this image is answered from memory.
                self._queue_resolution(text, None)
            if image is None or image.digest in reported:
                continue
            entries = self._inflight.setdefault(node_name, {})
            if image.digest not in entries:
                entries[image.digest] = _InFlight(image, expires)
                added = True
        if added:
            self._reindex(node_name)

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(max(0.1, min(30.0, self._settings.inflight_seconds / 4)))
            self.expire_inflight()

    def expire_inflight(self) -> int:
        """Drop in-flight entries past their time; returns how many were dropped."""
        now = self._clock()
        dropped = 0
        for node, entries in list(self._inflight.items()):
            stale = [d for d, e in entries.items() if e.expires <= now]
            for digest in stale:
                del entries[digest]
            if stale:
                dropped += len(stale)
                self._reindex(node)
            if not entries:
                self._inflight.pop(node, None)
        return dropped


def _key(resource: str, item: Mapping[str, Any]) -> str | None:
    metadata = item.get("metadata") or {}
    if resource == "nodes":
        name = metadata.get("name")
        return name if isinstance(name, str) else None
    uid = metadata.get("uid")
    return uid if isinstance(uid, str) else None


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
