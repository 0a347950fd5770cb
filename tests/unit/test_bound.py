"""The offline optimum (webhook/evaluation/bound.py) on hand-made traces whose optimum is known
by hand, and never worse than the greedy oracle on the sweep's own scenarios."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.helpers import AMD64, image
from webhook.core.scoring import MiB
from webhook.evaluation.bound import _pulled, solve
from webhook.evaluation.smallsweep import scenario_trace
from webhook.registry.catalog import StaticCatalog
from webhook.serving.wiring import demo_catalog
from webhook.sim.engine import SimConfig, book_for, run
from webhook.sim.workload import NodeSpec, PodSpec, Trace

pytest.importorskip("highspy")

BASE = image("registry.example.com/base:1", {AMD64: [("base", 200 * MiB)]})
APP = image("registry.example.com/app:1", {AMD64: [("base", 200 * MiB), ("app", 50 * MiB)]})
OTHER = image("registry.example.com/other:1", {AMD64: [("other", 300 * MiB)]})
CATALOG = StaticCatalog([BASE, APP, OTHER])


def pods(workload: str, ref: str, count: int, at: float = 0.0, cpu: int = 100,
         duration: float = 1e9) -> tuple[PodSpec, ...]:
    return tuple(PodSpec(f"{workload}-{at}-{k}", workload, at, (ref,), cpu_milli=cpu,
                         duration=duration) for k in range(count))


def solved(nodes: tuple[NodeSpec, ...], *groups: tuple[PodSpec, ...]) -> tuple[int, Counter[str]]:
    trace = Trace(nodes=nodes, pods=tuple(sorted((p for g in groups for p in g),
                                                 key=lambda p: p.arrival)))
    bound = solve(trace, book_for(trace, CATALOG), time_limit=30)
    assert bound.optimal and bound.lower == bound.bytes_pulled
    return bound.bytes_pulled, Counter(bound.placements.values())


def test_three_replicas_fit_on_the_holder_and_pull_nothing() -> None:
    pulled, where = solved((NodeSpec("holder", images=(APP.ref,)), NodeSpec("empty")),
                           pods("web", APP.ref, 3))
    assert (pulled, where) == (0, Counter({"holder": 3}))


def test_the_fourth_replica_must_go_elsewhere_and_pulls_once_on_the_best_other_node() -> None:
    """maxSkew 3 on hostname: four replicas cannot all sit on the holder while a node holds
    none; the optimum sends one to the node holding the base (50 MiB), not the empty one."""
    pulled, where = solved((NodeSpec("holder", images=(APP.ref,)),
                            NodeSpec("base", images=(BASE.ref,)), NodeSpec("empty")),
                           pods("web", APP.ref, 4))
    assert pulled == 50 * MiB
    assert where["holder"] == 3 and where["base"] == 1


def test_seven_replicas_on_two_nodes_keep_within_the_skew() -> None:
    """Two nodes, seven replicas: 4/3 is within maxSkew at every step (fill the emptier
    first); the base node pulls the app layer once."""
    pulled, where = solved((NodeSpec("holder", images=(APP.ref,)),
                            NodeSpec("base", images=(BASE.ref,))),
                           pods("web", APP.ref, 7))
    assert pulled == 50 * MiB
    assert sorted(where.values()) in ([3, 4], [2, 5], [1, 6])
    assert max(where.values()) - min(where.values()) <= 3


def test_a_full_node_sends_pods_to_one_that_pulls() -> None:
    """The holder has room for one pod's cpu: the others go where the base is (it pulls the
    app layer once), not to the empty node (the whole image)."""
    pulled, where = solved((NodeSpec("holder", cpu_milli=1000, images=(APP.ref,)),
                            NodeSpec("base", images=(BASE.ref,)), NodeSpec("empty")),
                           pods("web", APP.ref, 3, cpu=600))
    assert pulled == 50 * MiB
    assert where["holder"] <= 1 and where["empty"] == 0


def test_pods_that_ended_free_their_place() -> None:
    """The first three end before the next three arrive: all six on the holder."""
    pulled, where = solved((NodeSpec("holder", images=(APP.ref,)), NodeSpec("empty")),
                           pods("web", APP.ref, 3, at=0.0, duration=5.0),
                           pods("web", APP.ref, 3, at=10.0))
    assert (pulled, where) == (0, Counter({"holder": 6}))


def test_two_workloads_share_what_one_pulled() -> None:
    """A node pulls OTHER once for two workloads' pods (bare pods: no spreading)."""
    a = tuple(PodSpec(f"a-{k}", "a", 0.0, (OTHER.ref,), kind="Pod") for k in range(2))
    b = tuple(PodSpec(f"b-{k}", "b", 1.0, (OTHER.ref,), kind="Pod") for k in range(2))
    pulled, where = solved((NodeSpec("n1"), NodeSpec("n2")), a, b)
    assert pulled == 300 * MiB and len(where) == 1


@pytest.mark.parametrize(("kind", "nodes", "seed"), [("bursts", 3, 32), ("bursts", 4, 21),
                                                     ("steady", 4, 15), ("bursts", 6, 3)])
def test_never_worse_than_the_greedy_oracle(kind: str, nodes: int, seed: int) -> None:
    """Started from the oracle's placement, the bound never pulls more than it (both counted
    the same static way), and what it proves is no more than what it found."""
    catalog = demo_catalog()
    trace = scenario_trace(kind, nodes, seed, catalog)
    book = book_for(trace, catalog)
    oracle = run(trace, "oracle", catalog, SimConfig(seed=seed), book)
    bound = solve(trace, book, time_limit=20, start=oracle.placements)
    assert bound.lower <= bound.bytes_pulled <= _pulled(trace, book, oracle.placements)
    assert bound.violations == 0
