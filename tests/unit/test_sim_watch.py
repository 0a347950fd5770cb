"""The webhook's view in the simulator: watch events arrive `watch_delay` late, the registry
answers an unseen image only `registry_delay` after its first review, the inventory keeps
bound pods' images in flight until the node status reports them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson
import pytest

from tests.helpers import image
from webhook.core.annotation import DECISION_VERSION
from webhook.core.images import parse_image
from webhook.core.index import LayerIndex
from webhook.core.layers import Platform
from webhook.registry.catalog import StaticCatalog
from webhook.sim.creation import CreationConfig, owner_uid, pod_uid
from webhook.sim.engine import SimConfig, run
from webhook.sim.policies import WebhookPolicy
from webhook.sim.view import IndexListener, SimRegistry, ViewConfig
from webhook.sim.watch import BoundPod, SimWatch
from webhook.sim.workload import NodeSpec, PodSpec, Trace
from webhook.sim.world import World

MiB = 1 << 20
AMD64 = Platform.parse("linux/amd64")
APP = image("docker.io/library/app:1", {AMD64: [("base", 200 * MiB), ("code", 20 * MiB)]})
APP_DIGESTS = {layer.digest for layer in APP.platforms[AMD64].layers}


class Log:
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []

    def node(self, obj: Mapping[str, Any]) -> None:
        self.events.append(("node", obj["metadata"]["name"]))

    def bound(self, pod: BoundPod) -> None:
        self.events.append(("bound", pod.uid))

    def gone(self, uid: str) -> None:
        self.events.append(("gone", uid))


def test_sim_watch_delivers_each_event_delay_seconds_later_in_order() -> None:
    watch = SimWatch(delay=1.5)
    log = Log()
    watch.subscribe(log)
    pod = BoundPod(uid="u1", name="p", owner=None, node="n", annotations={}, images=())
    watch.pod_bound(10.0, pod)
    watch.node_changed(10.2, {"metadata": {"name": "n"}})
    watch.pod_gone(11.0, "u1")
    assert watch.advance(11.49) == 0 and log.events == []
    assert watch.advance(11.5) == 1 and log.events == [("bound", "u1")]
    assert watch.advance(100.0) == 2
    assert log.events == [("bound", "u1"), ("node", "n"), ("gone", "u1")]


def test_sim_watch_without_listeners_keeps_nothing() -> None:
    watch = SimWatch(delay=1.0)
    watch.pod_gone(0.0, "u")
    log = Log()
    watch.subscribe(log)
    assert watch.advance(10.0) == 0 and log.events == []


def pods_trace(arrivals: list[float], kind: str = "Pod") -> Trace:
    """Pods of one image on three empty nodes; each fits anywhere."""
    nodes = tuple(NodeSpec(name=f"n{i}", cpu_milli=8000) for i in range(3))
    pods = tuple(PodSpec(name=f"p{i}", workload="w" if kind != "Pod" else f"p{i}", kind=kind,
                         arrival=t, images=(APP.ref,), duration=3600, cpu_milli=100)
                 for i, t in enumerate(arrivals))
    return Trace(nodes=nodes, pods=pods, images=(APP,))


@pytest.mark.parametrize(("delay", "sees_first_bind"), [
    (0.0, True), (0.25, True), (0.5, True), (0.5001, False), (1.0, False), (5.0, False),
])
def test_the_webhooks_view_lags_binds_by_the_watch_delay(delay: float,
                                                         sees_first_bind: bool) -> None:
    """p0 binds at 0 and pulls the image; p1 is reviewed at 0.5. Only a webhook that has heard
    of the bind (delay <= 0.5) knows where the image's layers are going: it patches p1 to
    follow p0. Nothing is on any node's status yet (the pull takes seconds)."""
    view = ViewConfig(watch_delay=delay, registry_delay=0.0)
    result = run(pods_trace([0.0, 0.5]), "webhook", StaticCatalog(), SimConfig(view=view))
    assert result.reviews == 2
    assert result.patched == (1 if sees_first_bind else 0)
    if sees_first_bind:
        assert result.placements["p1"] == result.placements["p0"]


def test_registry_answers_an_unseen_image_after_the_registry_delay() -> None:
    """p0 and p1 (0.4 s later) are reviewed while the resolution of their image runs (0.5 s):
    no preference; p2 at 0.6 s gets one (p0's bind is known: watch delay 0)."""
    view = ViewConfig(watch_delay=0.0, registry_delay=0.5)
    result = run(pods_trace([0.0, 0.4, 0.6]), "webhook", StaticCatalog(), SimConfig(view=view))
    assert result.reasons.get("unresolved") == 2
    assert result.patched == 1


