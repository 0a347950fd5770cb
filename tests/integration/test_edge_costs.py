"""What the edge does to stay cheap must not change what it answers: a large body is decoded by
another parser (as strictly, to the same review), and it asks for the memory to be handed back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient

from tests.helpers import decode_patch, pod, review
from webhook.config import Settings
from webhook.serving import server
from webhook.serving.metrics import Metrics
from webhook.serving.mutate import Mutator
from webhook.serving.server import LARGE_BODY, create_app
from webhook.serving.wiring import build_parts

Client = TestClient[web.Request, web.Application]
MakeClient = Callable[[web.Application], Awaitable[Client]]
DEMO = build_parts(Settings(demo=True))


def app() -> web.Application:
    return create_app(Mutator(DEMO.sources, DEMO.inventory, Settings().policy),
                      DEMO.inventory, Metrics())


def large_review(filler: str = "x") -> bytes:
    """A pod review over LARGE_BODY: one huge annotation and many env entries."""
    obj = pod(["python:3.11-slim", "redis:7.0"],
              metadata={"annotations": {"example.com/blob": filler * 4096}})
    obj["spec"]["containers"][0]["env"] = [{"name": f"V{i}", "value": "v"}
                                           for i in range(LARGE_BODY // 20)]
    body = orjson.dumps(review(obj, uid="large-1"))
    assert len(body) > LARGE_BODY
    return body


async def answer(make: MakeClient, body: bytes) -> tuple[int, bytes]:
    client = await make(app())
    resp = await client.post("/mutate", data=body, headers={"Content-Type": "application/json"})
    return resp.status, await resp.read()


async def test_a_large_review_is_answered_as_a_small_one_would_be(
    aiohttp_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = large_review()
    status, large = await answer(aiohttp_client, body)
    monkeypatch.setattr(server, "LARGE_BODY", len(body) + 1)  # now orjson decodes it
    status_small, small = await answer(aiohttp_client, body)
    assert status == status_small == 200
    ops = decode_patch(orjson.loads(large))
    assert ops and ops == decode_patch(orjson.loads(small))


@pytest.mark.parametrize("bad", [b"NaN", b"Infinity", b"-Infinity"])
async def test_a_large_body_is_decoded_as_strictly(
    aiohttp_client: MakeClient, bad: bytes
) -> None:
    """The stdlib decoder accepts NaN and Infinity; orjson (and JSON) do not."""
    body = large_review().replace(b'"value":"v"', b'"value":' + bad, 1)
    status, text = await answer(aiohttp_client, body)
    assert status == 400 and b"not JSON" in text


async def test_a_large_body_must_be_utf8(aiohttp_client: MakeClient) -> None:
    body = large_review().replace(b'"value":"v"', '"value":"é"'.encode("latin-1"), 1)
    status, text = await answer(aiohttp_client, body)
    assert status == 400 and b"not JSON" in text
