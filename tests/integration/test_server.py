"""The aiohttp app in-process (pytest-aiohttp): routes, status codes, fail-open, metrics."""

from __future__ import annotations

import asyncio
import copy
import gzip
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import ClientTimeout, web
from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.helpers import apply_patch, decode_patch, pod, review, validate_pod
from webhook.config import Settings
from webhook.core.index import LayerIndex
from webhook.serving.connections import EdgeLimits
from webhook.serving.metrics import Metrics
from webhook.serving.mutate import Inventory, Mutator
from webhook.serving.server import DRAIN, METRICS, create_app
from webhook.serving.serving import runner_options
from webhook.serving.wiring import build_parts

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[[web.Application], Awaitable[Client]]
DEMO = build_parts(Settings(demo=True))
EXAMPLE_REVIEW = Path(__file__).resolve().parents[2] / "examples" / "admission-review.json"


def demo_app(
    inventory: Inventory | None = None, max_request_bytes: int = 7 << 20
) -> web.Application:
    inv = inventory or DEMO.inventory
    mutator = Mutator(DEMO.sources, inv, Settings().policy)
    return create_app(mutator, inv, Metrics(), max_request_bytes)


async def served_like_serve(make: Callable[[TestServer], Awaitable[Client]],
                            app: web.Application) -> Client:
    """A client of `app` run with the server settings `serve` uses (no inflating...)."""
    server = TestServer(app)
    await server.start_server(**runner_options(EdgeLimits(), app[METRICS]))
    return await make(server)


async def post(client: Client, body: Any, content_type: str = "application/json") -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return await client.post("/mutate", data=data, headers={"Content-Type": content_type})


async def test_patches_a_pod(aiohttp_client: MakeClient) -> None:
    client = await aiohttp_client(demo_app())
    obj = pod(["python:3.11-slim", "redis:7.0"])
    resp = await post(client, review(obj, uid="uid-1"))
    assert resp.status == 200
    answer = await resp.json()
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == "uid-1"
    assert answer["response"]["allowed"] is True
    ops = decode_patch(answer)
    assert ops
    validate_pod(apply_patch(obj, ops))


async def test_out_of_scope_requests_are_allowed_untouched(aiohttp_client: MakeClient) -> None:
    client = await aiohttp_client(demo_app())
    for body in (review(pod(["python:3.11"]), operation="UPDATE"),
                 review({"apiVersion": "v1", "kind": "ConfigMap"}, kind="ConfigMap"),
                 review(pod(["python:3.11"], spec={"nodeName": "x"}))):
        resp = await post(client, body)
        answer = await resp.json()
        assert resp.status == 200
        assert answer["response"] == {"uid": body["request"]["uid"], "allowed": True}


@pytest.mark.parametrize(
    ("body", "content_type", "status"),
    [
        (b"{not json", "application/json", 400),
        (orjson.dumps({"kind": "AdmissionReview"}), "application/json", 400),
        (orjson.dumps(review(pod(["x"]))), "text/plain", 415),
        (orjson.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"operation": "CREATE"}}), "application/json", 400),
    ],
)
async def test_malformed_requests_get_a_clear_4xx(
    aiohttp_client: MakeClient, body: bytes, content_type: str, status: int
) -> None:
    client = await aiohttp_client(demo_app())
    resp = await post(client, body, content_type)
    assert resp.status == status
    assert (await resp.json())["error"]
    # ...and the server keeps serving.
    ok = await post(client, review(pod(["python:3.11"])))
    assert ok.status == 200


async def test_oversized_body_is_refused(aiohttp_client: MakeClient) -> None:
    client = await aiohttp_client(demo_app(max_request_bytes=64 << 10))
    big = pod(["python:3.11"], metadata={"annotations": {"pad": "x" * (128 << 10)}})
    resp = await post(client, review(big))
    assert resp.status == 413
    assert "limit" in (await resp.json())["error"]


def review_of_exactly(size: int, uid: str) -> bytes:
    """A review body of exactly `size` bytes (an annotation padded to fit)."""
    def body(pad: int) -> bytes:
        obj = pod(["python:3.11"], metadata={"annotations": {"pad": "x" * pad}})
        return orjson.dumps(review(obj, uid=uid))
    data = body(size - len(body(0)))
    assert len(data) == size
    return data


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
async def test_a_body_of_exactly_the_limit_is_answered_and_one_byte_more_is_not(
    aiohttp_client: MakeClient, declared: bool
) -> None:
    """The cap is inclusive: `max_request_bytes` bytes are served, one more is refused
    (by the Content-Length header when declared, else while the body is read)."""
    limit = 64 << 10
    client = await aiohttp_client(demo_app(max_request_bytes=limit))

    async def send(data: bytes) -> Any:
        if declared:
            return await post(client, data)

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: sent chunked
            yield data

        return await client.post("/mutate", data=chunks(),
                                 headers={"Content-Type": "application/json"})

    exact = await send(review_of_exactly(limit, "exact"))
    assert exact.status == 200
    assert (await exact.json())["response"]["uid"] == "exact"
    over = await send(review_of_exactly(limit + 1, "over"))
    assert over.status == 413
    assert f"{limit}-byte limit" in (await over.json())["error"]


