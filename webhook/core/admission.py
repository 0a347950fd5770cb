"""AdmissionReview (admission.k8s.io/v1) parsing and response building. Pure.

Responses always echo the request's uid, apiVersion and kind and always allow: this webhook
only expresses preferences, so its own trouble must never stop a pod (fail open).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NotRequired, TypedDict

import orjson

from webhook.core.objects import mapping, text
from webhook.core.reasons import Reason

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


class ReviewError(ValueError):
    """The body is not an AdmissionReview this webhook can answer (HTTP 400)."""


class PatchOperation(TypedDict):
    """One RFC 6902 operation; this webhook only ever adds."""

    op: Literal["add"]
    path: str
    value: Any


class AdmissionResponse(TypedDict):
    uid: str
    allowed: bool
    patchType: NotRequired[str]
    patch: NotRequired[str]
    warnings: NotRequired[list[str]]


class AdmissionReviewResponse(TypedDict):
    apiVersion: str
    kind: str
    response: AdmissionResponse


@dataclass(frozen=True, slots=True)
class Review:
    uid: str
    operation: str
    dry_run: bool
    namespace: str
    name: str
    kind: tuple[str, str, str]  # group, version, kind of the object
    resource: tuple[str, str, str, str]  # group, version, resource, subResource
    object: Mapping[str, Any] | None

    @classmethod
    def for_pod(cls, pod: Mapping[str, Any], uid: str, dry_run: bool = False) -> Review:
        """A CREATE review of `pod`, as the API server would send it (explain, simulator)."""
        metadata = mapping(pod.get("metadata"))
        return cls(
            uid=uid, operation="CREATE", dry_run=dry_run,
            namespace=text(metadata.get("namespace")), name=text(metadata.get("name")),
            kind=("", "v1", "Pod"), resource=("", "v1", "pods", ""), object=pod,
        )

    def unsupported_reason(self) -> Reason | None:
        """Why this request is out of scope (not a CREATE of a v1 Pod), or None."""
        if self.operation != "CREATE":
            return Reason.NOT_CREATE
        if self.kind != ("", "v1", "Pod") or self.resource != ("", "v1", "pods", ""):
            return Reason.NOT_POD
        if self.object is None:
            return Reason.NO_OBJECT
        return None


def parse_review(body: bytes, loads: Callable[[bytes], Any] = orjson.loads) -> Review:
    """Decode (with `loads`) and check an AdmissionReview; ReviewError says what is wrong."""
    try:
        raw = loads(body)
    except ValueError as exc:  # orjson's and json's decode errors, invalid UTF-8
        raise ReviewError(f"body is not JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ReviewError("body is not a JSON object")
    if raw.get("apiVersion") != API_VERSION or raw.get("kind") != KIND:
        raise ReviewError(
            f"expected apiVersion {API_VERSION} kind {KIND}, "
            f"got {raw.get('apiVersion')!r} {raw.get('kind')!r}"
        )
    request = raw.get("request")
    if not isinstance(request, dict):
        raise ReviewError("AdmissionReview without a 'request' object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise ReviewError("request without a 'uid' string")
    operation = request.get("operation")
    if not isinstance(operation, str):
        raise ReviewError("request without an 'operation' string")
    obj = request.get("object")
    if obj is not None and not isinstance(obj, dict):
        raise ReviewError("request 'object' is not an object")
    if operation == "CREATE" and obj is None:
        raise ReviewError("CREATE request without an 'object'")
    kind = mapping(request.get("kind"))
    resource = mapping(request.get("resource"))
    return Review(
        uid=uid,
        operation=operation,
        dry_run=request.get("dryRun") is True,
        namespace=text(request.get("namespace")),
        name=text(request.get("name")),
        kind=(text(kind.get("group")), text(kind.get("version")), text(kind.get("kind"))),
        resource=(
            text(resource.get("group")),
            text(resource.get("version")),
            text(resource.get("resource")),
            text(request.get("subResource")),
        ),
        object=obj,
    )


def build_response(
    uid: str, patch: Sequence[PatchOperation] | None = None, warnings: Sequence[str] = ()
) -> AdmissionReviewResponse:
    """An allowing response; JSONPatch fields only when there are operations."""
    response: AdmissionResponse = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(orjson.dumps(list(patch))).decode("ascii")
    if warnings:
        response["warnings"] = list(warnings)
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}
