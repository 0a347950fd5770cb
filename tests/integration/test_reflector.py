"""The generic reflector alone, against the stand-in API server (tests/kit/apiserver.py:
410s, dropped and empty streams on demand; watches across real restarts are in
test_cluster_restarts.py) through the real `kubernetes` client and a
generated kubeconfig.
The objects are plain Nodes, but nothing here depends on what they mean."""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import AsyncIterator, Callable, Mapping, Set
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import node_object
from tests.kit.apiserver import FakeApiServer, eventually
from webhook.inventory.kube import core_api
from webhook.inventory.reflector import Reflector
from webhook.inventory.reflector_terms import ReflectorSettings

INITIAL, MAXIMUM = 0.04, 0.1  # backoff bounds: the sleeps are recorded, never waited out


class Recorder:
    """Callbacks and metrics: what the reflector reported, in order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Mapping[str, Any] | None]] = []
        self.synced: list[frozenset[str]] = []
        self.relists: list[str] = []
        self.restarts: list[str] = []
        self.lags = 0
        self.sleeps: list[float] = []

    def on_event(self, kind: str, key: str, obj: Mapping[str, Any] | None) -> None:
        self.events.append((kind, key, obj))

    def on_synced(self, keys: Set[str]) -> None:
        self.synced.append(frozenset(keys))

    def watch_restart(self, resource: str) -> None:
        self.restarts.append(resource)

    def relist(self, resource: str, reason: str) -> None:
        self.relists.append(reason)

    def event_lag(self, seconds: float) -> None:
        self.lags += 1

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        await asyncio.sleep(0)

    def kinds(self, since: int = 0) -> list[tuple[str, str]]:
        return [(kind, key) for kind, key, _ in self.events[since:]]


@pytest.fixture
async def reflect(apiserver: FakeApiServer,
                  tmp_path: Path) -> AsyncIterator[Callable[[], Recorder]]:
    tasks: list[asyncio.Task[None]] = []

    def start() -> Recorder:
        api = core_api(str(apiserver.kubeconfig(tmp_path / "kubeconfig")), in_cluster=False)
        recorder = Recorder()
        reflector = Reflector(
            "nodes", api.list_node, lambda obj: (obj.get("metadata") or {}).get("name"),
            recorder.on_event, recorder.on_synced,
            ReflectorSettings(page_size=2, backoff_initial=INITIAL, backoff_max=MAXIMUM),
            recorder, sleep=recorder.sleep, jitter=random.Random(7).uniform)
        tasks.append(asyncio.create_task(reflector.run()))
        return recorder

    yield start
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_list_is_paginated_then_the_watch_starts_at_its_version(
    apiserver: FakeApiServer, reflect: Callable[[], Recorder]
) -> None:
    names = [f"n{i}" for i in range(5)]
    for name in names:
        apiserver.put("nodes", node_object(name))
    list_version = str(apiserver.version)
    recorder = reflect()
    await eventually(lambda: apiserver.watchers("nodes") == 1, "watching")

    assert recorder.kinds() == [("ADDED", name) for name in names]
    assert recorder.synced == [frozenset(names)]
    assert recorder.relists == ["start"]
    pages = [q for q in apiserver.queries["nodes"] if "watch" not in q]
    assert len(pages) == math.ceil(len(names) / 2)
    assert all(q["limit"] == "2" for q in pages)
    assert [bool(q.get("continue")) for q in pages] == [False, True, True]
    watch = next(q for q in apiserver.queries["nodes"] if "watch" in q)
    assert watch["resourceVersion"] == list_version
    assert watch["allowWatchBookmarks"] == "true"

    apiserver.put("nodes", node_object("n1", unschedulable=True))
    apiserver.delete("nodes", "n2")
    await eventually(lambda: len(recorder.events) == len(names) + 2, "two watch events")
    assert recorder.kinds(len(names)) == [("MODIFIED", "n1"), ("DELETED", "n2")]
    deleted = recorder.events[-1][2]
    assert deleted is not None and deleted["metadata"]["name"] == "n2"  # the final state


async def test_a_bookmark_moves_the_resume_point(
    apiserver: FakeApiServer, reflect: Callable[[], Recorder]
) -> None:
    apiserver.put("nodes", node_object("n0"))
    recorder = reflect()
    await eventually(lambda: apiserver.watchers("nodes") == 1, "watching")
    apiserver.bookmark("nodes")
    bookmark = str(apiserver.version)
    await eventually(lambda: recorder.lags == 1, "bookmark read")
    assert recorder.kinds() == [("ADDED", "n0")], "a bookmark is not an object event"

    apiserver.compact()  # history before the bookmark is gone: only the bookmark resumes
    apiserver.drop_streams()
    apiserver.put("nodes", node_object("n1"))
    await eventually(lambda: ("ADDED", "n1") in recorder.kinds(), "n1 after resuming")
    assert apiserver.watch_versions("nodes")[1] == bookmark
    assert apiserver.list_calls["nodes"] == 1 and recorder.relists == ["start"]


async def test_every_410_relists_with_one_log_line_and_a_metric(
    apiserver: FakeApiServer, reflect: Callable[[], Recorder], caplog: pytest.LogCaptureFixture
) -> None:
    for i in range(3):
        apiserver.put("nodes", node_object(f"n{i}"))
    caplog.set_level(logging.INFO, logger="webhook.inventory.reflector")
    recorder = reflect()
    await eventually(lambda: apiserver.watchers("nodes") == 1, "watching")

    def expired_lines() -> int:
        return sum("410" in r.getMessage() for r in caplog.records)

    # 1. ERROR event on the stream; the relist then meets an expired continue token (HTTP 410
    #    on its second page) and starts over.
    apiserver.fail("nodes", "continue", 410)
    apiserver.send_gone("nodes")
    await eventually(lambda: len(recorder.synced) == 2 and apiserver.watchers("nodes") == 1,
                     "relisted after two 410s")
    assert recorder.relists == ["start", "expired", "expired"]
    assert expired_lines() == 2
    # 2. HTTP 410 answering the watch request itself.
    apiserver.fail("nodes", "watch", 410)
    apiserver.drop_streams()
    await eventually(lambda: len(recorder.synced) == 3 and apiserver.watchers("nodes") == 1,
                     "relisted after the watch request's 410")
    assert recorder.relists == ["start", "expired", "expired", "expired"]
    assert expired_lines() == 3
    assert recorder.synced[-1] == {"n0", "n1", "n2"}
    assert ("DELETED", "n0") not in recorder.kinds()


async def test_objects_missing_from_a_relist_are_reported_deleted(
    apiserver: FakeApiServer, reflect: Callable[[], Recorder]
) -> None:
    for i in range(3):
        apiserver.put("nodes", node_object(f"n{i}"))
    recorder = reflect()
    await eventually(lambda: apiserver.watchers("nodes") == 1, "watching")
    listed = len(recorder.events)
    apiserver.compact()
    apiserver.drop_streams()
    apiserver.delete("nodes", "n1")  # in the gap: no watch will ever tell
    apiserver.put("nodes", node_object("n9"))
    apiserver.compact()
    await eventually(lambda: len(recorder.synced) == 2, "relisted")
    assert recorder.kinds(listed) == [("MODIFIED", "n0"), ("MODIFIED", "n2"), ("ADDED", "n9"),
                                      ("DELETED", "n1")]
    assert recorder.events[-1][2] is None  # final state unknown
    assert recorder.synced[-1] == {"n0", "n2", "n9"}


async def test_an_empty_stream_backs_off(
    apiserver: FakeApiServer, reflect: Callable[[], Recorder]
) -> None:
    apiserver.close_watches_at_once = True
    recorder = reflect()
    await eventually(lambda: len(recorder.sleeps) >= 4, "four empty streams")
    assert recorder.restarts[:4] == ["nodes"] * 4
    # one backoff per empty stream: at most the one in progress has had no sleep yet
    assert apiserver.watch_calls["nodes"] <= len(recorder.sleeps) + 1
    assert min(recorder.sleeps) >= INITIAL / 2
    assert apiserver.list_calls["nodes"] == 1, "an empty stream is resumed, not relisted"


async def test_errors_back_off_with_jitter_bounded_by_backoff_max(
    apiserver: FakeApiServer, reflect: Callable[[], Recorder]
) -> None:
    apiserver.put("nodes", node_object("n0"))
    failures = 6
    apiserver.fail("nodes", "watch", 500, times=failures)
    recorder = reflect()
    await eventually(lambda: apiserver.watchers("nodes") == 1, "watching after the failures")
    assert len(recorder.sleeps) == failures == len(recorder.restarts)
    for attempt, delay in enumerate(recorder.sleeps):
        ceiling = min(INITIAL * 2 ** attempt, MAXIMUM)  # doubling, capped
        assert ceiling / 2 <= delay <= ceiling, (attempt, delay)
    assert max(recorder.sleeps) <= MAXIMUM
    assert len(set(recorder.sleeps[-3:])) == 3, "capped delays still vary (jitter)"
    assert apiserver.list_calls["nodes"] == 1, "a failed watch resumes; it does not relist"


async def test_a_handler_that_holds_its_own_keys_gets_deletions_for_those_only(
    apiserver: FakeApiServer, tmp_path: Path
) -> None:
    """With `held` (the handler's own set of keys, as the live inventory's pods dict), the
    reflector keeps no copy: a relist reports ADDED/MODIFIED by what the handler holds, and
    as deleted exactly the keys the handler holds that the list lacks."""
    for i in range(4):
        apiserver.put("nodes", node_object(f"n{i}"))
    holds: dict[str, None] = {}
    recorder = Recorder()

    def on_event(kind: str, key: str, obj: Mapping[str, Any] | None) -> None:
        recorder.on_event(kind, key, obj)
        if kind == "DELETED":
            holds.pop(key, None)
        elif key != "n3":  # the handler ignores n3 (as the inventory drops unbound pods)
            holds[key] = None

    api = core_api(str(apiserver.kubeconfig(tmp_path / "kubeconfig")), in_cluster=False)
    reflector = Reflector(
        "nodes", api.list_node, lambda obj: (obj.get("metadata") or {}).get("name"),
        on_event, recorder.on_synced,
        ReflectorSettings(page_size=2, backoff_initial=INITIAL, backoff_max=MAXIMUM),
        recorder, held=holds.keys, sleep=recorder.sleep)
    task = asyncio.create_task(reflector.run())
    try:
        await eventually(lambda: apiserver.watchers("nodes") == 1, "watching")
        assert reflector._keys == set()  # no second copy
        listed = len(recorder.events)
        apiserver.compact()
        apiserver.drop_streams()
        apiserver.delete("nodes", "n1")
        apiserver.delete("nodes", "n3")  # never held: nothing to report
        apiserver.compact()
        await eventually(lambda: len(recorder.synced) == 2, "relisted")
        assert recorder.kinds(listed) == [("MODIFIED", "n0"), ("MODIFIED", "n2"),
                                          ("DELETED", "n1")]
        assert set(holds) == {"n0", "n2"}
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# ---- the real API server's watch-list (kube-apiserver v1.37: WatchList on by default) ------

class Calls:
    """A list call that records the arguments of every request it makes."""

    def __init__(self, call: Callable[..., Any]) -> None:
        self.call = call
        self.made: list[dict[str, Any]] = []

    def __call__(self, **kwargs: Any) -> Any:
        self.made.append(kwargs)
        return self.call(**kwargs)


def _streamed(recorder: Recorder, calls: Calls, settings: ReflectorSettings,
              key: Callable[[Mapping[str, Any]], str | None]) -> Reflector:
    return Reflector("things", calls, key, recorder.on_event, recorder.on_synced,
                     settings, recorder, sleep=recorder.sleep)


def _name(obj: Mapping[str, Any]) -> str | None:
    return (obj.get("metadata") or {}).get("name")


@pytest.mark.controlplane
async def test_a_watch_list_from_the_real_api_server_is_the_state_then_its_changes(
    local_cluster: Any,
) -> None:
    """ConfigMaps of a fresh namespace: one streaming request reports all 150 (no page, no
    second request), ends the state with the annotated bookmark, then carries the changes;
    a relist (a fresh reflector holding a key the server lacks) reports it deleted."""
    from kubernetes import client

    from tests.integration.cluster_fixture import new_namespace

    namespace = new_namespace(local_cluster, opted_in=False, prefix="wl")
    with local_cluster.api_client() as api:
        core: Any = client.CoreV1Api(api)
        names = [f"cm-{i:03d}" for i in range(150)]
        for name in names:
            core.create_namespaced_config_map(namespace, {"metadata": {"name": name},
                                                          "data": {"k": "v" * 100}})
        calls = Calls(lambda **kw: core.list_namespaced_config_map(namespace, **kw))
        recorder = Recorder()
        reflector = _streamed(recorder, calls, ReflectorSettings(watch_list=True), _name)
        reflector._keys = {"stale"}
        task = asyncio.create_task(reflector.run())
        try:
            await eventually(lambda: bool(recorder.synced), "the state streamed")
            assert recorder.synced == [frozenset({"kube-root-ca.crt", *names})]
            assert ("DELETED", "stale") in recorder.kinds()
            assert len(calls.made) == 1 and calls.made[0]["send_initial_events"] is True
            assert reflector._version  # the bookmark's: where a broken stream resumes
            core.delete_namespaced_config_map("cm-007", namespace)
            core.create_namespaced_config_map(namespace, {"metadata": {"name": "late"}})
            await eventually(lambda: ("ADDED", "late") in recorder.kinds(), "the changes")
            assert ("DELETED", "cm-007") in recorder.kinds()
            assert len(calls.made) == 1, "the same stream carries on as the watch"
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


@pytest.mark.controlplane
async def test_a_client_without_the_watch_list_parameter_lists_in_pages(
    local_cluster: Any,
) -> None:
    """The kubernetes package's custom-objects list lacks `send_initial_events` (its argument
    validation refuses it before any request): the NodeLayers are listed in pages, then
    watched."""
    from kubernetes import client

    with local_cluster.api_client() as api:
        custom: Any = client.CustomObjectsApi(api)
        calls = Calls(lambda **kw: custom.list_cluster_custom_object(
            "layer-locality.io", "v1alpha1", "nodelayers", **kw))
        recorder = Recorder()
        reflector = _streamed(recorder, calls, ReflectorSettings(watch_list=True), _name)
        task = asyncio.create_task(reflector.run())
        try:
            await eventually(lambda: bool(recorder.synced) and len(calls.made) >= 3,
                             "listed in pages, then watched")
            assert [bool(c.get("send_initial_events")) for c in calls.made[:3]] == [
                True, False, False]
            assert "watch" not in calls.made[1] and calls.made[2]["watch"] is True
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
