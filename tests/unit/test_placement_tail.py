"""A regression guard on placement's worst case (issue: every workload, not the mean): the
simulator's sweep of the real-node scenarios over a fixed set of the project's own seeds, the
webhook's share of the oracle's saving per seed, held to what the decision reaches today:
the issue's targets where it meets them (bursts p10 >= 90 % and every seed >= 80 %, steady
p10 >= 95 % and every seed >= 85 %), and where it does not, what it reaches, rounded down to
5 %: 8-node bursts all reviewed by one replica (the guard counts a pending pod on every node
weighed alike), and bursts that both replicas review at once (`connection`), where each
keeps to its quota of a node's places and leaves the other's free (the price of never
passing maxSkew whatever each has seen of the other's newest reviews: p10 from 0.93-0.95 to
0.85-0.89 over these seeds; docs/evaluation.md). No Deployment past maxSkew on a node, as the
simulator's watch shows every replica the same events at once; with replicas' watches late
by different amounts (`watch_jitter`) the guard can be passed at a Deployment's first
reviews (docs/how-it-works.md, "Several replicas"). A change that helps the mean and hurts
the tail fails here. (docs/evaluation.md has the full sweep: 40 seeds, 3 to 24 nodes, three
splits.)"""

from __future__ import annotations

import pytest

from webhook.evaluation.smallsweep import Tail, sweep_one
from webhook.serving.wiring import demo_catalog

SEEDS = range(1, 21)
TARGETS = {"bursts": (0.90, 0.80), "steady": (0.95, 0.85)}  # (p10, worst)
SHARED = (0.85, 0.80)  # bursts both replicas review at once: what place quotas reach


@pytest.mark.parametrize(("kind", "nodes", "routing", "floors"), [
    ("bursts", 3, "connection", SHARED),
    ("bursts", 6, "connection", SHARED),
    ("bursts", 12, "connection", SHARED),
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
    assert tail.heat <= 3 and tail.skew <= 3
