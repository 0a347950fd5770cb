"""The oracle keeps both system default spreading constraints (hostname maxSkew 3, zone
maxSkew 5), with skews computed as kube-scheduler's PodTopologySpread filter does."""

from __future__ import annotations

import pytest

from tests.helpers import image
from webhook.core.layers import Platform
from webhook.registry.catalog import StaticCatalog
from webhook.sim.creation import admission_object, created_object, owner_uid
from webhook.sim.oracle import BytesPolicy, spread_excess
from webhook.sim.scheduler import PodView
from webhook.sim.workload import NodeSpec, PodSpec
from webhook.sim.world import ImageBook, World

MiB = 1 << 20
AMD64 = Platform.parse("linux/amd64")
BIG = image("docker.io/library/big:1", {AMD64: [("big", 400 * MiB)]})
SPEC = PodSpec(name="w-9", workload="w", arrival=0.0, images=(BIG.ref,), cpu_milli=1000)
OWNER = owner_uid(SPEC)


def world(counts: dict[str, int], full: tuple[str, ...] = ()) -> World:
    """a1, a2 in zone-a; b1, b2 in zone-b; only a2 holds the pod's image; `counts` are the
    owner's pods per node; `full` nodes have no cpu left."""
    specs = [NodeSpec(name=n, zone=f"zone-{n[0]}", cpu_milli=500 if n in full else 8000,
                      images=(BIG.ref,) if n == "a2" else ()) for n in ("a1", "a2", "b1", "b2")]
    w = World(specs, ImageBook(StaticCatalog([BIG])))
    assert OWNER is not None
    for name, count in counts.items():
        w.nodes[name].owner_counts[OWNER] = count
    return w


def view(spec: PodSpec = SPEC) -> PodView:
    layers = {AMD64: {x.digest: x.size for x in BIG.platforms[AMD64].layers}}
    return PodView.of(created_object(admission_object(spec), spec), layers)


def oracle_picks(w: World, pod: PodView | None = None) -> set[str]:
    picks = set()
    for seed in range(8):
        node = BytesPolicy(w, seed, keep_spread=True).schedule(pod or view(), 0.0).node
        assert node is not None
        picks.add(node)
    return picks


def test_zone_skew_over_five_keeps_the_pod_off_the_node_with_its_bytes() -> None:
    # zone-a holds 5 of the owner's pods, zone-b none: on a2, zone skew 5 + 1 - 0 = 6 > 5,
    # while the hostname skew 2 + 1 - 0 = 3 is allowed.
    w = world({"a1": 3, "a2": 2})
    assert spread_excess(w, view(), str(OWNER), [w.nodes["a2"], w.nodes["b1"]]) == [(0, 1),
                                                                                     (0, 0)]
    assert oracle_picks(w) <= {"b1", "b2"}
    # greedy ignores spreading: the bytes win
    assert BytesPolicy(w, 0, keep_spread=False).schedule(view(), 0.0).node == "a2"


def test_zone_skew_of_five_is_allowed() -> None:
    w = world({"a1": 2, "a2": 2})  # zone-a 4: on a2 the zone skew is 4 + 1 - 0 = 5
    assert oracle_picks(w) == {"a2"}


def test_hostname_skew_over_three_is_enforced() -> None:
    w = world({"a2": 3, "b1": 1})  # on a2: 3 + 1 - 0 = 4 > 3 (zone skew 3 + 1 - 1 = 3)
    assert "a2" not in oracle_picks(w)
    w = world({"a2": 2})
    assert oracle_picks(w) == {"a2"}


def test_skew_counts_only_nodes_the_pod_may_run_on() -> None:
    """With a nodeSelector for zone-a, zone-b is not a domain and b-nodes do not lower the
    minimum: on a2 the hostname skew is 2 + 1 - 2 = 1 and the zone skew 1."""
    spec = PodSpec(name="w-9", workload="w", arrival=0.0, images=(BIG.ref,), cpu_milli=1000,
                   node_selector={"topology.kubernetes.io/zone": "zone-a"})
    w = world({"a1": 3, "a2": 2})
    assert spread_excess(w, view(spec), str(OWNER), [w.nodes["a2"]]) == [(0, 0)]
    assert oracle_picks(w, view(spec)) == {"a2"}


@pytest.mark.parametrize("counts", [{"a1": 3, "a2": 2}, {"a2": 4}])
def test_when_no_node_keeps_the_limits_the_least_violating_one_is_used(
        counts: dict[str, int]) -> None:
    # Only a2 has room: the constraints are ScheduleAnyway, so the pod is placed regardless.
    w = world(counts, full=("a1", "b1", "b2"))
    assert oracle_picks(w) == {"a2"}
