"""A list's pages are fetched back to back in a worker thread (streams.Pager): the next page
is asked for as soon as the current one has arrived, before it is decoded and reported, and
never more than one page ahead; a failing page fails the list where it happens."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from webhook.inventory.reflector import ADDED, DELETED, Reflector
from webhook.inventory.reflector_terms import ReflectorSettings
from webhook.inventory.streams import page_head


class Response:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def close(self) -> None:
        pass


class Pages:
    """A list call over `count` pages of two objects; `fail_at`: that page raises."""

    def __init__(self, count: int, fail_at: int | None = None) -> None:
        self.count = count
        self.fail_at = fail_at
        self.asked: list[int] = []
        self.second_asked = threading.Event()

    def __call__(self, **kwargs: Any) -> Response:
        k = int(kwargs.get("_continue") or 0)
        self.asked.append(k)
        if k == 1:
            self.second_asked.set()
        if k == self.fail_at:
            raise OSError(f"page {k} failed")
        metadata: dict[str, Any] = {"resourceVersion": str(100 + k)}
        if k + 1 < self.count:
            metadata["continue"] = str(k + 1)
        items = [{"metadata": {"name": f"o{k}-{i}"}} for i in range(2)]
        return Response(orjson.dumps({"metadata": metadata, "items": items}))


def key(obj: Mapping[str, Any]) -> str | None:
    return str(obj["metadata"]["name"])


async def test_the_next_page_travels_while_the_current_one_is_reported() -> None:
    pages = Pages(4)
    during_first: list[tuple[bool, list[int]]] = []
    events: list[tuple[str, str]] = []

    def on_event(kind: str, name: str, obj: Mapping[str, Any] | None) -> None:
        if name == "o0-0":  # blocks the loop: only the pager thread can ask meanwhile
            asked = pages.second_asked.wait(5)
            time.sleep(0.1)  # room for a (wrong) third request to show up
            during_first.append((asked, list(pages.asked)))
        events.append((kind, name))

    reflector = Reflector("things", pages, key, on_event, settings=ReflectorSettings(page_size=2))
    version = await reflector._list()
    assert during_first == [(True, [0, 1])], "page 1 asked for, page 2 not yet"
    assert pages.asked == [0, 1, 2, 3]
    assert events == [(ADDED, f"o{k}-{i}") for k in range(4) for i in range(2)]
    assert version == "103"


async def test_a_failing_page_fails_the_list_after_the_pages_before_it() -> None:
    events: list[str] = []
    reflector = Reflector("things", Pages(4, fail_at=2), key,
                          lambda kind, name, obj: events.append(name))
    with pytest.raises(OSError, match="page 2 failed"):
        await reflector._list()
    assert events == ["o0-0", "o0-1", "o1-0", "o1-1"]


async def test_a_relist_reports_what_it_no_longer_holds() -> None:
    pages = Pages(2)
    events: list[tuple[str, str]] = []
    reflector = Reflector("things", pages, key, lambda k, n, o: events.append((k, n)))
    await reflector._list()
    pages.count = 1
    events.clear()
    await reflector._list()
    assert sorted(events) == [(DELETED, "o1-0"), (DELETED, "o1-1"), ("MODIFIED", "o0-0"),
                              ("MODIFIED", "o0-1")]


def continue_token(page: Mapping[str, Any]) -> str | None:
    return page_head(page)[0]


def test_the_continue_token_is_read_from_the_decoded_page() -> None:
    assert continue_token({"metadata": {"continue": "abc"}, "items": [{"x": [1, 2]}]}) == "abc"
    assert continue_token({"metadata": {"resourceVersion": "3"}, "items": []}) is None
    assert continue_token({"items": [], "metadata": {"continue": ""}}) is None
    assert continue_token({"items": []}) is None
    assert continue_token({"metadata": [1]}) is None


def test_later_pages_grow_to_the_remaining_count_within_the_byte_bound() -> None:
    from webhook.inventory.streams import MAX_PAGE_BYTES, REST_PAGES, next_limit

    assert page_head({"metadata": {"continue": "c", "remainingItemCount": 49500}, "items": []}) \
        == ("c", 49500)
    assert page_head({"metadata": {"continue": "c", "remainingItemCount": -1}}) == ("c", None)
    # 49,500 left after a first page of 500 small objects: the rest in REST_PAGES pages.
    assert next_limit(500, 49_500, 500 * 300, 500) == -(-49_500 // REST_PAGES)
    # Big objects: bounded by bytes (3 KB a pod: MAX_PAGE_BYTES of them).
    assert next_limit(500, 49_500, 500 * 3_000, 500) == MAX_PAGE_BYTES // 3_000
    # Never below the first page's limit; unknown remaining (a selector): the first's.
    assert next_limit(500, 100, 500 * 300, 500) == 500
    assert next_limit(50, 4_950, 50 * 200_000, 50) == 50
    assert next_limit(500, None, 1_000, 500) == 500


async def test_the_pager_asks_the_later_pages_for_the_grown_limit() -> None:
    asked: list[tuple[int, int | None]] = []
    total = 40

    def call(**kwargs: Any) -> Response:
        start = int(kwargs.get("_continue") or 0)
        limit = int(kwargs["limit"])
        asked.append((start, limit))
        end = min(total, start + limit)
        metadata: dict[str, Any] = {"resourceVersion": "7"}
        if end < total:
            metadata.update({"continue": str(end), "remainingItemCount": total - end})
        items = [{"metadata": {"name": f"o{i}"}} for i in range(start, end)]
        return Response(orjson.dumps({"metadata": metadata, "items": items}))

    names: list[str] = []
    reflector = Reflector("things", call, key, lambda kind, name, obj: names.append(name),
                          settings=ReflectorSettings(page_size=4))
    await reflector._list()
    assert names == [f"o{i}" for i in range(total)]
    # 36 left after the first page: pages of 5 from then on (REST_PAGES = 8, and one more).
    assert asked == [(0, 4), *((start, 5) for start in range(4, 40, 5))]