class BrokenInventory:
    """An inventory whose index raises: stands for any internal failure."""

    @property
    def index(self) -> LayerIndex:
        raise RuntimeError("index exploded")

    @property
    def ready(self) -> bool:
        return True


async def test_internal_errors_fail_open_and_count(aiohttp_client: MakeClient) -> None:
    client = await aiohttp_client(demo_app(BrokenInventory()))
    resp = await post(client, review(pod(["python:3.11"]), uid="u-err"))
    assert resp.status == 200
    assert (await resp.json())["response"] == {"uid": "u-err", "allowed": True}
    metrics = await (await client.get("/metrics")).text()
    assert 'layer_locality_reviews_total{reason="RuntimeError",result="error"} 1.0' in metrics


class NotReady:
    index = LayerIndex()
    ready = False


async def test_health_readiness_metrics(aiohttp_client: MakeClient) -> None:
    client = await aiohttp_client(demo_app())
    assert (await client.get("/healthz")).status == 200
    assert (await client.get("/readyz")).status == 200
    await post(client, review(pod(["python:3.11"])))
    await post(client, review(pod(["python:3.11"], metadata={
        "labels": {"layer-locality.io/skip": "true"}})))
    text = await (await client.get("/metrics")).text()
    assert 'layer_locality_reviews_total{reason="",result="patched"} 1.0' in text
    assert 'layer_locality_reviews_total{reason="skip_label",result="skipped"} 1.0' in text
    assert "layer_locality_review_duration_seconds_count 2.0" in text
    assert f"layer_locality_inventory_nodes {float(len(DEMO.inventory.index))}" in text
    unready = await aiohttp_client(demo_app(NotReady()))
    assert (await unready.get("/readyz")).status == 503
    assert (await unready.get("/healthz")).status == 200


def _mutations() -> st.SearchStrategy[Any]:
    json_values = st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                    max_size=4),
        max_leaves=12,
    )
    paths = st.sampled_from([
        ("request",), ("request", "uid"), ("request", "object"), ("request", "operation"),
        ("request", "object", "spec"), ("request", "object", "metadata"),
        ("request", "object", "spec", "containers"), ("request", "object", "spec", "affinity"),
        ("request", "object", "spec", "tolerations"), ("request", "kind"), ("request", "dryRun"),
        ("request", "object", "metadata", "annotations"), ("apiVersion",),
        ("request", "object", "spec", "initContainers"),
    ])
    return st.lists(st.tuples(paths, json_values), max_size=4)


def _mutate(base: dict[str, Any], changes: list[tuple[tuple[str, ...], Any]]) -> Any:
    doc: Any = copy.deepcopy(base)
    for path, value in changes:
        target = doc
        for key in path[:-1]:
            if not isinstance(target, dict):
                break
            target = target.setdefault(key, {})
        if isinstance(target, dict):
            target[path[-1]] = value
    return doc


