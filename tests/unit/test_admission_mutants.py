"""AdmissionReview parsing and responses, field by field: every field of the request lands in
its own place of the Review, each malformed body is refused with its own message, and a
response carries the warnings it is given."""

from __future__ import annotations

import base64
import re
from typing import Any

import orjson
import pytest

from tests.helpers import pod, review
from webhook.core.admission import Review, ReviewError, build_response, parse_review
from webhook.core.reasons import Reason


def encode(obj: object) -> bytes:
    return orjson.dumps(obj)


def request_with(**fields: Any) -> bytes:
    """A pod CREATE review whose request has `fields` set (None: removed)."""
    raw = review(pod(["nginx"]))
    raw["request"].update(fields)
    raw["request"] = {k: v for k, v in raw["request"].items() if v is not None}
    return encode(raw)


def test_every_request_field_lands_in_its_own_place() -> None:
    """Distinct values in every field the Review keeps: a field read from the wrong key (or
    not at all) shows up as an empty string or another field's value."""
    obj = {"kind": "Scale"}
    body = encode({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-7",
            "kind": {"group": "autoscaling", "version": "v2", "kind": "Scale"},
            "resource": {"group": "apps", "version": "v1", "resource": "deployments"},
            "subResource": "scale",
            "namespace": "team-a",
            "name": "frontend",
            "operation": "UPDATE",
            "object": obj,
            "dryRun": True,
        },
    })
    assert parse_review(body) == Review(
        uid="u-7", operation="UPDATE", dry_run=True, namespace="team-a", name="frontend",
        kind=("autoscaling", "v2", "Scale"), resource=("apps", "v1", "deployments", "scale"),
        object=obj,
    )


def test_a_missing_field_reads_as_empty() -> None:
    parsed = parse_review(request_with(namespace=None, kind=None, resource=None, dryRun=None))
    assert (parsed.namespace, parsed.name, parsed.kind, parsed.resource, parsed.dry_run) == (
        "", "", ("", "", ""), ("", "", "", ""), False)


@pytest.mark.parametrize("dry_run", [None, False, "true", 1])
def test_only_a_json_true_is_a_dry_run(dry_run: object) -> None:
    assert parse_review(request_with(dryRun=dry_run)).dry_run is False


def test_a_review_for_a_pod_is_the_one_the_api_server_would_send() -> None:
    """Two routes to the same Review: `Review.for_pod` and parsing what the API server sends
    for a CREATE of that pod."""
    obj = pod(["nginx"], name="web-1", namespace="shop")
    sent = review(obj, uid="u-9")
    sent["request"]["name"] = "web-1"
    assert Review.for_pod(obj, uid="u-9") == parse_review(encode(sent))
    assert Review.for_pod(obj, uid="u-9", dry_run=True).dry_run is True


def test_a_review_for_a_pod_without_metadata_has_no_name() -> None:
    review_ = Review.for_pod({"spec": {}}, uid="u")
    assert (review_.namespace, review_.name, review_.unsupported_reason()) == ("", "", None)


@pytest.mark.parametrize(
    ("kind", "resource", "reason"),
    [
        (("", "v1", "Pod"), ("", "v1", "pods", ""), None),
        # the right kind through a subresource (an eviction, a binding) is no pod CREATE
        (("", "v1", "Pod"), ("", "v1", "pods", "ephemeralcontainers"), Reason.NOT_POD),
        (("", "v1", "Pod"), ("", "v1", "bindings", ""), Reason.NOT_POD),
        (("", "v1", "Binding"), ("", "v1", "pods", ""), Reason.NOT_POD),
        (("apps", "v1", "Pod"), ("", "v1", "pods", ""), Reason.NOT_POD),
    ],
)
def test_only_a_v1_pod_through_the_pods_resource_is_in_scope(
    kind: tuple[str, str, str], resource: tuple[str, str, str, str], reason: Reason | None
) -> None:
    review_ = Review(uid="u", operation="CREATE", dry_run=False, namespace="", name="",
                     kind=kind, resource=resource, object={})
    assert review_.unsupported_reason() == reason


def test_no_object_is_out_of_scope() -> None:
    review_ = Review(uid="u", operation="CREATE", dry_run=False, namespace="", name="",
                     kind=("", "v1", "Pod"), resource=("", "v1", "pods", ""), object=None)
    assert review_.unsupported_reason() is Reason.NO_OBJECT


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"[]", "body is not a JSON object"),
        (encode({"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview"}),
         "expected apiVersion admission.k8s.io/v1 kind AdmissionReview, "
         "got 'admission.k8s.io/v1beta1' 'AdmissionReview'"),
        (encode({"apiVersion": "admission.k8s.io/v1", "kind": "Pod"}),
         "expected apiVersion admission.k8s.io/v1 kind AdmissionReview, "
         "got 'admission.k8s.io/v1' 'Pod'"),
        (encode({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}),
         "AdmissionReview without a 'request' object"),
        (request_with(uid=7), "request without a 'uid' string"),
        (request_with(operation=None), "request without an 'operation' string"),
        (request_with(operation=["CREATE"]), "request without an 'operation' string"),
        (request_with(object="pod"), "request 'object' is not an object"),
        (request_with(object=None), "CREATE request without an 'object'"),
    ],
)
def test_each_malformed_body_says_what_is_wrong(body: bytes, message: str) -> None:
    with pytest.raises(ReviewError) as raised:
        parse_review(body)
    assert str(raised.value) == message


def test_a_body_that_is_not_json_says_so() -> None:
    with pytest.raises(ReviewError, match=re.compile("^body is not JSON: ")):
        parse_review(b"{")


def test_an_update_may_come_without_an_object() -> None:
    parsed = parse_review(request_with(operation="DELETE", object=None))
    assert (parsed.operation, parsed.object, parsed.unsupported_reason()) == (
        "DELETE", None, Reason.NOT_CREATE)


def test_a_response_carries_its_warnings_and_patch() -> None:
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"é": "ü"}}]
    response = build_response("abc", ops, ["first", "second"])  # type: ignore[arg-type]
    assert response["response"]["warnings"] == ["first", "second"]
    assert orjson.loads(base64.b64decode(response["response"]["patch"])) == ops
    assert "warnings" not in build_response("abc", ops)["response"]  # type: ignore[arg-type]
