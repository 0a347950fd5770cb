"""The reflector's side of the wire, in worker threads: a list's pages fetched ahead, a watch
stream read line by line, each page or event decoded there, never on the event loop.

Decoding holds the GIL (orjson and msgspec build Python objects as they go: neither releases
it), so a decode in a thread costs the process the same CPU; what it changes is where it
happens: while the loop answers a review, not in the loop's turn. Each hand-over to the loop is
bounded: a page at most one ahead of the one applied, a stream at most ROOM events ahead (the
thread then waits, and the stream waits in the socket), so a big list or a watch-list's initial
events are held a little at a time, never whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

Decode = Callable[[bytes], Mapping[str, Any]]
MAX_LINE = 16 << 20  # one watch event; Node and Pod objects are far smaller
ROOM = 256  # decoded events a stream may hold that the loop has not applied yet


class Refused(Exception):
    """The client refused a stream's arguments before sending anything (the kubernetes
    package validates them: a method that lacks one raises)."""


def page_head(page: Mapping[str, Any]) -> tuple[str | None, int | None]:
    """A decoded list page's `continue` token and `remainingItemCount` (None where absent):
    (None, None) on the last page."""
    metadata = page.get("metadata")
    if not isinstance(metadata, Mapping):
        return None, None
    token, remaining = metadata.get("continue"), metadata.get("remainingItemCount")
    return (str(token) if token else None,
            remaining if type(remaining) is int and remaining >= 0 else None)


# Pages after the first: kube-apiserver (v1.37) collects every object from a page's continue
# key to the end before it keeps `limit` (store.OrderedListPrefix), so n objects in pages of
# p cost it n^2/2p collected, and each page its own request. Once the first page says how
# many remain, the rest come in about REST_PAGES pages, each at most MAX_PAGE_BYTES by the
# first page's bytes per object, never fewer objects than the first page's (the first page
# stays small: its objects' size is not known before it).
REST_PAGES = 8
MAX_PAGE_BYTES = 4 << 20


def next_limit(first_limit: int, remaining: int | None, page_bytes: int, page_items: int) -> int:
    """The limit to ask the next page for."""
    if remaining is None or page_items <= 0:
        return first_limit
    by_count = -(-remaining // REST_PAGES)
    by_bytes = MAX_PAGE_BYTES * page_items // max(1, page_bytes)
    return max(first_limit, min(by_count, by_bytes))


class Pager:
    """Fetches and decodes a list's pages in a worker thread (the next page's `continue`
    token and limit read from the decoded page), at most one page ahead of the one being
    applied: the API server produces the next page while this process applies the current
    one (on 2 cores the two overlap instead of taking turns). A failure arrives in place of
    the page."""

    AHEAD = 2  # pages fetched and not yet applied: the current one and the next

    def __init__(self, fetch: Callable[[str | None, int | None], bytes], decode: Decode,
                 first_limit: int) -> None:
        """`fetch(token, limit)`: one page's bytes (limit None: `first_limit`)."""
        self._fetch = fetch
        self._decode = decode
        self._first_limit = first_limit
        self._loop = asyncio.get_running_loop()
        self._pages: asyncio.Queue[tuple[Mapping[str, Any], bool] | BaseException] = (
            asyncio.Queue())
        self._room = threading.Semaphore(self.AHEAD)
        self._stopped = threading.Event()

    def run(self) -> None:
        """The worker thread: every page decoded and whether more follow (or the failure)."""
        token: str | None = None
        limit: int | None = None
        try:
            while True:
                self._room.acquire()
                if self._stopped.is_set():
                    return
                data = self._fetch(token, limit)
                if self._stopped.is_set():
                    return
                page = self._decode(data)
                token, remaining = page_head(page)
                if limit is None:  # set by the first page, kept for the rest
                    items = page.get("items")
                    limit = next_limit(self._first_limit, remaining, len(data),
                                       len(items) if isinstance(items, list) else 0)
                del data
                self._put((page, token is not None))
                if token is None:
                    return
        except BaseException as exc:  # handed to the list, which raises it
            self._put(exc)

    def _put(self, item: tuple[Mapping[str, Any], bool] | BaseException) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._pages.put_nowait, item)

    async def next_page(self) -> tuple[Mapping[str, Any], bool]:
        item = await self._pages.get()
        if isinstance(item, BaseException):
            raise item
        return item

    def consumed(self) -> None:
        self._room.release()

    def stop(self) -> None:
        self._stopped.set()
        self._room.release()  # a thread waiting for room wakes up and ends


