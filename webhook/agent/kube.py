"""The agent's API-server calls for its Node and its Lease, through the kubernetes client's
ApiClient (its configuration, TLS and token refresh), with answers decoded as plain JSON: the
client's model classes would validate and convert a whole Node (tens of KB, its image list)
for every label patch. Every call is synchronous (run it in a thread) and bounded in time;
every failure is an `ApiError` carrying the HTTP status (None: no answer)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from webhook.inventory.agentlease import LEASE_GROUP, LEASE_VERSION

CALL_SECONDS = 30.0
MERGE_PATCH = "application/merge-patch+json"
FIELD_MANAGER = "layer-locality-agent"  # names the agent's fields in managedFields


class ApiError(Exception):
    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def describe(exc: BaseException) -> str:
    """One line: the status and the API server's message (a policy's refusal), or the error."""
    status = getattr(exc, "status", None)
    if not isinstance(status, int):
        return repr(exc)
    body = getattr(exc, "body", None)
    message = ""
    if isinstance(body, str | bytes) and body:
        try:
            decoded = orjson.loads(body)
        except orjson.JSONDecodeError:
            decoded = None
        if isinstance(decoded, dict) and isinstance(decoded.get("message"), str):
            message = decoded["message"]
    return f"HTTP {status} {message or getattr(exc, 'reason', '') or ''}".strip()


def node_labels(node: Mapping[str, Any]) -> dict[str, str]:
    metadata = node.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    if not isinstance(labels, Mapping):
        return {}
    return {str(k): str(v) for k, v in labels.items()}


class KubeApi:
    """A Node's labels (read, merge patch) and a namespaced Lease (read, create, replace)."""

    def __init__(self, api_client: Any, timeout: float = CALL_SECONDS) -> None:
        from kubernetes import client

        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)  # the generic path serves Leases too
        self.timeout = timeout

    def read_node(self, name: str) -> dict[str, Any]:
        return self._call(f"reading node {name}", self.core.read_node, name)

    def patch_node_labels(self, name: str,
                          changes: Mapping[str, str | None]) -> dict[str, str]:
        """One JSON merge patch of `metadata.labels` (None removes a key); the Node's labels
        as the API server answered."""
        body = {"metadata": {"labels": dict(changes)}}
        node = self._call(f"patching node {name}'s labels", self.core.patch_node, name, body,
                          field_manager=FIELD_MANAGER, _content_type=MERGE_PATCH)
        return node_labels(node)

    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            return self._call(f"reading lease {namespace}/{name}",
                              self.custom.get_namespaced_custom_object, LEASE_GROUP,
                              LEASE_VERSION, namespace, "leases", name)
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(f"creating lease {namespace}/{body['metadata']['name']}",
                          self.custom.create_namespaced_custom_object, LEASE_GROUP,
                          LEASE_VERSION, namespace, "leases", body,
                          field_manager=FIELD_MANAGER)

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._call(f"renewing lease {namespace}/{name}",
                          self.custom.replace_namespaced_custom_object, LEASE_GROUP,
                          LEASE_VERSION, namespace, "leases", name, body,
                          field_manager=FIELD_MANAGER)

    def _call(self, what: str, method: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        try:
            response = method(*args, **kwargs, _preload_content=False,
                              _request_timeout=self.timeout)
            try:
                data = response.data
            finally:
                response.release_conn()
            decoded = orjson.loads(data)
        except Exception as exc:  # the client's, urllib3's, a socket's or a decoding error
            status = getattr(exc, "status", None)
            raise ApiError(f"{what}: {describe(exc)}",
                           status if isinstance(status, int) else None) from exc
        if not isinstance(decoded, dict):
            raise ApiError(f"{what}: the answer is not an object")
        return decoded