BASE = review(pod(["python:3.11-slim"], init_images=["busybox"], spec={
    "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}}}))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(_mutations())
async def test_fuzzed_reviews_never_crash_or_deny(
    aiohttp_client: MakeClient, changes: list[tuple[tuple[str, ...], Any]]
) -> None:
    client = await aiohttp_client(demo_app())
    body = _mutate(BASE, changes)
    resp = await post(client, body)
    assert resp.status in (200, 400)
    answer = await resp.json()
    if resp.status == 200:
        assert answer["response"]["allowed"] is True
        assert answer["response"]["uid"] == body["request"]["uid"]
        assert "error" not in answer["response"].get("status", {})
        ops = decode_patch(answer)
        if ops:
            apply_patch(body["request"]["object"], ops)  # must apply to what was sent
    else:
        assert answer["error"]
    # Fail-open hides a crash behind a 200 allowed: the error counter must not move.
    metrics = await (await client.get("/metrics")).text()
    assert 'result="error"' not in metrics, metrics


async def test_readme_example_review_is_patched(aiohttp_client: MakeClient) -> None:
    """The README's quick-start request against the demo inventory."""
    body = EXAMPLE_REVIEW.read_bytes()
    client = await aiohttp_client(demo_app())
    answer = await (await post(client, body)).json()
    ops = decode_patch(answer)
    assert ops
    validate_pod(apply_patch(orjson.loads(body)["request"]["object"], ops))


@pytest.mark.parametrize(
    ("encoding", "body"),
    [
        ("gzip", b"\x1f\x8b\x08\x00" + b"corrupt" * 40),  # a broken gzip stream
        ("deflate", b"\x78\x9c" + b"\xff" * 200),  # a broken zlib stream
        ("gzip", gzip.compress(b"{" + b" " * (1 << 20) + b"}")),  # valid, would inflate 1 MiB
        ("br", b"anything"),
    ],
)
async def test_compressed_bodies_are_refused_unread(
    aiohttp_client: Callable[[TestServer], Awaitable[Client]],
    caplog: pytest.LogCaptureFixture, encoding: str, body: bytes,
) -> None:
    """The API server never compresses an AdmissionReview: any Content-Encoding but identity
    is a 415, counted, with at most one log line and no traceback."""
    client = await served_like_serve(aiohttp_client, demo_app())
    with caplog.at_level(logging.DEBUG):
        resp = await client.post("/mutate", data=body, headers={
            "Content-Type": "application/json", "Content-Encoding": encoding})
        assert resp.status == 415
        assert encoding in (await resp.json())["error"]
    assert len(caplog.records) <= 1
    assert all(record.exc_info is None for record in caplog.records)
    metrics = await (await client.get("/metrics")).text()
    assert 'layer_locality_bad_requests_total{status="415"} 1.0' in metrics


async def test_identity_encoding_is_accepted(aiohttp_client: MakeClient) -> None:
    client = await aiohttp_client(demo_app())
    resp = await client.post("/mutate", data=orjson.dumps(review(pod(["python:3.11"]))),
                             headers={"Content-Type": "application/json",
                                      "Content-Encoding": "identity"})
    assert resp.status == 200
    assert (await resp.json())["response"]["allowed"] is True


async def test_declared_oversized_body_is_refused_before_reading(
    aiohttp_client: MakeClient,
) -> None:
    """Content-Length over the limit: 413 at once, although the body never comes."""
    client = await aiohttp_client(demo_app(max_request_bytes=64 << 10))

    async def stalled() -> AsyncIterator[bytes]:
        yield b"{"
        await asyncio.Event().wait()  # never sends the rest: only the header can decide

    resp = await client.post("/mutate", data=stalled(), headers={
        "Content-Type": "application/json", "Content-Length": str(128 << 10)},
        timeout=ClientTimeout(total=30))  # only a server waiting for the body runs into it
    assert resp.status == 413


async def test_the_exempt_path_never_holds_out(aiohttp_client: MakeClient) -> None:
    """/mutate holds the workload out (the policy holds out nearly every workload);
    /mutate/holdout-exempt, which the configuration's second webhook calls for namespaces
    labelled layer-locality.io/holdout=exempt, steers it."""
    from webhook.core.holdout import HoldoutPolicy

    mutator = Mutator(DEMO.sources, DEMO.inventory, Settings().policy,
                      holdout=HoldoutPolicy(0.999, "server-test"))
    client = await aiohttp_client(create_app(mutator, DEMO.inventory, Metrics()))
    obj = pod(["python:3.11-slim"])
    answers = {}
    for path in ("/mutate", "/mutate/holdout-exempt"):
        resp = await client.post(path, data=orjson.dumps(review(obj, uid=path)),
                                 headers={"Content-Type": "application/json"})
        assert resp.status == 200
        answers[path] = apply_patch(obj, decode_patch(await resp.json()))
    held, steered = answers["/mutate"], answers["/mutate/holdout-exempt"]
    for patched in (held, steered):
        validate_pod(patched)
    decision = "layer-locality.io/decision"
    assert orjson.loads(held["metadata"]["annotations"][decision])["group"] == "holdout"
    assert "affinity" not in held["spec"]
    assert "group" not in orjson.loads(steered["metadata"]["annotations"][decision])
    assert steered["spec"]["affinity"]["nodeAffinity"]
    metrics = (await (await client.get("/metrics")).read()).decode()
    assert 'layer_locality_reviews_total{reason="holdout",result="skipped"} 1.0' in metrics


async def test_a_draining_server_answers_and_closes_each_connection(
        aiohttp_client: MakeClient) -> None:
    """After SIGTERM (serving.drain sets the flag): reviews are still patched, each answer
    says Connection: close, /readyz is 503; before it, connections are kept alive."""
    app = demo_app()
    client = await aiohttp_client(app)
    before = await post(client, review(pod(["python:3.11"])))
    assert before.headers.get("Connection", "").lower() != "close"
    app[DRAIN].active = True
    answered = await post(client, review(pod(["python:3.11"])))
    assert answered.status == 200
    assert answered.headers["Connection"].lower() == "close"
    assert decode_patch(await answered.json())  # still patched
    ready = await client.get("/readyz")
    assert ready.status == 503
    assert ready.headers["Connection"].lower() == "close"
