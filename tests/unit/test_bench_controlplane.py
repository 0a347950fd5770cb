"""The control-plane benchmark's own arithmetic, its stand-in agents' schedule and label
changes, its placement measure, and its TCP balancer: the figures in docs/performance.md's
5,000-node section are computed by these."""

from __future__ import annotations

import asyncio
import itertools
import math
import random
import signal
from collections.abc import Sequence
from typing import Any

import orjson
import pytest

from bench.controlplane import placement as cp_placement
from bench.controlplane import standin_agents, standin_renewer
from bench.controlplane.api_load import idle_seconds
from bench.controlplane.apiclient import SampleKey, by_label, delta, hist, total
from bench.controlplane.objects import bake, deployment
from bench.controlplane.summary import summarize
from bench.controlplane.window_figures import cpu_delta, load_window, over
from tests.kit import tcp_balancer, workload
from tests.kit.workload import build_world
from webhook.core.layerlabels import LabelRule, layer_label, node_layer_labels, short_id
from webhook.core.layers import ImageLayers, Layer, PlatformLayers


def _histogram(name: str, labels: dict[str, str], buckets: dict[float, float], total_sum: float,
               ) -> dict[SampleKey, float]:
    out: dict[SampleKey, float] = {}
    for bound, count in buckets.items():
        key = tuple(sorted({**labels, "le": "+Inf" if math.isinf(bound) else str(bound)}.items()))
        out[(f"{name}_bucket", key)] = count
    plain = tuple(sorted(labels.items()))
    out[(f"{name}_sum", plain)] = total_sum
    out[(f"{name}_count", plain)] = buckets[math.inf]
    return out


def test_a_histogram_delta_gives_the_share_within_a_bound_and_the_mean() -> None:
    name = "apiserver_admission_webhook_admission_duration_seconds"
    ours = {"name": "pods.layer-locality.io", "operation": "CREATE"}
    before = _histogram(name, ours, {0.005: 10, 0.025: 10, math.inf: 10}, 0.02)
    after = _histogram(name, ours, {0.005: 90, 0.025: 105, math.inf: 110}, 0.52)
    # Another webhook's calls in the same family are not ours.
    after |= _histogram(name, {"name": "other.example.com", "operation": "CREATE"},
                        {0.005: 0, 0.025: 0, math.inf: 50}, 99.0)
    h = hist(delta(after, before), name, name="*layer-locality*", operation="CREATE")
    assert h.count == 100
    assert h.share_within(0.005) == 0.8
    assert h.share_within(0.025) == 0.95
    assert math.isclose(h.sum / h.count, 0.005)
    median = h.quantile(0.5)
    assert median is not None and median <= 0.005


def test_counters_sum_and_split_by_a_label() -> None:
    samples: dict[SampleKey, float] = {("apiserver_flowcontrol_dispatched_requests_total",
                (("flow_schema", "ll-agent"), ("priority_level", "workload-low"))): 30.0,
               ("apiserver_flowcontrol_dispatched_requests_total",
                (("flow_schema", "exempt"), ("priority_level", "exempt"))): 5.0,
               ("apiserver_flowcontrol_dispatched_requests_total",
                (("flow_schema", "ll-agent"), ("priority_level", "other"))): 2.0}
    assert by_label(samples, "apiserver_flowcontrol_dispatched_requests_total",
                    "flow_schema") == {"ll-agent": 32.0, "exempt": 5.0}
    assert total(samples, "apiserver_flowcontrol_dispatched_requests_total",
                 priority_level="workload-low") == 30.0


def test_cpu_of_a_restarted_process_counts_from_zero() -> None:
    before = {"kube-apiserver@10": 100.0, "webhook-0@20": 50.0, "machine": 1.0}
    after = {"kube-apiserver@10": 130.0, "webhook-0@21": 4.0, "machine": 9.0}
    assert cpu_delta(before, after) == {"kube-apiserver": 30.0, "webhook-0": 4.0}


def test_a_baked_deployment_carries_the_terms_and_decision_in_its_template() -> None:
    body = deployment(build_world(app_images=20), 3, 10)
    terms = [{"weight": 90, "preference": {"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1", "n2"]}]}}]
    bake(body, terms, '{"v":3}')
    template = body["spec"]["template"]
    assert template["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"] == terms
    assert template["metadata"]["annotations"] == {"layer-locality.io/decision": '{"v":3}'}
    assert [c["name"] for c in template["spec"]["containers"]] == ["app", "sidecar"]


