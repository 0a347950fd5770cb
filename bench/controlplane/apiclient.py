"""The control-plane benchmark's client side: requests to the local cluster's kube-apiserver as
cluster-admin (aiohttp, the admin client certificate), bulk creation with bounded concurrency,
a pod watch that times each pod's arrival and bind, and /metrics deltas."""

from __future__ import annotations

import asyncio
import fnmatch
import math
import ssl
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from webhook.report.histogram import Histogram
from webhook.report.promread import parse

SampleKey = tuple[str, tuple[tuple[str, str], ...]]



class ApiError(Exception):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the HTTP status; None: no answer


class Api:
    """kube-apiserver (or a component's /metrics) over TLS with the admin certificate."""

    def __init__(self, server: str, context: ssl.SSLContext, limit: int = 64) -> None:
        self.server = server
        self.context = context
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context, limit=limit),
            timeout=aiohttp.ClientTimeout(total=600),
            json_serialize=lambda o: orjson.dumps(o).decode())

    async def close(self) -> None:
        await self._session.close()

    async def request(self, method: str, path: str, body: Any = None, *,
                      ok: Sequence[int] = (200, 201, 202), content_type: str =
                      "application/json", server: str | None = None,
                      headers: Mapping[str, str] | None = None) -> Any:
        data = orjson.dumps(body) if body is not None else None
        async with self._session.request(
                method, (server or self.server) + path, data=data,
                headers={"Content-Type": content_type, **(headers or {})}) as response:
            raw = await response.read()
            if response.status not in ok:
                raise ApiError(f"{method} {path}: HTTP {response.status}: {raw[:300]!r}",
                               response.status)
            if not raw or response.content_type != "application/json":
                return raw
            return orjson.loads(raw)

    async def create_all(self, bodies: Iterable[tuple[str, Any]], concurrency: int = 32) -> int:
        """POST each (path, body), at most `concurrency` at once; returns how many."""
        queue = iter(bodies)
        done = 0

        async def worker() -> None:
            nonlocal done
            for path, body in queue:
                await self.request("POST", path, body)
                done += 1

        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done

    async def metrics(self, url: str, prefixes: Sequence[str]) -> dict[SampleKey, float]:
        """The samples of `url`'s /metrics whose names start with one of `prefixes`."""
        raw: bytes = await self.request("GET", "", server=url, content_type="text/plain")
        return {(name, tuple(sorted(labels.items()))): value
                for name, labels, value in parse(raw.decode(), prefixes)}


def delta(after: Mapping[SampleKey, float], before: Mapping[SampleKey, float]
          ) -> dict[SampleKey, float]:
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def total(samples: Mapping[SampleKey, float], name: str, /, **match: str) -> float:
    return sum(v for (n, labels), v in samples.items()
               if n == name and _matches(labels, match))


def by_label(samples: Mapping[SampleKey, float], name: str, label: str, /,
             **match: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for (n, labels), v in samples.items():
        if n == name and _matches(labels, match):
            key = dict(labels).get(label, "")
            out[key] = out.get(key, 0.0) + v
    return out


def _matches(labels: tuple[tuple[str, str], ...], match: Mapping[str, str]) -> bool:
    d = dict(labels)
    return all(fnmatch.fnmatchcase(d.get(k, ""), v) if "*" in v else d.get(k) == v
               for k, v in match.items())


@dataclass(frozen=True)
class Hist(Histogram):
    """A histogram's delta summed over the series that match (quantiles as the report
    computes them, from webhook.report.figures)."""

    def share_within(self, bound: float) -> float | None:
        """Share of observations in buckets up to `bound` (a bucket's upper bound)."""
        below = max((c for b, c in self.buckets if b <= bound + 1e-12), default=0.0)
        return below / self.count if self.count else None

    def as_dict(self, scale: float = 1000.0) -> dict[str, Any]:
        def s(v: float | None) -> float | None:
            return None if v is None or math.isinf(v) else v * scale
        return {"count": self.count, "mean": s(self.sum / self.count) if self.count else None,
                "p50": s(self.quantile(0.5)), "p90": s(self.quantile(0.9)),
                "p99": s(self.quantile(0.99))}


def hist(samples: Mapping[SampleKey, float], metric: str, /, **match: str) -> Hist:
    buckets: dict[float, float] = {}
    total_sum = count = 0.0
    for (n, labels), v in samples.items():
        if not _matches(labels, match):
            continue
        if n == metric + "_bucket":
            bound = float(dict(labels)["le"])
            buckets[bound] = buckets.get(bound, 0.0) + v
        elif n == metric + "_sum":
            total_sum += v
        elif n == metric + "_count":
            count += v
    return Hist(tuple(sorted(buckets.items())), total_sum, count)


@dataclass
class PodTimes:
    """When this process saw each pod of a namespace arrive and get a node (monotonic)."""

    added: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    node: dict[str, str] = field(default_factory=dict)
    events: int = 0
    bytes: int = 0


async def watch_pods(api: Api, namespace: str, times: PodTimes, started: asyncio.Event) -> None:
    """Records every pod's first sight and bind until cancelled (one watch, resumed if the
    API server closes it)."""
    listing = await api.request("GET", f"/api/v1/namespaces/{namespace}/pods?limit=1")
    version = listing["metadata"]["resourceVersion"]
    started.set()
    while True:
        path = (f"/api/v1/namespaces/{namespace}/pods?watch=true&resourceVersion={version}"
                "&allowWatchBookmarks=true&timeoutSeconds=3600")
        async with api._session.get(api.server + path) as response:
            if response.status != 200:
                raise ApiError(f"watch {namespace}: HTTP {response.status}")
            async for line in response.content:
                now = time.monotonic()
                times.events += 1
                times.bytes += len(line)
                event = orjson.loads(line)
                obj = event.get("object") or {}
                meta = obj.get("metadata") or {}
                version = meta.get("resourceVersion", version)
                if event.get("type") not in ("ADDED", "MODIFIED"):
                    continue
                name = meta.get("name", "")
                times.added.setdefault(name, now)
                node = (obj.get("spec") or {}).get("nodeName")
                if node and name not in times.bound:
                    times.bound[name] = now
                    times.node[name] = node
