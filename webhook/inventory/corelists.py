"""The core API's three lists the live inventory reads (Nodes, pods, Events), requested raw
through the official client's ApiClient, without its CoreV1Api.

kubernetes 37's CoreV1Api is one generated module of every core endpoint: importing it costs
a starting replica 0.37 s of CPU and 22 MB of RSS before its first list, and each call is
validated by pydantic (a validator built on a method's first call). The inventory needs three
GET paths with a handful of query parameters, always unparsed (`_preload_content=False`): the
same request as the generated method's (path, query, `Accept: application/json`, the
BearerToken auth setting, `ApiClient.param_serialize`), with its answer to a status outside
2xx (an ApiException carrying the status: 410 Gone relists) and to an argument it does not
take (TypeError, before anything is sent: a watch-list the client refuses gets pages).
"""

from __future__ import annotations

from typing import Any

NODES = "/api/v1/nodes"
PODS = "/api/v1/pods"
EVENTS = "/api/v1/events"

# The list and watch parameters the reflectors pass, by the generated methods' names, in the
# order they put them in the query.
QUERY = {
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "_continue": "continue",
    "field_selector": "fieldSelector",
    "label_selector": "labelSelector",
    "limit": "limit",
    "resource_version": "resourceVersion",
    "resource_version_match": "resourceVersionMatch",
    "send_initial_events": "sendInitialEvents",
    "timeout_seconds": "timeoutSeconds",
    "watch": "watch",
}


class CoreLists:
    """list_node, list_pod_for_all_namespaces and list_event_for_all_namespaces, answering
    the urllib3 response unread (the caller reads and decodes it, streams.py)."""

    def __init__(self, api_client: Any) -> None:
        self.api_client = api_client  # also what the other API groups' clients are built on

    def list_node(self, **kwargs: Any) -> Any:
        return self._list(NODES, kwargs)

    def list_pod_for_all_namespaces(self, **kwargs: Any) -> Any:
        return self._list(PODS, kwargs)

    def list_event_for_all_namespaces(self, **kwargs: Any) -> Any:
        return self._list(EVENTS, kwargs)

    def _list(self, path: str, kwargs: dict[str, Any]) -> Any:
        from kubernetes.client.exceptions import ApiException

        timeout = kwargs.pop("_request_timeout", None)
        if kwargs.pop("_preload_content", True) is not False:
            raise TypeError("CoreLists answers raw responses only: pass _preload_content=False")
        unknown = kwargs.keys() - QUERY.keys()
        if unknown:
            raise TypeError(f"unexpected keyword argument(s) {sorted(unknown)}")
        query = [(wire, kwargs[name]) for name, wire in QUERY.items()  # the generated order
                 if kwargs.get(name) is not None]
        request = self.api_client.param_serialize(
            method="GET", resource_path=path, path_params={}, query_params=query,
            header_params={"Accept": "application/json"}, body=None, post_params=[], files={},
            auth_settings=["BearerToken"], collection_formats={}, _host=None, _request_auth=None)
        answer = self.api_client.call_api(*request, _request_timeout=timeout)
        if not 200 <= answer.status <= 299:
            answer.read()  # the generated methods' way: the body goes with the exception
            raise ApiException.from_response(http_resp=answer, body=None, data=None)
        return answer.response