def test_ratios_pair_each_round_with_its_own_stock_round() -> None:
    rounds = [{"mode": "stock", "pods_per_second": 16.0, "pod_watch_bytes": 100.0},
              {"mode": "opted-in", "pods_per_second": 16.0, "pod_watch_bytes": 240.0},
              {"mode": "stock", "pods_per_second": 20.0, "pod_watch_bytes": 100.0},
              {"mode": "opted-in", "pods_per_second": 18.0, "pod_watch_bytes": 250.0}]
    figures = summarize({"rounds": rounds})
    assert figures["throughput_ratio"] == [1.0, 0.9]
    assert figures["pod_watch_bytes_ratio"] == [2.4, 2.5]
    met = {t["target"]: t["met"] for t in figures["targets"]}
    assert met["opted-in pods/s >= 0.95x stock"] is False  # 0.9 in the second round
    assert met["pod watch bytes <= 1.3x stock"] is False


async def test_the_balancer_passes_bytes_both_ways_and_counts_connections(
        monkeypatch: pytest.MonkeyPatch) -> None:
    connect = tcp_balancer._Client._connect

    async def late(self: tcp_balancer._Client, port: int) -> None:
        await asyncio.sleep(0.1)  # the client's bytes and half-close arrive before upstream
        await connect(self, port)

    monkeypatch.setattr(tcp_balancer._Client, "_connect", late)

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data[::-1])
            await writer.drain()
        writer.close()

    backends = [await asyncio.start_server(echo, "127.0.0.1", 0) for _ in range(2)]
    ports = [s.sockets[0].getsockname()[1] for s in backends]
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    serving = asyncio.create_task(tcp_balancer.serve(port, ports))
    payload = bytes(range(256)) * 1000  # larger than one read

    async def exchange(first: int) -> bytes:
        """Send `first` bytes and wait for their echo, then the rest and a half-close at
        once; everything echoed comes back (0: the half-close reaches the balancer before
        its upstream connection exists)."""
        for _ in range(100):
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.02)
        writer.write(payload[:first])
        got = await reader.readexactly(first) if first else b""
        writer.write(payload[first:])
        writer.write_eof()
        while chunk := await asyncio.wait_for(reader.read(65536), 10):
            got += chunk
        writer.close()
        return got

    for first in (256, 0):
        got = await exchange(first)
        assert len(got) == len(payload)
        assert sorted(got) == sorted(payload)  # every byte through, none added
    signal.raise_signal(signal.SIGTERM)  # serve() stops on it and returns its counts
    counts = await asyncio.wait_for(serving, 5)
    assert sum(counts) == 2
    for server in backends:
        server.close()


# -- the stand-in agents ----------------------------------------------------------------------

def test_renewals_cover_every_agent_once_a_period_evenly_spaced() -> None:
    agents, period = 7, 60.0
    slots = [standin_renewer.renewal_slot(j, agents, period) for j in range(3 * agents)]
    assert sorted(k for k, _ in slots[:agents]) == list(range(agents))
    gaps = {round(b - a, 9) for (_, a), (_, b) in itertools.pairwise(slots)}
    assert gaps == {round(period / agents, 9)}  # the rate: agents / period, evenly
    for k in range(agents):
        times = [at for who, at in slots if who == k]
        assert [round(b - a, 9) for a, b in itertools.pairwise(times)] == [period] * 2


def test_an_idle_window_leaves_every_lease_current() -> None:
    # Renewed every 60 s, a 180 s Lease is at most 60 s old when the renewals are held.
    assert idle_seconds(60, 180) == 60
    assert idle_seconds(300, 180) == 180 - 60 - 20
    assert idle_seconds(300, 15) >= 1


def _node(world: workload.World, images: list[Any]) -> standin_agents.StandIn:
    layers = standin_agents.image_layers(images)
    return standin_agents.StandIn("n", "uid", layers,
                                  {"kubernetes.io/hostname": "n"} | node_layer_labels(layers))


