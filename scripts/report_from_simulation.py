"""`layer-locality report` on a simulated cluster: one seed of the documented run through the
webhook policy, whose telemetry (bind outcomes, kubelet-style pull events) is the code a live
webhook runs; the report reads it as it would read a replica's /metrics.

    python scripts/report_from_simulation.py [SEED] [HOLDOUT]   # needs the sim extra

HOLDOUT (default 0.3) is the webhook's --holdout: that share of workloads is left unsteered,
and the report compares them with the steered ones.

Review health is not simulated (the simulator calls the Mutator in process): n/a there."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any

from webhook.report.figures import as_table, figures
from webhook.serving.wiring import demo_catalog
from webhook.sim.driver import PRESETS
from webhook.sim.engine import SimConfig, run
from webhook.sim.policies import WebhookPolicy
from webhook.sim.watch import SimWatch
from webhook.sim.workload import generate
from webhook.sim.world import World


def main(seed: int, holdout: float) -> None:
    base = demo_catalog()
    workload = replace(PRESETS["documented"], seed=seed)
    trace = generate(workload, base.images())
    config = replace(SimConfig(), seed=seed)
    config = replace(config, view=replace(config.view, holdout=holdout))
    policies: list[WebhookPolicy] = []

    def factory(world: World, watch: SimWatch) -> Any:
        policy = WebhookPolicy(world, watch, seed, config.scoring, view=config.view)
        policies.append(policy)
        return policy

    run(trace, factory, base, config)
    samples = [(s.name, s.labels, s.value)
               for family in policies[0].telemetry_metrics.registry.collect()
               for s in family.samples]
    hours = workload.hours
    source = (f"simulated cluster (documented run, seed {seed}, {hours:g} h of arrivals, "
              f"holdout {holdout:g})")
    sys.stdout.write(as_table(figures(samples, hours * 3600, source)))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1,
         float(sys.argv[2]) if len(sys.argv) > 2 else 0.3)
