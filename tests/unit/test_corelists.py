"""CoreLists: the inventory's three core lists without CoreV1Api, the same requests as the
generated methods send, the same answers to a refused argument and to a status outside 2xx."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from webhook.inventory.corelists import CoreLists
from webhook.inventory.reflector_terms import expired

ARGS: list[dict[str, Any]] = [
    {"limit": 500},
    {"limit": 1200, "_continue": "eyJ2IjoibWV0YS5rOHMuaW8vdjEifQ"},
    {"watch": True, "allow_watch_bookmarks": True, "timeout_seconds": 300,
     "resource_version": "12345"},
    {"watch": True, "send_initial_events": True, "resource_version_match": "NotOlderThan",
     "allow_watch_bookmarks": True, "timeout_seconds": 300},
    {"field_selector": "reason=Pulled", "limit": 500, "label_selector": "a=b,c"},
]


def _client() -> Any:
    configuration = client.Configuration(host="https://127.0.0.1:6443")
    configuration.api_key = {"BearerToken": "Bearer t0ken"}
    return client.ApiClient(configuration)


class Recorded:
    """An ApiClient that serializes for real and answers `status` instead of sending."""

    def __init__(self, status: int = 200) -> None:
        self.real = _client()
        self.status = status
        self.sent: list[tuple[Any, ...]] = []

    def param_serialize(self, **kwargs: Any) -> Any:
        return self.real.param_serialize(**kwargs)

    def call_api(self, *request: Any, _request_timeout: Any = None) -> Any:
        self.sent.append((*request, _request_timeout))
        return Answer(self.status)


class Answer:
    def __init__(self, status: int) -> None:
        self.status = status
        self.reason = "Gone" if status == 410 else "OK"
        self.data: bytes | None = None
        self.headers: dict[str, str] = {}
        self.response = object()  # what a raw list hands its reader

    def read(self) -> bytes:
        self.data = b'{"kind":"Status","code":%d}' % self.status
        return self.data

    def getheaders(self) -> dict[str, str]:
        return {}


@pytest.mark.parametrize("kwargs", ARGS)
@pytest.mark.parametrize(("ours", "generated"), [
    ("list_node", "_list_node_serialize"),
    ("list_pod_for_all_namespaces", "_list_pod_for_all_namespaces_serialize"),
    ("list_event_for_all_namespaces", "_list_event_for_all_namespaces_serialize"),
])
def test_each_list_sends_what_the_generated_method_sends(
        ours: str, generated: str, kwargs: dict[str, Any]) -> None:
    recorded = Recorded()
    answer = getattr(CoreLists(recorded), ours)(
        **kwargs, _preload_content=False, _request_timeout=(10.0, 330.0))
    assert answer is not None and len(recorded.sent) == 1
    method, url, headers, body, post, timeout = recorded.sent[0]
    names = ("pretty", "allow_watch_bookmarks", "_continue", "field_selector",
             "label_selector", "limit", "resource_version", "resource_version_match",
             "send_initial_events", "shard_selector", "timeout_seconds", "watch")
    expected = getattr(client.CoreV1Api(_client()), generated)(
        **{name: kwargs.get(name) for name in names}, _request_auth=None, _content_type=None,
        _headers=None, _host_index=0)
    assert (method, url, body, post) == (expected[0], expected[1], expected[3], expected[4])
    assert headers["authorization"] == expected[2]["authorization"] == "Bearer t0ken"
    assert headers["Accept"] == expected[2]["Accept"] == "application/json"
    assert timeout == (10.0, 330.0)


def test_an_argument_it_does_not_take_is_refused_before_anything_is_sent() -> None:
    recorded = Recorded()
    lists = CoreLists(recorded)
    with pytest.raises(TypeError, match="shard_selector"):
        lists.list_node(shard_selector="x", _preload_content=False)
    with pytest.raises(TypeError, match="_preload_content"):
        lists.list_pod_for_all_namespaces(limit=1)
    assert recorded.sent == []


def test_a_status_outside_2xx_raises_with_it_and_410_reads_as_expired() -> None:
    with pytest.raises(ApiException) as caught:
        CoreLists(Recorded(410)).list_pod_for_all_namespaces(
            limit=500, _continue="old", _preload_content=False)
    assert caught.value.status == 410 and expired(caught.value)
    with pytest.raises(ApiException) as forbidden:
        CoreLists(Recorded(403)).list_node(limit=1, _preload_content=False)
    assert forbidden.value.status == 403 and not expired(forbidden.value)


def test_the_answer_is_the_unread_response() -> None:
    recorded = Recorded()
    assert CoreLists(recorded).list_node(limit=1, _preload_content=False) is not None
    answer = Answer(200)
    recorded.call_api = lambda *request, _request_timeout=None: answer  # type: ignore[method-assign]
    assert CoreLists(recorded).list_node(limit=1, _preload_content=False) is answer.response
    assert answer.data is None  # not read: the caller reads and decodes it
