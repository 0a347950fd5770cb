"""A regression guard on placement's worst case (issue: every workload, not the mean): the
simulator's sweep of the real-node scenarios over a fixed set of the project's own seeds, the
webhook's share of the oracle's saving per seed, held to what the decision reaches today:
the issue's targets where it meets them (bursts p10 >= 90 % and every seed >= 80 %, steady
p10 >= 95 % and every seed >= 85 %), and where it does not (8-node bursts all reviewed by one
replica: the guard counts a pending pod on every node weighed alike), what it reaches,
rounded down to 5 %; and no Deployment past maxSkew on a node. A change that helps the mean
and hurts the tail fails here. (docs/evaluation.md has the full sweep: 40 seeds, 3 to 24
nodes, three splits.)"""

from __future__ import annotations

import pytest

from webhook.evaluation.smallsweep import Tail, sweep_one
from webhook.serving.wiring import demo_catalog

SEEDS = range(1, 21)
TARGETS = {"bursts": (0.90, 0.80), "steady": (0.95, 0.85)}  # (p10, worst)


@pytest.mark.parametrize(("kind", "nodes", "routing", "floors"), [
    ("bursts", 3, "connection", TARGETS["bursts"]),
    ("bursts", 6, "connection", TARGETS["bursts"]),
    ("bursts", 12, "connection", TARGETS["bursts"]),
    ("bursts", 8, "one", (0.85, 0.75)),
    ("steady", 4, "connection", TARGETS["steady"]),
    ("steady", 12, "connection", TARGETS["steady"])])
def test_the_tail_holds(kind: str, nodes: int, routing: str,
                        floors: tuple[float, float]) -> None:
    catalog = demo_catalog()
    rows = [sweep_one(kind, nodes, seed, catalog, sim_seeds=2, routing=routing)
            for seed in SEEDS]
    tail = Tail.of(rows)
    assert tail is not None
    p10, worst = floors
    shares = {r.seed: round(r.share, 3) for r in rows if r.share is not None}
    assert tail.p10 >= p10, shares
    assert tail.worst >= worst, shares
    assert tail.heat <= 3
