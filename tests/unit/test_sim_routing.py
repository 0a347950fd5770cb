"""Which webhook replica reviews each pod in the simulator, and what the replicas see of each
other: by connection (the API server's kept-alive connections, each pinned to a replica), all
to one, in turn, at random, or as a replayed run's decisions say; stored pods reach every
replica's spread tracker through the delayed watch."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.unit.test_sim_watch import APP
from webhook.core.spread import guard_limit
from webhook.registry.catalog import StaticCatalog
from webhook.sim.creation import CreationConfig
from webhook.sim.engine import SimConfig, run
from webhook.sim.policies import Router
from webhook.sim.view import ViewConfig
from webhook.sim.watch import SimWatch, StoredPod
from webhook.sim.workload import NodeSpec, PodSpec, Trace


def routes(router: Router, moments: list[float]) -> list[int]:
    return [router.route(now) for now in moments]


def test_by_connection_a_lone_review_takes_the_first_connection() -> None:
    """Steady arrivals: one connection carries every review, so one replica gets them all."""
    for seed in range(20):
        router = Router(2, "connection", 4, seed)
        chosen = routes(router, [float(t) for t in range(30)])
        assert len(set(chosen)) == 1 and router.per_connection == [30]


def test_by_connection_reviews_at_one_moment_spread_over_connections_pinned_at_random() -> None:
    router = Router(2, "connection", 3, seed=5)
    batch = routes(router, [1.0] * 7)  # seven concurrent reviews: connections 0,1,2,0,1,2,0
    assert router.per_connection == [3, 2, 2]
    assert batch == [router.pinned[k % 3] for k in range(7)]
    later = routes(router, [2.0, 2.0])  # the next batch reuses the same connections
    assert later == router.pinned[:2] and router.per_connection == [4, 3, 2]
    assert sum(router.reviews) == 9
    # Pinned at random: over seeds, both replicas get connections.
    pinned = Counter(r for seed in range(20)
                     for r in (lambda x: (routes(x, [0.0] * 3), x.pinned)[1])(
                         Router(2, "connection", 3, seed)))
    assert set(pinned) == {0, 1}


def test_one_even_random_and_observed_routing() -> None:
    assert routes(Router(3, "one", 2, 0), [0.0, 0.0, 1.0]) == [0, 0, 0]
    assert routes(Router(3, "even", 2, 0), [0.0, 0.0, 1.0, 2.0]) == [0, 1, 2, 0]
    randomly = Router(2, "random", 2, 0)
    assert set(routes(randomly, [float(t) for t in range(40)])) == {0, 1}
    observed = Router(2, "connection", 2, 0)
    assert [observed.observed(r) for r in (1, 0, 3)] == [1, 0, 1]
    assert observed.reviews == [1, 2]
    with pytest.raises(ValueError, match="unknown routing"):
        Router(2, "sticky", 2, 0)


class Stored:
    def __init__(self) -> None:
        self.pods: list[str] = []

    def node(self, obj: object) -> None: ...

    def bound(self, pod: object) -> None: ...

    def gone(self, uid: str) -> None: ...

    def stored(self, pod: StoredPod) -> None:
        self.pods.append(pod.uid)


def test_stored_pods_reach_only_the_listeners_that_read_them_after_the_delay() -> None:
    watch = SimWatch(delay=0.5)
    reader = Stored()
    watch.subscribe(reader)
    watch.pod_stored(1.0, StoredPod("u1", "rs", {}))
    assert watch.advance(1.4) == 0 and reader.pods == []
    assert watch.advance(1.5) == 1 and reader.pods == ["u1"]


def cold_burst(pods: int) -> Trace:
    return Trace(nodes=tuple(NodeSpec(name=f"n{i}", bandwidth=50 << 20) for i in range(12)),
                 pods=tuple(PodSpec(name=f"web-{k}", workload="web", arrival=0.0,
                                    images=(APP.ref,), duration=10_000.0) for k in range(pods)),
                 images=(APP,))


@pytest.mark.parametrize("routing", ["one", "even", "random"])
def test_replicas_that_see_each_others_stored_pods_fill_nodes_as_one_replica(
        routing: str) -> None:
    """A cold burst of 16 replicas in slow-start batches, two webhook replicas: however the
    reviews split, each replica sees the other's stored pods one watch delay later (shorter
    than a batch), so the burst pulls on few nodes, within maxSkew. One replica alone counts
    every pending pod where its decision put it and fills nodes to maxSkew (16 / 3: 6
    nodes); two keep the guard's headroom while the other's reviews of a batch are unseen
    (16 / 2: at most 8)."""
    def pulled_nodes(view: ViewConfig) -> tuple[int, int]:
        config = SimConfig(seed=3, view=view,
                           creation=CreationConfig(bursts=True, step_seconds=0.05))
        result = run(cold_burst(16), "webhook", StaticCatalog([APP]), config)
        return len(set(result.placements.values())), result.max_heat

    alone = pulled_nodes(ViewConfig(watch_delay=0.01, registry_delay=0.0, replicas=1))
    split = pulled_nodes(ViewConfig(watch_delay=0.01, registry_delay=0.0, replicas=2,
                                    routing=routing))
    assert split[1] <= 3 and alone[1] <= 3
    assert alone[0] == -(-16 // guard_limit(3, unconfirmed=False))
    assert split[0] <= 16 // guard_limit(3, unconfirmed=True)