class Feed:
    """One watch stream read and decoded in a worker thread (`run`); the loop takes each
    event with the monotonic time its line was read (`get`; None: the stream ended) and says
    when it is applied (`consumed`), which makes room for the next."""

    def __init__(self, open_stream: Callable[[], Any], decode: Decode,
                 opened: Callable[[], None] | None = None) -> None:
        """`opened`: called on the loop once the server answered the watch (its headers)."""
        self._open = open_stream
        self._decode = decode
        self._on_open = opened
        self._loop = asyncio.get_running_loop()
        # The thread never blocks on a full queue (a loop that stopped reading would hang
        # it): it waits for room instead, which stop() gives.
        self._events: asyncio.Queue[tuple[float, Mapping[str, Any]] | None] = asyncio.Queue()
        self._room = threading.Semaphore(ROOM)
        self._stopped = threading.Event()
        self._opened: list[Any] = []

    def run(self) -> None:
        try:
            try:
                resp = self._open()
            except (TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
                raise Refused(f"{type(exc).__name__}: {exc}") from exc
            self._opened.append(resp)
            if self._stopped.is_set():  # cancelled while connecting
                close(resp)
                return
            if self._on_open is not None and not self._loop.is_closed():
                self._loop.call_soon_threadsafe(self._on_open)
            try:
                for line in lines(resp):
                    received = time.monotonic()
                    event = self._decode(line)
                    self._room.acquire()
                    if self._stopped.is_set():
                        break
                    self._put((received, event))
            except Exception:
                # A stream we closed ourselves (stop, shutdown) breaks mid-read: expected,
                # and nobody may be left to retrieve the error.
                if not self._stopped.is_set():
                    raise
            finally:
                close(resp)
        finally:
            self._put(None)

    def _put(self, item: tuple[float, Mapping[str, Any]] | None) -> None:
        if not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._events.put_nowait, item)

    async def get(self) -> tuple[float, Mapping[str, Any]] | None:
        return await self._events.get()

    def consumed(self) -> None:
        self._room.release()

    def stop(self) -> None:
        self._stopped.set()
        self._room.release(ROOM)  # a thread waiting for room wakes up and ends
        for resp in self._opened:
            close(resp)  # unblocks the thread if it is still reading (or on cancel)


def read_all(call: Callable[..., Any], kwargs: Mapping[str, Any]) -> bytes:
    resp = call(**kwargs)
    try:
        data: bytes = resp.data
        return data
    finally:
        close(resp)


def lines(resp: Any) -> Iterator[bytes]:
    """Newline-delimited JSON events from a streaming urllib3 response."""
    buffer = b""
    for chunk in resp.stream(65536, decode_content=True):
        buffer += chunk
        if len(buffer) > MAX_LINE and b"\n" not in buffer:
            raise ValueError("watch event larger than the line cap")
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            if line.strip():
                yield line
    if buffer.strip():
        yield buffer


def close(resp: Any) -> None:
    """Close a response, unblocking a thread that is reading it (urllib3 >= 2.3 shutdown)."""
    for step in ("shutdown", "close", "release_conn"):
        with contextlib.suppress(Exception):  # closing a broken connection may itself fail
            getattr(resp, step, lambda: None)()
