"""A scenario as the simulator replays it before any run (webhook/evaluation/planned.py): pods
at the times the actions create them, a rollout a step at a time, deletions ending pods; and
the small-cluster sweep over it (smallsweep.py) on one seed."""

from __future__ import annotations

from collections import Counter

from webhook.evaluation.planned import OPEN_END, planned_trace
from webhook.evaluation.scenario import Action, Scenario
from webhook.evaluation.smallsweep import sweep_one
from webhook.serving.wiring import demo_catalog
from webhook.sim.workload import NodeSpec

PY = "docker.io/library/python:3.11-slim"
NODE = "docker.io/library/node:18-slim"


def scenario(*actions: Action) -> Scenario:
    return Scenario("bursts", 1, (NodeSpec(name="n1"), NodeSpec(name="n2")), actions, ())


def test_creates_scales_rollouts_and_deletes() -> None:
    trace = planned_trace(scenario(
        Action(0.0, "create", "web", replicas=4, image=PY),
        Action(10.0, "scale", "web", replicas=6),
        Action(20.0, "update", "web", image=NODE),
        Action(0.0, "create", "db", replicas=2, image=NODE),
        Action(30.0, "delete", "db"),
        Action(40.0, "scale", "web", replicas=5),
    ), rollout_step=5.0)
    by = Counter(p.workload for p in trace.pods)
    assert by == {"web-v1": 6, "web-v2": 6, "db-v1": 2}
    assert [p.arrival for p in trace.pods] == sorted(p.arrival for p in trace.pods)
    v1 = [p for p in trace.pods if p.workload == "web-v1"]
    v2 = [p for p in trace.pods if p.workload == "web-v2"]
    assert [p.arrival for p in v1] == [0.0] * 4 + [10.0] * 2
    # 6 replicas: 25 % surge (2) + 25 % unavailable (1) = 3 a step, 5 s apart.
    assert [p.arrival for p in v2] == [20.0] * 3 + [25.0] * 3
    assert sorted(p.arrival + p.duration for p in v1) == [25.0] * 3 + [30.0] * 3
    assert all(p.images == (NODE,) for p in v2)
    assert [p.arrival + p.duration for p in trace.pods if p.workload == "db-v1"] == [30.0] * 2
    # Scaled down to 5 at 40 s: the last v2 pod ends then, the rest run on.
    assert sorted(p.duration for p in v2)[-1] == OPEN_END
    assert sum(1 for p in v2 if p.arrival + p.duration == 40.0) == 1


def test_the_sweep_compares_the_webhook_with_stock_and_the_oracle() -> None:
    result = sweep_one("bursts", 4, 3, demo_catalog(), sim_seeds=1)
    assert min(result.stock, result.webhook, result.oracle) > 0
    if result.stock > result.oracle:
        assert result.share == (result.stock - result.webhook) / (result.stock - result.oracle)
    assert 1 <= result.heat <= 3  # the spread guard's promise: never above maxSkew