def test_sim_registry_knows_images_by_digest_whatever_name_asks() -> None:
    now = [0.0]
    registry = SimRegistry(StaticCatalog([APP]), delay=2.0, clock=lambda: now[0])
    by_tag = parse_image(APP.ref)
    by_digest = parse_image(f"docker.io/library/other@{APP.digest}")
    assert registry.cached(by_digest) is None  # first sight at 0
    now[0] = 1.9
    assert registry.cached(by_tag) is None
    now[0] = 2.0
    assert registry.cached(by_tag) == APP
    assert registry.cached(parse_image("docker.io/library/unknown:1")) is None
    preloaded = SimRegistry(StaticCatalog([APP]), delay=2.0, clock=lambda: 0.0)
    preloaded.preload([APP.ref])
    assert preloaded.cached(by_digest) == APP


def node_object(name: str, images: list[list[str]]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"nodeInfo": {"operatingSystem": "linux", "architecture": "amd64"},
                       "images": [{"names": n, "sizeBytes": 1} for n in images]}}


def test_index_keeps_bound_images_in_flight_until_reported_or_expired() -> None:
    now = [0.0]
    registry = SimRegistry(StaticCatalog([APP]), delay=0.0, clock=lambda: now[0])
    index = LayerIndex()
    inventory = IndexListener(index, registry, lambda: now[0], inflight_seconds=60.0)
    inventory.node(node_object("a", []))
    inventory.node(node_object("b", []))
    pod = BoundPod(uid="u", name="p", owner=None, node="a", annotations={}, images=(APP.ref,))
    inventory.bound(pod)
    assert index.layers_of("a") == APP_DIGESTS and index.layers_of("b") == frozenset()
    inventory.gone("u")  # the layers stay on the node
    assert index.layers_of("a") == APP_DIGESTS
    now[0] = 59.0
    inventory.advance(now[0])
    assert index.layers_of("a") == APP_DIGESTS
    now[0] = 60.0
    inventory.advance(now[0])
    assert index.layers_of("a") == frozenset()  # expired: never reported
    # Reported in the status: there to stay, whatever the in-flight entry does.
    inventory.bound(pod)
    inventory.node(node_object("a", [[f"docker.io/library/app@{APP.digest}", APP.ref]]))
    now[0] = 1000.0
    inventory.advance(now[0])
    assert index.layers_of("a") == APP_DIGESTS


class RecordingTracker:
    """The interface the spread tracker implements: bound(...) / gone(...)."""

    def __init__(self) -> None:
        self.binds: list[tuple[str, str | None, str, str | None]] = []
        self.ends: list[str] = []

    def bound(self, pod_uid: str, owner_uid: str | None, node: str,
              decision: str | None) -> None:
        self.binds.append((pod_uid, owner_uid, node, decision))

    def gone(self, pod_uid: str) -> None:
        self.ends.append(pod_uid)


def test_a_tracker_hears_of_binds_and_ends_through_the_delayed_watch() -> None:
    delay = 1.0
    arrivals = [0.0, 0.3, 0.6, 0.9, 1.2, 1.5, 2.7, 3.3, 5000.0]  # each pod runs an hour
    trace = pods_trace(arrivals, kind="Deployment")
    tracker = RecordingTracker()
    seen_at_review: list[tuple[float, int, int]] = []

    def factory(world: World, watch: SimWatch) -> WebhookPolicy:
        policy = WebhookPolicy(world, watch, 0, SimConfig().scoring,
                               view=ViewConfig(watch_delay=delay, registry_delay=0.0),
                               tracker=tracker)
        admit = policy.admit

        def recording_admit(pod: dict[str, Any], now: float,
                            replica: int | None = None) -> dict[str, Any]:
            out = admit(pod, now, replica)
            seen_at_review.append((now, len(tracker.binds), len(tracker.ends)))
            return out

        policy.admit = recording_admit  # type: ignore[method-assign]
        return policy

    config = SimConfig(creation=CreationConfig(bursts=False))
    result = run(trace, factory, StaticCatalog(), config)
    # Every pod binds when created; a review at t has heard of the binds made by t - delay,
    # and (the last one) of the first eight pods' ends, an hour and a pull after their binds.
    assert seen_at_review == [(t, sum(1 for a in arrivals if a <= t - delay), 8 if t > 4000 else 0)
                              for t in arrivals]
    # The watch reports the pod the API server named: its uid and its owner's uid.
    by_uid = {pod_uid(s): s for s in trace.pods}
    assert [u for u, *_ in tracker.binds] == [pod_uid(s) for s in trace.pods[:8]]
    assert sorted(tracker.ends) == sorted(pod_uid(s) for s in trace.pods[:8])
    for uid, owner, node, decision in tracker.binds:
        spec = by_uid[uid]
        assert owner == owner_uid(spec) and node == result.placements[spec.name]
        if decision is not None:
            assert orjson.loads(decision)["v"] == DECISION_VERSION
    assert result.patched > 0 and any(d is not None for *_, d in tracker.binds)
