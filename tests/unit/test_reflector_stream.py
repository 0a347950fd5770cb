"""The reflector's watch side with a scripted client: a watch-list's initial state reported as
a list's (deletions and on_synced at the bookmark that ends it, no resume point before it), a
refused watch-list listed in pages, events decoded in the stream's thread and held at most
streams.ROOM ahead of the loop, and watch events applied in slices that let reviews go first
(webhook.inventory.pacing). The real API server's watch-list is in
tests/integration/test_reflector.py."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import orjson
import pytest

from webhook.inventory import pacing, streams
from webhook.inventory.reflector import (
    ADDED,
    DELETED,
    INITIAL_EVENTS_END,
    MODIFIED,
    Reflector,
)
from webhook.inventory.reflector_terms import ReflectorSettings


class Stream:
    """A streaming urllib3 response of newline-delimited events."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.body = b"".join(orjson.dumps(e) + b"\n" for e in events)

    def stream(self, size: int, decode_content: bool = True) -> Iterator[bytes]:
        for start in range(0, len(self.body), 1000):  # events split across reads
            yield self.body[start:start + 1000]

    def close(self) -> None:
        pass


class Page:
    def __init__(self, items: list[dict[str, Any]], version: str) -> None:
        self.data = orjson.dumps({"metadata": {"resourceVersion": version}, "items": items})

    def close(self) -> None:
        pass


def obj(name: str, version: int) -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": str(version)}}


def end_of_state(version: int) -> dict[str, Any]:
    return {"type": "BOOKMARK", "object": {"metadata": {
        "resourceVersion": str(version), "annotations": {INITIAL_EVENTS_END: "true"}}}}


