"""Where `layer-locality report` reads its samples: one webhook's /metrics page, or a Prometheus
server through its HTTP query API (PromQL `increase` over a window, summed over replicas).

Both return the flat samples webhook.report.figures computes the figures from.
Connections go straight to the URL given (no environment proxy): operators reach
in-cluster endpoints through `kubectl port-forward`, and a proxy must never see the
webhook's metrics by accident.
"""

from __future__ import annotations

import math
import re
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import orjson
from prometheus_client.parser import text_string_to_metric_families

from webhook.report.series import SERIES, Sample

TIMEOUT_SECONDS = 30
SPAN_METRICS = ("layer_locality_bytes_avoided_total", "layer_locality_reviews_total")
_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_DURATION = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


class SourceError(Exception):
    """The metrics could not be read (unreachable, refused, not metrics, PromQL error)."""


class PromResult(TypedDict):
    metric: dict[str, str]
    value: tuple[float, str]


class PromData(TypedDict):
    resultType: str
    result: list[PromResult]


class PromAnswer(TypedDict, total=False):
    """GET /api/v1/query (Prometheus HTTP API v1)."""

    status: str
    data: PromData
    errorType: str
    error: str


def window_seconds(window: str) -> float:
    """A Prometheus duration (`1d`, `6h`, `1h30m`) in seconds; ValueError otherwise."""
    if not window or _DURATION.sub("", window):
        raise ValueError(f"not a Prometheus duration: {window!r} (e.g. 30m, 6h, 1d, 1w)")
    seconds = sum(int(n) * _UNITS[unit] for n, unit in _DURATION.findall(window))
    if seconds <= 0:
        raise ValueError(f"the window must be positive: {window!r}")
    return float(seconds)


@dataclass(frozen=True)
class TLS:
    """How to verify an https URL: the CA file (None: the system trust store) and the name the
    certificate must carry (None: the URL's host). Through `kubectl port-forward` the URL says
    127.0.0.1 while the certificate names the Service (layer-locality.layer-locality.svc)."""

    ca: str | None = None
    server_name: str | None = None

    def context(self) -> ssl.SSLContext:
        context = (_NamedContext(ssl.PROTOCOL_TLS_CLIENT, self.server_name) if self.server_name
                   else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT))
        if self.ca:
            try:
                context.load_verify_locations(cafile=self.ca)
            except OSError as exc:  # ssl.SSLError too: the file is not PEM certificates
                reason = exc.strerror if exc.strerror else "not a PEM CA certificate file"
                raise SourceError(f"--ca {self.ca}: {reason}") from exc
        else:
            context.load_default_certs()
        return context


class _NamedContext(ssl.SSLContext):
    """Verifies (and sends as SNI) a fixed server name whatever host the URL names."""

    def __new__(cls, protocol: int, server_name: str) -> _NamedContext:
        return super().__new__(cls, protocol)

    def __init__(self, protocol: int, server_name: str) -> None:
        self.server_name = server_name

    def wrap_socket(self, sock: Any, *args: Any, **kwargs: Any) -> ssl.SSLSocket:
        kwargs["server_hostname"] = self.server_name
        return super().wrap_socket(sock, *args, **kwargs)


def _get(url: str, tls: TLS, token: str | None = None) -> bytes:
    if not url.startswith(("http://", "https://")):
        raise SourceError(f"{url}: only http:// and https:// URLs are read")
    try:
        # No proxy handler from the environment.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                             urllib.request.HTTPSHandler(context=tls.context()))
        request = urllib.request.Request(url)
        if token is not None:  # the metrics port behind Kubernetes authorization
            if not url.startswith("https://"):
                raise SourceError(f"{_redact(url)}: a token is sent over https:// only")
            # Not forwarded to wherever a redirect points.
            request.add_unredirected_header("Authorization", f"Bearer {token}")
        with opener.open(request, timeout=TIMEOUT_SECONDS) as response:
            body: bytes = response.read()
            return body
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace")
        raise SourceError(f"{_redact(url)}: HTTP {exc.code}: {detail}") from exc
    except OSError as exc:  # ssl.SSLError and URLError included
        raise SourceError(f"{_redact(url)}: {exc}") from exc


