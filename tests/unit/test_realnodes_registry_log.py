"""Reading the registry's own log (webhook/devcluster/realnodes/registry.py): which node fetched
which blob, and how many bytes the registry wrote for it. The lines are built the way CNCF
distribution 2.8 writes them (logrus's text formatter: a value is quoted when it holds anything
but letters, digits and `-._/@^+`), beside the Apache-format access lines the same log carries."""

from __future__ import annotations

import hashlib
import json
import re

from hypothesis import given
from hypothesis import strategies as st

from webhook.devcluster.realnodes.registry import (
    BlobFetch,
    blob_fetches,
    bytes_by_node,
    digests_by_node,
)

_BARE = re.compile(r"[A-Za-z0-9\-._/@^+]+")


def _value(text: str) -> str:
    return text if _BARE.fullmatch(text) else json.dumps(text)


def logrus_line(method: str, uri: str, host: str, status: int, written: int, *,
                msg: str = "response completed", level: str = "info") -> str:
    """One line of distribution's logrus text log for a request it answered."""
    fields = [
        ("time", "2026-11-26T06:50:09.383264243Z"), ("level", level), ("msg", msg),
        ("go.version", "go1.19.8"), ("http.request.host", host),
        ("http.request.id", "d429864d-31b4-4245-8826-205f05ab72bf"),
        ("http.request.method", method), ("http.request.remoteaddr", "198.18.0.1:49446"),
        ("http.request.uri", uri), ("http.request.useragent", "containerd/v2.4.2"),
        ("http.response.contenttype", "application/octet-stream"),
        ("http.response.duration", "2.369734ms"), ("http.response.status", str(status)),
        ("http.response.written", str(written)),
    ]
    return " ".join(f"{key}={_value(value)}" for key, value in fields)


def access_line(method: str, uri: str, status: int, written: int) -> str:
    """The Apache combined-format line distribution's access log writes for the same request."""
    return (f'198.18.0.1 - - [26/Nov/2026:06:50:09 +0000] "{method} {uri} HTTP/1.1" '
            f'{status} {written} "" "containerd/v2.4.2"')


def digest(seed: str) -> str:
    return "sha256:" + hashlib.sha256(seed.encode()).hexdigest()


def blob_uri(repository: str, blob: str, query: str = "?ns=198.18.0.1%3A5000") -> str:
    return f"/v2/{repository}/blobs/{blob}{query}"


def test_a_real_shaped_line_gives_host_repository_digest_status_and_bytes() -> None:
    blob = digest("pause layer")
    line = logrus_line("GET", blob_uri("ll/pause", blob), "198.18.0.11:5000", 200, 640236)
    assert blob_fetches(line) == [BlobFetch("198.18.0.11", "ll/pause", blob, 200, 640236)]


def test_the_line_the_log_actually_carries_is_parsed() -> None:
    line = ('time="2026-11-26T06:50:09.383264243Z" level=info msg="response completed" '
            'go.version=go1.19.8 http.request.host="198.18.0.11:5000" '
            'http.request.id=d429864d-31b4-4245-8826-205f05ab72bf http.request.method=GET '
            'http.request.remoteaddr="198.18.0.1:49446" http.request.uri="/v2/ll/pause/blobs/'
            'sha256:9255c331c105432c1dcaee44f6ec7e2ef7b35c79ff5b427921a4012bc8c88266'
            '?ns=198.18.0.1%3A5000" http.request.useragent=containerd/v2.4.2 '
            'http.response.contenttype=application/octet-stream '
            'http.response.duration=2.369734ms http.response.status=200 '
            'http.response.written=640236')
    [fetch] = blob_fetches(line)
    assert (fetch.host, fetch.repository, fetch.status, fetch.bytes) == (
        "198.18.0.11", "ll/pause", 200, 640236)
    assert fetch.digest.endswith("c88266") and len(fetch.digest) == len("sha256:") + 64


def test_everything_but_blob_gets_is_left_out() -> None:
    blob, host = digest("layer"), "198.18.0.12:5000"
    upload = "/v2/ll/app/blobs/uploads/6f1d6a4e-8f0a-4c39-9a0e-1c1b0f1e2d3c"
    noise = [
        logrus_line("HEAD", blob_uri("ll/app", blob), host, 200, 0),
        logrus_line("GET", "/v2/ll/app/manifests/3.10", host, 200, 527),
        logrus_line("GET", f"/v2/ll/app/manifests/{digest('manifest')}", host, 200, 527),
        logrus_line("POST", "/v2/ll/app/blobs/uploads/", host, 202, 0),
        logrus_line("PATCH", upload, host, 202, 0),
        logrus_line("PUT", f"{upload}?digest={blob.replace(':', '%3A')}", host, 201, 0),
        logrus_line("GET", upload, host, 204, 0),
        logrus_line("GET", "/v2/", host, 200, 2),
        logrus_line("GET", blob_uri("ll/app", blob), host, 200, 4096, msg="request started"),
        access_line("GET", blob_uri("ll/app", blob), 200, 4096),
        access_line("HEAD", blob_uri("ll/app", blob), 200, 0),
        "",
    ]
    assert blob_fetches("\n".join(noise)) == []


