"""The scheduler emulation against the kube-scheduler formulas (expectations are computed from
the formulas as the Go source states them, never from tuned constants)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.helpers import image, normalised_scores, weight_by_hostname
from webhook.core.layers import Platform
from webhook.core.objects import HOSTNAME_LABEL
from webhook.registry.catalog import StaticCatalog
from webhook.sim.creation import admission_object, created_object, owner_uid
from webhook.sim.formulas import (
    MAX_NODE_SCORE,
    balanced_score,
    default_normalize,
    image_locality_priority,
    least_requested_score,
    normalized_image_name,
    num_feasible_nodes_to_find,
    spread_normalize,
)
from webhook.sim.scheduler import PodView, Profile, Scheduler
from webhook.sim.workload import NodeSpec, PodSpec, TaintSpec
from webhook.sim.world import ZONE_LABEL, ImageBook, World

MiB = 1 << 20
AMD64 = Platform.parse("linux/amd64")
BIG = image("docker.io/library/big:1", {AMD64: [("big-a", 300 * MiB), ("big-b", 200 * MiB)]})
SMALL = image("docker.io/library/small:1", {AMD64: [("small", 5 * MiB)]})


def pod_object(spec: PodSpec) -> dict[str, Any]:
    return created_object(admission_object(spec), spec)


def world(specs: list[NodeSpec]) -> World:
    return World(specs, ImageBook(StaticCatalog([BIG, SMALL])))


def view(images: tuple[str, ...] = ("docker.io/library/big:1",), **extra: Any) -> PodView:
    spec = PodSpec(name="p", workload="w", arrival=0.0, images=images, **extra)
    return PodView.of(pod_object(spec))


@pytest.mark.parametrize("nodes", [1, 50, 99, 100, 101, 250, 500, 1000, 5000, 6000, 20000])
def test_num_feasible_nodes_to_find_adaptive(nodes: int) -> None:
    if nodes < 100:
        expected = nodes
    else:
        percentage = max(5, 50 - nodes // 125)
        expected = max(100, nodes * percentage // 100)
    assert num_feasible_nodes_to_find(nodes) == expected
    assert num_feasible_nodes_to_find(nodes, 100) == max(min(nodes, 100), nodes)


def test_adaptive_percentage_is_about_ten_percent_at_5000_nodes() -> None:
    assert num_feasible_nodes_to_find(5000) == 5000 * 10 // 100


def test_image_locality_priority_thresholds() -> None:
    assert image_locality_priority(0, 1) == 0
    assert image_locality_priority(23 * MiB, 1) == 0
    assert image_locality_priority(1000 * MiB, 1) == MAX_NODE_SCORE
    assert image_locality_priority(5000 * MiB, 1) == MAX_NODE_SCORE
    mid = 500 * MiB
    assert image_locality_priority(mid, 1) == 100 * (mid - 23 * MiB) // (977 * MiB)
    # the cap grows with the number of containers
    assert image_locality_priority(1000 * MiB, 2) == 100 * (977 * MiB) // (1977 * MiB)


def test_normalized_image_name() -> None:
    assert normalized_image_name("nginx") == "nginx:latest"
    assert normalized_image_name("localhost:5000/app") == "localhost:5000/app:latest"
    assert normalized_image_name("nginx:1.23") == "nginx:1.23"


def test_resource_scores() -> None:
    assert least_requested_score(2000, 8000) == (8000 - 2000) * 100 // 8000
    assert least_requested_score(9000, 8000) == 0
    assert balanced_score(0.5, 0.5) == 100
    assert balanced_score(0.2, 0.6) == int((1 - 0.2) * 100)
    assert balanced_score(1.5, 0.0) == 50  # fractions are capped at 1


def test_normalizers() -> None:
    assert default_normalize([0, 5, 10]) == [0, 50, 100]
    assert default_normalize([0, 0]) == [0, 0]
    assert default_normalize([0, 0], reverse=True) == [100, 100]
    assert default_normalize([1, 0], reverse=True) == [0, 100]
    assert spread_normalize([2, 4, 6]) == [100 * (6 + 2 - s) // 6 for s in (2, 4, 6)]
    assert spread_normalize([0, 0]) == [100, 100]


def test_image_locality_scales_by_share_of_nodes() -> None:
    specs = [NodeSpec(name=f"n{i}", images=("docker.io/library/big:1",) if i < 2 else ())
             for i in range(4)]
    w = world(specs)
    sched = Scheduler(w)
    nodes = list(w.nodes.values())
    scores = sched.plugin_scores(view(), nodes)["ImageLocality"]
    scaled = int(BIG.for_platform(AMD64).size * 2 / 4)  # type: ignore[union-attr]
    assert scores == [image_locality_priority(scaled, 1)] * 2 + [0, 0]


def test_layer_locality_credits_shared_layers_not_names() -> None:
    derived = image("docker.io/library/derived:1",
                    {AMD64: [("big-a", 300 * MiB), ("own", 10 * MiB)]})
    w = World([NodeSpec(name="a", images=("docker.io/library/big:1",)), NodeSpec(name="b")],
              ImageBook(StaticCatalog([BIG, derived])))
    spec = PodSpec(name="p", workload="w", arrival=0, images=("docker.io/library/derived:1",))
    d = derived.for_platform(AMD64)
    assert d is not None
    layers = {AMD64: {x.digest: x.size for x in d.layers}}
    pod = PodView.of(pod_object(spec), layers)
    nodes = list(w.nodes.values())
    stock = Scheduler(w).plugin_scores(pod, nodes)["ImageLocality"]
    layered = Scheduler(w, Profile(layer_locality=True)).plugin_scores(pod, nodes)
    assert stock == [0, 0]
    assert layered["ImageLocality"] == [image_locality_priority(300 * MiB, 1), 0]


def test_node_affinity_matches_the_helper_evaluation() -> None:
    w = world([NodeSpec(name=f"n{i}") for i in range(3)])
    pod = pod_object(PodSpec(name="p", workload="w", arrival=0, images=("x:1",)))
    pod["spec"]["affinity"] = {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 40, "preference": {"matchExpressions": [
                {"key": HOSTNAME_LABEL, "operator": "In", "values": ["n0"]}]}},
            {"weight": 60, "preference": {"matchExpressions": [
                {"key": HOSTNAME_LABEL, "operator": "Exists"}]}},
        ]}}
    nodes = list(w.nodes.values())
    got = Scheduler(w).plugin_scores(PodView.of(pod), nodes)["NodeAffinity"]
    expected = normalised_scores(weight_by_hostname(pod, [n.name for n in nodes]))
    assert got == [int(expected[n.name]) for n in nodes]


def test_default_spreading_for_replicaset_pods() -> None:
    specs = [NodeSpec(name=f"n{i}", zone=f"z{i % 2}") for i in range(4)]
    w = world(specs)
    uid = owner_uid(PodSpec(name="p", workload="w", arrival=0.0, images=()))
    assert uid is not None
    w.nodes["n0"].owner_counts[uid] = 2
    w.nodes["n1"].owner_counts[uid] = 1
    nodes = list(w.nodes.values())
    pod = view()
    assert pod.owner == pod.spread_owner == uid
    host_w, zone_w = math.log(4 + 2), math.log(2 + 2)
    zone_counts = {"z0": 2, "z1": 1}
    raw = [round(n.owner_counts.get(uid, 0) * host_w + 2
                 + zone_counts[n.labels[ZONE_LABEL]] * zone_w + 4) for n in nodes]
    got = Scheduler(w).plugin_scores(pod, nodes)["PodTopologySpread"]
    assert got == spread_normalize(raw)
    assert got[0] < got[2] and got[1] < got[3]


@pytest.mark.parametrize("kind", ["Pod", "Job"])
def test_jobs_and_bare_pods_get_no_default_spreading(kind: str) -> None:
    w = world([NodeSpec(name="a"), NodeSpec(name="b")])
    pod = view(kind=kind)
    assert pod.spread_owner is None
    # A Job's pods have a controller (the Job) but no default selector picks them.
    assert (pod.owner is not None) == (kind == "Job")
    w.nodes["a"].owner_counts[str(pod.owner)] = 3  # even if something counted them
    assert Scheduler(w).plugin_scores(pod, list(w.nodes.values()))["PodTopologySpread"] == [0, 0]


def test_filters() -> None:
    specs = [
        NodeSpec(name="full", cpu_milli=1000),
        NodeSpec(name="cordoned", unschedulable=True),
        NodeSpec(name="tainted", taints=(TaintSpec("gpu", "yes", "NoSchedule"),)),
        NodeSpec(name="soft", taints=(TaintSpec("spot", "", "PreferNoSchedule"),)),
        NodeSpec(name="ok"),
    ]
    w = world(specs)
    sched = Scheduler(w)
    pod = view(cpu_milli=2000)
    assert [n.name for n in sched.find_feasible(pod)] == ["soft", "ok"]
    tolerant = view(cpu_milli=2000, tolerations=({"key": "gpu", "operator": "Exists"},))
    assert {n.name for n in sched.find_feasible(tolerant)} == {"tainted", "soft", "ok"}
    scores = sched.plugin_scores(pod, [w.nodes["soft"], w.nodes["ok"]])["TaintToleration"]
    assert scores == [0, 100]
    selected = view(node_selector={HOSTNAME_LABEL: "ok"})
    assert [n.name for n in sched.find_feasible(selected)] == ["ok"]


def test_sampling_round_robin_over_zone_interleaved_nodes() -> None:
    specs = [NodeSpec(name=f"n{i:03d}", zone=f"z{i // 60}") for i in range(120)]
    w = world(specs)
    sched = Scheduler(w)
    assert [n.name for n in sched.order[:4]] == ["n000", "n060", "n001", "n061"]
    first = sched.find_feasible(view())
    assert len(first) == num_feasible_nodes_to_find(120) == 100
    assert sched.next_start == 100
    second = sched.find_feasible(view())
    assert second[0] is sched.order[100]
    assert sched.next_start == 80


def test_image_locality_priority_hand_computed() -> None:
    """Values worked out by hand from imagelocality's calculatePriority (MiB units):
    100 * (sum - 23) / (1000 * containers - 23), sums clamped to [23, 1000 * containers]."""
    assert image_locality_priority(250 * MiB, 1) == 23  # 100 * 227 / 977 = 23.2
    assert image_locality_priority(1000 * MiB, 2) == 49  # 100 * 977 / 1977 = 49.4
    assert image_locality_priority(1500 * MiB, 2) == 74  # 100 * 1477 / 1977 = 74.7
    assert image_locality_priority(24 * MiB, 1) == 0  # 100 * 1 / 977 = 0.1