def test_a_pulled_image_adds_the_labels_of_its_large_new_layers_only() -> None:
    world = build_world(app_images=50)
    agent = _node(world, [world.bases[0]])
    image = next(a for a in world.apps
                 if standin_agents.churn_step(agent.layers, agent.labels, a)[1])
    after, changes = standin_agents.churn_step(agent.layers, agent.labels, image)
    new = {d: s for d, s in standin_agents.image_layers([image]).items()
           if d not in agent.layers}
    assert set(after) == set(agent.layers) | set(new)
    rule = LabelRule()
    assert changes == {layer_label(d): str(-(-s // 2**20)) for d, s in new.items()
                       if s >= rule.min_bytes}
    assert "kubernetes.io/hostname" not in changes  # only the agent's own keys
    # The image already held changes nothing: no write.
    held = {k: v for k, v in (agent.labels | changes).items() if v is not None}
    assert standin_agents.churn_step(after, held, image)[1] == {}


def _image(ref: str, sizes_mib: Sequence[int]) -> ImageLayers:
    layers = tuple(Layer(workload.sha(f"{ref} {k}"), size << 20)
                   for k, size in enumerate(sizes_mib))
    return ImageLayers(ref=ref, digest=workload.sha(ref), platforms={
        workload.AMD64: PlatformLayers(workload.sha(f"manifest {ref}"), layers)})


def test_at_the_label_cap_a_larger_layer_replaces_the_smallest() -> None:
    rule = LabelRule(max_labels=2)
    held = _image("r.example/held:1", [40, 30, 20])
    layers = standin_agents.image_layers([held])
    labels = {"kubernetes.io/hostname": "n"} | node_layer_labels(layers, rule)
    pulled = _image("r.example/pulled:1", [50, 10])
    after, changes = standin_agents.churn_step(layers, labels, pulled, rule)
    d = {size >> 20: digest for digest, size in after.items()}
    assert changes == {layer_label(d[50]): "50", layer_label(d[30]): None}
    # A pulled image of small layers only changes nothing.
    assert standin_agents.churn_step(layers, labels, _image("r.example/small:1", [15]),
                                     rule)[1] == {}


def test_a_churn_plan_changes_distinct_nodes_labels() -> None:
    world = build_world(app_images=50)
    rng = random.Random(1)
    agents = [_node(world, rng.sample(world.images, 5)) for _ in range(30)]
    for k, agent in enumerate(agents):
        agent.name = f"n{k}"
    plan = standin_agents.churn_plan(agents, world.apps, 10)
    assert len(plan) == 10
    assert len({k for k, _ in plan}) == 10
    assert all(standin_agents.churn_step(agents[k].layers, agents[k].labels, image)[1]
               for k, image in plan)
    assert standin_agents.churn_plan(agents, world.apps, 10) == plan  # seeded


# -- placement ----------------------------------------------------------------------------------

def _label_term(digest: str, weight: int, not_in: tuple[str, ...] = ()) -> dict[str, Any]:
    expressions: list[dict[str, Any]] = [{"key": f"layer-locality.io/l.{short_id(digest)}",
                                          "operator": "Exists"}]
    if not_in:
        expressions.append({"key": "kubernetes.io/hostname", "operator": "NotIn",
                            "values": list(not_in)})
    return {"weight": weight, "preference": {"matchExpressions": expressions}}


def _host_term(names: list[str], weight: int) -> dict[str, Any]:
    return {"weight": weight, "preference": {"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": names}]}}