def _redact(url: str) -> str:
    """The URL without its query (a PromQL expression is long and says nothing useful)."""
    return url.split("?", 1)[0]


def parse(text: str, prefixes: Sequence[str] = ()) -> list[Sample]:
    """The samples of a page in the Prometheus text format; with `prefixes`, only those on the
    lines that start with one of them, picked before parsing (a kube-apiserver page runs to
    megabytes; its # HELP and # TYPE lines go too, which changes no sample's name or value).
    ValueError: not the text format."""
    if prefixes:
        wanted = tuple(prefixes)
        text = "\n".join(line for line in text.splitlines() if line.startswith(wanted)) + "\n"
    return [(s.name, s.labels, s.value)
            for family in text_string_to_metric_families(text) for s in family.samples]


def scrape(url: str, tls: TLS, token: str | None = None) -> list[Sample]:
    """Every sample of a /metrics page (Prometheus text format); `token`: a bearer token
    (a ServiceAccount's allowed to get /metrics, for the shipped metrics port)."""
    text = _get(url, tls, token).decode("utf-8", errors="replace")
    try:
        return parse(text)
    except ValueError as exc:
        raise SourceError(f"{url}: not Prometheus text format: {exc}") from exc


Query = Callable[[str], list[PromResult]]


def prometheus_query(base: str, tls: TLS, now: float | None = None) -> Query:
    """A PromQL instant query against `base` (/api/v1/query), all at one evaluation time."""
    at = time.time() if now is None else now
    endpoint = base.rstrip("/") + "/api/v1/query"

    def query(expression: str) -> list[PromResult]:
        params = urllib.parse.urlencode({"query": expression, "time": f"{at:.3f}"})
        try:
            answer: PromAnswer = orjson.loads(_get(f"{endpoint}?{params}", tls))
        except orjson.JSONDecodeError as exc:
            raise SourceError(f"{endpoint}: not a Prometheus API answer") from exc
        if answer.get("status") != "success" or "data" not in answer:
            raise SourceError(f"{endpoint}: {expression}: {answer.get('error', answer)}")
        if answer["data"]["resultType"] != "vector":
            raise SourceError(f"{endpoint}: {expression}: expected a vector")
        return answer["data"]["result"]

    return query


def window_queries(window: str) -> dict[str, str]:
    """Sample name -> PromQL: each series the report reads, as its increase over the window
    aggregated by the report's labels across replicas (sum, or max for what every replica
    observes of the whole cluster; counter resets handled by increase)."""
    queries: dict[str, str] = {}
    for series in SERIES:
        if series.gauge:  # its highest value over the window, the highest replica's
            by = f" by ({', '.join(series.by)})" if series.by else ""
            queries[series.metric] = (f"max{by} (max_over_time({series.metric}[{window}]))")
            continue
        parts = (("bucket", (*series.by, "le")), ("sum", series.by), ("count", series.by)) \
            if series.histogram else (("total", series.by),)
        for suffix, labels in parts:
            name = f"{series.metric}_{suffix}"
            by = f" by ({', '.join(labels)})" if labels else ""
            aggregate = "max" if series.cluster_wide else "sum"
            queries[name] = f"{aggregate}{by} (increase({name}[{window}]))"
    return queries


def span_queries(window: str) -> list[str]:
    """Seconds of the window the webhook has samples for: a webhook installed an hour ago has
    one hour of data in a 1d window, and `per day` must not divide by 24h. One query per metric
    (timestamp() drops the names, and two metrics could then clash): the bytes-avoided counter
    has no labels, so it exists from the start; reviews_total from the first review."""
    return [f"time() - min(min_over_time(timestamp({metric})[{window}:]))"
            for metric in SPAN_METRICS]


def from_prometheus(query: Query, window: str) -> tuple[list[Sample], float | None]:
    """The samples (totals over the window) and the seconds they cover."""
    length = window_seconds(window)
    samples: list[Sample] = []
    for name, expression in window_queries(window).items():
        for result in query(expression):
            value = float(result["value"][1])
            if not math.isnan(value):
                samples.append((name, result["metric"], value))
    spans = [float(r["value"][1]) for expression in span_queries(window)
             for r in query(expression)]
    spans = [min(max(span, 0.0), length) for span in spans if not math.isnan(span)]
    return samples, max(spans) if spans else None
