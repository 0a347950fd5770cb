"""AdmissionReview parsing and responses."""

from __future__ import annotations

import base64

import orjson
import pytest

from tests.helpers import pod, review
from webhook.core.admission import ReviewError, build_response, parse_review


def encode(obj: object) -> bytes:
    return orjson.dumps(obj)


def test_parses_a_pod_create() -> None:
    parsed = parse_review(encode(review(pod(["nginx"]), uid="u-1", dry_run=True)))
    assert parsed.uid == "u-1" and parsed.dry_run and parsed.operation == "CREATE"
    assert parsed.unsupported_reason() is None


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"not json", "not JSON"),
        (b"[]", "not a JSON object"),
        (encode({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}),
         "expected apiVersion"),
        (encode({"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}), "expected apiVersion"),
        (encode({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
         "without a 'request'"),
        (encode({**review(pod(["x"])), "request": {**review(pod(["x"]))["request"], "uid": ""}}),
         "uid"),
        (encode({**review(None)}), "CREATE request without an 'object'"),
        (encode({**review(pod(["x"])), "request": {**review(pod(["x"]))["request"],
                                                   "object": [1]}}), "not an object"),
    ],
)
def test_rejects_malformed(body: bytes, message: str) -> None:
    with pytest.raises(ReviewError, match=message):
        parse_review(body)


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (review(pod(["x"]), operation="UPDATE"), "not_create"),
        (review({"kind": "Service"}, kind="Service"), "not_pod"),
    ],
)
def test_out_of_scope(raw: dict[str, object], reason: str) -> None:
    assert parse_review(encode(raw)).unsupported_reason() == reason


def test_response_echoes_uid_and_version_and_only_patches_when_needed() -> None:
    empty = build_response("abc")
    assert empty == {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                     "response": {"uid": "abc", "allowed": True}}
    ops = [{"op": "add", "path": "/metadata/annotations", "value": {"a": "b"}}]
    patched = build_response("abc", ops)  # type: ignore[arg-type]
    assert patched["response"]["patchType"] == "JSONPatch"
    assert orjson.loads(base64.b64decode(patched["response"]["patch"])) == ops