def _baseline(weight: int) -> dict[str, Any]:
    return {"weight": weight, "preference": {"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "Exists"}]}}


def _pod(images: list[str], node: str, terms: list[dict[str, Any]] | None = None,
         top: Sequence[str] = ()) -> dict[str, Any]:
    body = workload.pod("p-1", images)
    body["spec"]["nodeName"] = node
    if terms is not None:
        body["spec"]["affinity"] = {"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": terms}}
        body["metadata"]["annotations"] = {"layer-locality.io/decision": orjson.dumps(
            {"v": 4, "podBytes": 1, "terms": len(terms),
             "top": [{"node": n, "bytes": 1} for n in top]}).decode()}
    return body


def test_placement_judges_label_terms_as_the_telemetry_and_bytes_against_candidates() -> None:
    world = build_world(app_images=50)
    app = next(a for a in world.apps if a.platforms[workload.AMD64].layers[-1].size > 20 << 20)
    base = next(b for b in world.bases
                if not {x.digest for x in b.platforms[workload.AMD64].layers}
                & {x.digest for x in app.platforms[workload.AMD64].layers})
    own = app.platforms[workload.AMD64].layers[-1]  # the app's own large layer
    # Nodes 0-3 hold the app; 1 also the sidecar's base (the most bytes); 3 holds
    # everything but is tainted (i % 50 == 7 in tests/kit/workload: index 7), so no candidate.
    holdings = {0: [app], 1: [app, base], 2: [base], 7: [app, base]}
    items = {i: workload.node_object(i, imgs) for i, imgs in holdings.items()}
    by_ref = {image.ref: image for image in world.images}
    labels = {items[i]["metadata"]["name"]: items[i]["metadata"]["labels"] | node_layer_labels(
        standin_agents.image_layers(imgs)) for i, imgs in holdings.items()}
    views = cp_placement.node_views(items.values(), by_ref, labels)
    assert not views[workload.node_name(7)].candidate([])
    refs = [app.ref, workload.short_ref(base.ref)]
    n = {i: workload.node_name(i) for i in holdings}
    terms = [_label_term(own.digest, 60, not_in=(n[1],)), _host_term([n[1]], 60), _baseline(40)]
    pods = [_pod(refs, n[0], terms), _pod(refs, n[1], terms, top=[n[1]]),
            _pod(refs, n[2], terms), _pod(refs, n[1])]  # the last: stock
    placed = cp_placement.judge(pods, views, world.catalog)
    assert [p.outcome.value if p.outcome else None for p in placed] == [
        "top", "top", "other", None]
    assert [p.steered for p in placed] == [True, True, True, False]
    bytes_app = sum(x.size for x in app.platforms[workload.AMD64].layers)
    bytes_base = sum(x.size for x in base.platforms[workload.AMD64].layers)
    assert placed[0].best == bytes_app + bytes_base  # node 1's; node 7 holds as much, tainted
    assert [p.present for p in placed] == [bytes_app, bytes_app + bytes_base, bytes_base,
                                           bytes_app + bytes_base]
    figures = cp_placement.summary(placed, len(pods))
    assert figures["outcomes"] == {"top": 2, "preferred": 0, "other": 1}
    assert figures["top_share"] == 2 / 3
    assert figures["terms"] == {"label_only": 0, "hostname_only": 0, "both": 3}
    assert figures["on_named_node"] == 1 and figures["on_decision_top"] == 1
    assert figures["on_most_bytes_node"] == 2  # the stock pod and the steered one on node 1
    assert figures["present_ratio_mean"] == (
        bytes_app / (bytes_app + bytes_base) + 1 + bytes_base / (bytes_app + bytes_base) + 1) / 4
    added = [len(orjson.dumps(terms)) + len(pod["metadata"]["annotations"][
        "layer-locality.io/decision"]) for pod in pods[:3]]
    assert figures["added_bytes_mean"] == sum(added) / 3


def test_hostname_only_terms_keep_the_levels_rule() -> None:
    world = build_world(app_images=50)
    app = world.apps[0]
    items = {i: workload.node_object(i, [app] if i < 2 else []) for i in range(3)}
    views = cp_placement.node_views(items.values(), {a.ref: a for a in world.images}, {})
    n = [workload.node_name(i) for i in range(3)]
    terms = [_host_term([n[0]], 80), _host_term([n[1]], 30), _baseline(20)]
    placed = cp_placement.judge([_pod([app.ref], n[1], terms)], views, world.catalog)
    assert placed[0].outcome is not None and placed[0].outcome.value == "preferred"
    assert placed[0].hostname_terms == 2 and placed[0].label_terms == 0
    assert placed[0].named and placed[0].ratio == 1.0  # node 1 holds as much as node 0


# -- load windows and the summary ------------------------------------------------------------

def test_a_window_over_idle_is_cores_per_second_of_each() -> None:
    cpu0 = {"kube-apiserver@1": 10.0, "etcd@2": 5.0, "machine": 0.0}
    idle = load_window({}, 60.0, cpu0, {"kube-apiserver@1": 13.0, "etcd@2": 5.6,
                                        "machine": 1.0})
    steady = load_window({("apiserver_request_total", (("resource", "leases"),
                                                       ("verb", "PUT"))): 1000.0},
                         30.0, cpu0, {"kube-apiserver@1": 12.5, "etcd@2": 5.6, "machine": 1.0})
    assert steady["requests_per_second_by_resource_verb"] == {"leases PUT": 1000 / 30}
    cores = over(steady, idle)
    assert math.isclose(cores["kube-apiserver"], 2.5 / 30 - 3 / 60)
    assert math.isclose(cores["etcd"], 0.6 / 30 - 0.6 / 60)


def test_the_summary_judges_placement_pod_create_and_the_leases() -> None:
    rounds = [{"mode": "stock", "pod_create_ms": {"mean": 3.0}},
              {"mode": "opted-in", "pod_create_ms": {"mean": 4.5},
               "placement": {"top_share": 0.97}},
              {"mode": "stock", "pod_create_ms": {"mean": 3.0}},
              {"mode": "opted-in", "pod_create_ms": {"mean": 5.5},
               "placement": {"top_share": 0.94}}]
    load = {"steady": {"over_idle_cores": {"kube-apiserver": 0.03},
                       "lease_writes_per_second": 83.3}}
    figures = summarize({"rounds": rounds, "api_load": load, "settings": {"agent": True}})
    assert figures["pod_create_mean_over_stock_ms"] == [1.5, 2.5]
    assert figures["top_share"] == [0.97, 0.94]
    met = {t["target"]: t["met"] for t in figures["targets"]}
    assert met["steered pod-create mean <= stock + 2 ms"] is False
    assert met[">= 95 % of steered pods on a top-weight node"] is False
    assert met["agent Leases <= 0.05 of an API-server core"] is True
    without = summarize({"rounds": rounds, "api_load": load, "settings": {"agent": False}})
    assert not any("Leases" in t["target"] for t in without["targets"])
