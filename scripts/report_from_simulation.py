"""`layer-locality report` on a simulated cluster: one seed of the documented run through the
webhook policy, whose telemetry (bind outcomes, kubelet-style pull events) is the code a live
webhook runs; the report reads it as it would read a replica's /metrics.

    .venv/bin/python scripts/report_from_simulation.py [SEED] [HOLDOUT]   # the sim extra

(`make install` creates .venv with it; another python re-runs the script with .venv's, or says
what to do when there is none.)

HOLDOUT (default 0.3) is the webhook's --holdout: that share of workloads is left unsteered,
and the report compares them with the steered ones.

Review health is not simulated (the simulator calls the Mutator in process): n/a there."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


def _need_the_project() -> None:
    """Run by a python without the project (and its sim extra) installed: re-run with the
    checkout's virtualenv, else one line saying how to get one."""
    try:
        import matplotlib  # noqa: F401  (the sim extra)

        import webhook.sim.engine  # noqa: F401
    except ModuleNotFoundError as exc:
        here = Path(sys.prefix).resolve()
        if VENV_PYTHON.exists() and here != VENV_PYTHON.parent.parent.resolve():
            os.execv(VENV_PYTHON, [str(VENV_PYTHON), __file__, *sys.argv[1:]])
        sys.exit(f"{Path(__file__).name}: needs the project with its sim extra ({exc.name} is "
                 f"missing from {sys.executable}): run `make install`, then "
                 f".venv/bin/python scripts/{Path(__file__).name} [SEED] [HOLDOUT]")


if __name__ == "__main__":
    _need_the_project()

from webhook.report.figures import figures  # noqa: E402
from webhook.report.output import as_table  # noqa: E402
from webhook.serving.wiring import demo_catalog  # noqa: E402
from webhook.sim.driver import PRESETS  # noqa: E402
from webhook.sim.engine import SimConfig, run  # noqa: E402
from webhook.sim.policies import WebhookPolicy  # noqa: E402
from webhook.sim.watch import SimWatch  # noqa: E402
from webhook.sim.workload import generate  # noqa: E402
from webhook.sim.world import World  # noqa: E402


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