def test_only_the_logrus_line_counts_when_both_formats_log_one_fetch() -> None:
    blob = digest("layer")
    log = "\n".join([
        access_line("GET", blob_uri("ll/app", blob), 200, 4096),
        logrus_line("GET", blob_uri("ll/app", blob), "198.18.0.13:5000", 200, 4096),
        access_line("GET", blob_uri("ll/app", blob), 200, 4096),
    ])
    assert blob_fetches(log) == [BlobFetch("198.18.0.13", "ll/app", blob, 200, 4096)]


def test_a_missing_blob_is_not_a_successful_fetch() -> None:
    blob = digest("gone")
    log = "\n".join([
        # distribution logs an answered error this way (level=error, its own msg)
        logrus_line("GET", blob_uri("ll/app", blob), "198.18.0.11:5000", 404, 157,
                    msg="response completed with error", level="error"),
        access_line("GET", blob_uri("ll/app", blob), 404, 157),
    ])
    assert [f for f in blob_fetches(log) if f.status in (200, 206)] == []
    assert digests_by_node(blob_fetches(log), {"node-1": "198.18.0.11"}) == {}


def test_a_nested_repository_keeps_every_component() -> None:
    blob = digest("nested")
    line = logrus_line("GET", blob_uri("a/b/c", blob, query=""), "198.18.0.11:5000", 206, 10)
    assert blob_fetches(line) == [BlobFetch("198.18.0.11", "a/b/c", blob, 206, 10)]


_COMPONENT = st.from_regex(r"[a-z0-9]+([._-][a-z0-9]+)?", fullmatch=True)


@given(repository=st.lists(_COMPONENT, min_size=1, max_size=4).map("/".join),
       seed=st.text(max_size=8), node=st.integers(min_value=11, max_value=210),
       status=st.sampled_from([200, 206, 307, 404, 416, 500]),
       written=st.integers(min_value=0, max_value=2**40))
def test_any_blob_get_is_read_back(repository: str, seed: str, node: int, status: int,
                                   written: int) -> None:
    blob, ip = digest(seed), f"198.18.0.{node}"
    line = logrus_line("GET", blob_uri(repository, blob), f"{ip}:5000", status, written)
    assert blob_fetches(line) == [BlobFetch(ip, repository, blob, status, written)]


NODES = {"node-1": "198.18.0.11", "node-2": "198.18.0.12", "node-3": "198.18.0.13"}


def fetch(ip: str, seed: str, status: int = 200, size: int = 100) -> BlobFetch:
    return BlobFetch(ip, "ll/app", digest(seed), status, size)


def test_only_successful_fetches_count_per_node() -> None:
    fetches = [
        fetch("198.18.0.11", "a", 200, 1000), fetch("198.18.0.11", "b", 206, 30),
        fetch("198.18.0.11", "c", 404, 157), fetch("198.18.0.11", "d", 500, 0),
        fetch("198.18.0.11", "e", 307, 0), fetch("198.18.0.12", "a", 200, 1000),
        fetch("198.18.0.12", "a", 200, 1000),  # fetched twice: one digest, bytes twice
        fetch("198.18.0.1", "f", 200, 7),  # the control plane's own address: no node
        fetch("198.18.0.99", "g", 200, 9),  # not a node of this cluster
    ]
    assert digests_by_node(fetches, NODES) == {
        "node-1": {digest("a"), digest("b")}, "node-2": {digest("a")}}
    assert bytes_by_node(fetches, NODES) == {"node-1": 1030, "node-2": 2000}


def test_a_node_with_no_fetch_is_absent() -> None:
    assert digests_by_node([], NODES) == {}
    assert bytes_by_node([fetch("198.18.0.12", "a", 404)], NODES) == {}


def test_counting_from_a_parsed_log() -> None:
    a, b = digest("a"), digest("b")
    log = "\n".join([
        logrus_line("GET", blob_uri("ll/app", a), "198.18.0.11:5000", 200, 500),
        access_line("GET", blob_uri("ll/app", a), 200, 500),
        logrus_line("HEAD", blob_uri("ll/app", b), "198.18.0.12:5000", 200, 0),
        logrus_line("GET", blob_uri("ll/app", b), "198.18.0.12:5000", 200, 800),
        logrus_line("GET", blob_uri("ll/db", b), "198.18.0.13:5000", 206, 64),
    ])
    fetches = blob_fetches(log)
    assert digests_by_node(fetches, NODES) == {"node-1": {a}, "node-2": {b}, "node-3": {b}}
    assert bytes_by_node(fetches, NODES) == {"node-1": 500, "node-2": 800, "node-3": 64}