class Server:
    """Answers watch-lists, watches and lists from scripts; records each call's arguments."""

    def __init__(self, refuse: BaseException | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.refuse = refuse
        self.streams: list[list[dict[str, Any]]] = []
        self.page: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        if kwargs.get("send_initial_events") and self.refuse is not None:
            raise self.refuse
        if not kwargs.get("watch"):
            return Page(self.page, "50")
        if self.streams:
            return Stream(self.streams.pop(0))
        raise ConnectionError("no more streams")


class Seen:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.synced: list[set[str]] = []
        self.threads: set[str] = set()

    def on_event(self, kind: str, key: str, obj: Mapping[str, Any] | None) -> None:
        self.events.append((kind, key))

    def on_synced(self, keys: Any) -> None:
        self.synced.append(set(keys))

    def decode(self, line: bytes) -> Mapping[str, Any]:
        self.threads.add(threading.current_thread().name)
        decoded: Mapping[str, Any] = orjson.loads(line)
        return decoded


def key(o: Mapping[str, Any]) -> str | None:
    return str(o["metadata"]["name"])


async def until(condition: Any) -> None:
    for _ in range(500):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")


async def run_until(reflector: Reflector, condition: Any) -> None:
    task = asyncio.create_task(reflector.run())
    try:
        await until(condition)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_watch_list_reports_its_state_as_a_list_then_its_changes() -> None:
    server, seen = Server(), Seen()
    reflector = Reflector("things", server, key, seen.on_event, seen.on_synced,
                          ReflectorSettings(watch_list=True), decode_event=seen.decode)
    reflector._keys = {"gone", "b"}  # held from before: b is in the state, gone is not
    server.streams.append([
        {"type": "ADDED", "object": obj("b", 7)}, {"type": "ADDED", "object": obj("a", 9)},
        end_of_state(12), {"type": "MODIFIED", "object": obj("a", 13)},
        {"type": "DELETED", "object": obj("b", 14)}])
    await run_until(reflector, lambda: len(seen.events) >= 5 and len(server.calls) > 1)
    assert seen.events == [(MODIFIED, "b"), (ADDED, "a"), (DELETED, "gone"), (MODIFIED, "a"),
                           (DELETED, "b")]
    assert seen.synced == [{"a", "b"}]
    first = server.calls[0]
    assert first["watch"] and first["send_initial_events"] and first["allow_watch_bookmarks"]
    assert first["resource_version_match"] == "NotOlderThan"
    assert "resource_version" not in first  # the state as of now
    # The next stream resumes after the last change, a plain watch.
    assert server.calls[1]["resource_version"] == "14"
    assert "send_initial_events" not in server.calls[1]
    assert seen.threads and threading.current_thread().name not in seen.threads


async def test_a_state_cut_short_is_streamed_again_from_scratch() -> None:
    server, seen = Server(), Seen()
    reflector = Reflector("things", server, key, seen.on_event, seen.on_synced,
                          ReflectorSettings(watch_list=True, backoff_initial=0.01))
    server.streams.append([{"type": "ADDED", "object": obj("a", 9)}])  # no end: cut
    server.streams.append([{"type": "ADDED", "object": obj("a", 9)}, end_of_state(12)])
    await run_until(reflector, lambda: seen.synced)
    assert [c.get("send_initial_events") for c in server.calls[:2]] == [True, True]
    assert seen.synced == [{"a"}]


@pytest.mark.parametrize("refusal", [TypeError("unexpected keyword 'send_initial_events'"),
                                     type("Invalid", (Exception,), {"status": 422})()])
async def test_a_refused_watch_list_lists_in_pages(refusal: BaseException) -> None:
    server, seen = Server(refuse=refusal), Seen()
    server.page = [obj("a", 3)]
    server.streams.append([{"type": "MODIFIED", "object": obj("a", 51)}])
    reflector = Reflector("things", server, key, seen.on_event, seen.on_synced,
                          ReflectorSettings(watch_list=True))
    await run_until(reflector, lambda: len(seen.events) >= 2)
    assert seen.events == [(ADDED, "a"), (MODIFIED, "a")]
    assert [c.get("watch", False) for c in server.calls[1:3]] == [False, True]
    assert server.calls[2]["resource_version"] == "50"


async def test_a_stream_is_read_at_most_room_events_ahead_of_the_loop() -> None:
    read = threading.Event()
    lines: list[int] = []

    class Endless(Stream):
        def stream(self, size: int, decode_content: bool = True) -> Iterator[bytes]:
            for i in range(10 * streams.ROOM):
                lines.append(i)
                if len(lines) > streams.ROOM + 1:
                    read.set()
                yield orjson.dumps({"type": "MODIFIED", "object": obj(f"o{i}", i)}) + b"\n"

    feed = streams.Feed(lambda: Endless([]), orjson.loads)
    reader = asyncio.ensure_future(asyncio.to_thread(feed.run))
    await asyncio.to_thread(read.wait, 0.5)  # the loop takes nothing meanwhile
    assert len(lines) <= streams.ROOM + 1  # the thread waits for room
    feed.stop()
    await asyncio.wait_for(reader, 5)


async def test_watch_events_give_way_to_a_review_in_flight() -> None:
    server, seen = Server(), Seen()
    applied: list[float] = []

    def slow(kind: str, name: str, o: Mapping[str, Any] | None) -> None:
        applied.append(time.monotonic())
        time.sleep(0.0004)  # each event longer than a slice

    server.streams.append([{"type": "ADDED", "object": obj(f"o{i}", i)} for i in range(20)])
    reflector = Reflector("things", server, key, slow, settings=ReflectorSettings())
    pace = pacing.pacer()
    pace.hold()  # a review's first bytes arrived
    held = time.monotonic()
    task = asyncio.create_task(reflector.run())
    try:
        await until(lambda: len(applied) >= 2)
        # The first event went through; the next waited out its bound behind the review.
        assert applied[1] - applied[0] >= pacing.MAX_WAIT_SECONDS
        pace.release()
        await until(lambda: len(applied) == 20)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert held < applied[0]
    assert seen.events == []
