"""The simulator's webhook feeds the same outcome telemetry as live mode (binds from its pod
watch, kubelet `Pulled` events built from the world's pulls); its followed rate, present ratio
and pull times must equal what the simulator itself accounts (decisions from the reviews,
placements and bytes from the world). Small generated workloads (the suite stays fast)."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from webhook.serving.wiring import demo_catalog
from webhook.sim.engine import SimConfig, run
from webhook.sim.policies import WebhookPolicy
from webhook.sim.results import RunResult
from webhook.sim.view import ViewConfig
from webhook.sim.watch import SimWatch
from webhook.sim.workload import WorkloadConfig, generate
from webhook.sim.world import World, WorldConfig

SMALL = WorkloadConfig(seed=7, nodes=8, hours=0.5, workloads_per_hour=60)
# A view that lags nothing: every bind seen before the next review, every image known at
# once, in-flight entries kept until the status reports the image; no image GC (the world
# would drop layers the webhook only learns about at the next status update).
EXACT = SimConfig(seed=3, view=ViewConfig(watch_delay=0.0, registry_delay=0.0,
                                          inflight_seconds=1e9),
                  world=WorldConfig(gc=False))


def simulate(config: SimConfig, workload: WorkloadConfig = SMALL
             ) -> tuple[WebhookPolicy, RunResult]:
    base = demo_catalog()
    trace = generate(workload, base.images())
    made: list[WebhookPolicy] = []

    def factory(world: World, watch: SimWatch) -> WebhookPolicy:
        made.append(WebhookPolicy(world, watch, config.seed, config.scoring, view=config.view))
        return made[0]

    result = run(trace, factory, base, config)
    (policy,) = made
    policy.watch.advance(math.inf)  # the binds after the last review reach the listeners too
    return policy, result


def value(policy: WebhookPolicy, name: str, **labels: str) -> float:
    """The sum of the samples `name` whose labels include `labels` (others, such as the
    holdout's `group`, added up)."""
    return sum(sample.value for family in policy.telemetry_metrics.registry.collect()
               for sample in family.samples if sample.name == name
               and all(sample.labels.get(k) == v for k, v in labels.items()))


def binds(policy: WebhookPolicy) -> dict[str, int]:
    counts = {o: int(value(policy, "layer_locality_binds_total", outcome=o))
              for o in ("top", "preferred", "other")}
    return {o: n for o, n in counts.items() if n}


@pytest.mark.parametrize("seed", [1, 7])
def test_followed_rate_and_present_ratio_equal_the_simulators_accounting(seed: int) -> None:
    policy, result = simulate(EXACT, replace(SMALL, seed=seed))
    accounting = policy.accounting
    assert binds(policy) == dict(accounting.outcomes)
    total = sum(accounting.outcomes.values())
    assert total == result.patched > 10  # every patched pod was bound and counted once
    assert accounting.outcomes["top"] < total  # the scheduler does not always follow
    ratio = "layer_locality_bind_present_ratio"
    assert value(policy, f"{ratio}_count") == len(accounting.present_ratios) == total
    assert value(policy, f"{ratio}_sum") == pytest.approx(sum(accounting.present_ratios))
    assert 0 < sum(accounting.present_ratios) < total
    for le in ("0.0", "0.5", "0.9", "1.0"):
        expected = sum(1 for r in accounting.present_ratios if r <= float(le))
        assert value(policy, f"{ratio}_bucket", le=le) == expected, le


def test_pull_events_match_the_worlds_pull_times() -> None:
    """Single-image pods: one Pulled event per pod, its time the pod's pull time (the
    kubelet's wording truncates to milliseconds)."""
    policy, result = simulate(EXACT)
    seconds = "layer_locality_image_pull_seconds"
    count = sum(value(policy, f"{seconds}_count", patched=p) for p in ("true", "false"))
    assert count == result.scheduled == len(result.pull_times)
    total = sum(value(policy, f"{seconds}_sum", patched=p) for p in ("true", "false"))
    assert total == pytest.approx(sum(result.pull_times), abs=0.001 * count)
    pulls = {(p, r): value(policy, "layer_locality_image_pulls_total", patched=p, result=r)
             for p in ("true", "false") for r in ("pulled", "present")}
    assert pulls[("true", "pulled")] + pulls[("true", "present")] == result.patched
    assert pulls[("true", "present")] + pulls[("false", "present")] == (
        result.scheduled - result.cold_starts)
    assert value(policy, "layer_locality_pull_events_unparsed_total") == 0


def test_outcomes_do_not_depend_on_the_view() -> None:
    """With the realistic (lagging) view the bytes present the webhook sees may differ from
    the world's, but where a pod went against its own decision does not."""
    policy, result = simulate(SimConfig(seed=3))
    assert binds(policy) == dict(policy.accounting.outcomes)
    assert sum(policy.accounting.outcomes.values()) == result.patched
