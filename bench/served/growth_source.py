"""The growth benchmark's source measured alone (issue 49: "measure the source alone first and
show it"): a minimal client with no `kubernetes` package lists the stand-in API server's
Nodes, pods and NodeLayers in pages as the webhook does (the same first limits, the rest sized
by webhook.inventory.streams.next_limit from the first page; the three lists at once, one
thread each, as the webhook's reflectors run), reading only each page's `metadata` and item
count. What it times: the wall until all three lists are read and the stand-in process's CPU
meanwhile. The stand-in is one process with one event loop, so its CPU is the source's cost
whoever asks; the webhook's share of a served sync is the rest of the ready time.
"""

from __future__ import annotations

import http.client
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import msgspec

from bench import report
from tests.kit.apiserver import TOKEN
from webhook.inventory.live import WatchSettings
from webhook.inventory.nodelayers_watch import NODELAYERS_PAGE
from webhook.inventory.reflector_terms import ReflectorSettings
from webhook.inventory.streams import next_limit

NODELAYERS_PATH = "/apis/layer-locality.io/v1alpha1/nodelayers"


class _Meta(msgspec.Struct):
    # `continue` is a Python keyword: renamed on decode
    token: str | None = msgspec.field(default=None, name="continue")
    remainingItemCount: int | None = None


class _Page(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    items: list[msgspec.Raw] = msgspec.field(default_factory=list)  # counted, not parsed


_decode = msgspec.json.Decoder(_Page).decode


def first_limits(nodelayers: bool) -> dict[str, tuple[str, int]]:
    """Each list's path and first page limit, as the webhook asks (webhook.inventory)."""
    settings = ReflectorSettings()
    lists = {"nodes": ("/api/v1/nodes", min(settings.page_size, WatchSettings().node_page_size)),
             "pods": ("/api/v1/pods", settings.page_size)}
    if nodelayers:
        lists["nodelayers"] = (NODELAYERS_PATH, min(settings.page_size, NODELAYERS_PAGE))
    return lists


@dataclass
class Listed:
    """One list read through: items, pages, bytes and the wall it took."""

    items: int = 0
    pages: int = 0
    bytes: int = 0
    seconds: float = 0.0
    error: str = ""
    limits: list[int] = field(default_factory=list)


def list_all(port: int, path: str, first_limit: int) -> Listed:
    """One list, page after page, on one keep-alive connection."""
    out = Listed()
    started = time.perf_counter()
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    headers = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json"}
    token: str | None = None
    limit = first_limit
    try:
        while True:
            query = f"?limit={limit}" + (f"&continue={token}" if token else "")
            connection.request("GET", path + query, headers=headers)
            response = connection.getresponse()
            data = response.read()
            if response.status != 200:
                out.error = f"HTTP {response.status}"
                break
            page = _decode(data)
            out.items += len(page.items)
            out.pages += 1
            out.bytes += len(data)
            out.limits.append(limit)
            if out.pages == 1:  # the rest sized from the first page, as the webhook's Pager
                limit = next_limit(first_limit, page.metadata.remainingItemCount, len(data),
                                   len(page.items))
            token = page.metadata.token
            if not token:
                break
    finally:
        connection.close()
        out.seconds = time.perf_counter() - started
    return out


def measure_source(port: int, pid: int, nodelayers: bool) -> dict[str, Any]:
    """Every list at once (a thread each); the wall until the last ends, the stand-in's CPU
    (process `pid`) over it, and this client's own CPU (small: it parses no item)."""
    lists = first_limits(nodelayers)
    results: dict[str, Listed] = {}

    def one(name: str, path: str, limit: int) -> None:
        results[name] = list_all(port, path, limit)

    threads = [threading.Thread(target=one, args=(name, path, limit), daemon=True)
               for name, (path, limit) in lists.items()]
    cpu0, own0, t0 = report.cpu_seconds(pid), time.process_time(), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - t0
    cpu, own = report.cpu_seconds(pid) - cpu0, time.process_time() - own0
    errors = {name: r.error for name, r in results.items() if r.error}
    if errors:
        raise RuntimeError(f"the source alone: {errors}")
    return {
        "wall_seconds": wall, "api_cpu_seconds": cpu, "client_cpu_seconds": own,
        "lists": {name: {"items": r.items, "pages": r.pages, "mb": r.bytes / 2**20,
                         "seconds": r.seconds, "first_limit": r.limits[0],
                         "next_limit": r.limits[1] if len(r.limits) > 1 else None}
                  for name, r in results.items()},
    }
