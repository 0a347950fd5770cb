"""The real-node evaluation's scenarios in the simulator, over many seeds and cluster sizes in
seconds: stock, the webhook and the oracle on each planned trace (planned.py), the webhook's
share of the oracle's saving and its heat per seed. For developing the decision on small
clusters; `evaluate --real-nodes N` is the judge (docs/evaluation.md says how far the two
agree).

    python -m webhook.evaluation.smallsweep --kinds bursts --nodes 3,4,6,8 --seeds 1-20
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from collections.abc import Sequence

from webhook.evaluation.measure import replay
from webhook.evaluation.planned import planned_trace
from webhook.evaluation.realcommand import per_scenario_apps
from webhook.evaluation.realscenario import preset
from webhook.evaluation.scenario import generate
from webhook.registry.catalog import StaticCatalog
from webhook.serving.wiring import demo_catalog
from webhook.sim.command import parse_seeds
from webhook.sim.creation import CreationConfig
from webhook.sim.engine import SimConfig
from webhook.sim.view import ViewConfig

MiB = 1 << 20
BANDWIDTH = 32 * MiB  # the real-node evaluation's per-node throttle


@dataclasses.dataclass(frozen=True, slots=True)
class SeedResult:
    kind: str
    nodes: int
    seed: int
    stock: float
    webhook: float
    oracle: float
    heat: float

    @property
    def share(self) -> float | None:
        best = self.stock - self.oracle
        return (self.stock - self.webhook) / best if best > 0 else None


def sweep_one(kind: str, nodes: int, seed: int, catalog: StaticCatalog,
              sim_seeds: int = 3, replicas: int = 2, routing: str = "connection",
              watch_delay: float = 0.05) -> SeedResult:
    scenario = per_scenario_apps(generate(dataclasses.replace(preset(kind, nodes), seed=seed),
                                          catalog.images()))
    trace = planned_trace(scenario)
    trace = dataclasses.replace(trace, nodes=tuple(dataclasses.replace(n, bandwidth=BANDWIDTH)
                                                   for n in trace.nodes))
    view = ViewConfig(watch_delay=watch_delay, registry_delay=0.0, replicas=replicas,
                      routing=routing)
    means = replay(trace, catalog, ("stock", "webhook", "oracle"), [
        SimConfig(seed=1000 * seed + k, view=view, creation=CreationConfig(bursts=True))
        for k in range(sim_seeds)])
    totals = means.bytes_pulled
    return SeedResult(kind, nodes, seed, totals["stock"], totals["webhook"], totals["oracle"],
                      means.heat["webhook"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="bursts")
    parser.add_argument("--nodes", default="3,4,6,8")
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("1-10"))
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--routing", default="connection")
    args = parser.parse_args(argv)
    catalog = demo_catalog()
    for kind in args.kinds.split(","):
        for nodes in (int(n) for n in args.nodes.split(",")):
            rows = [sweep_one(kind, nodes, seed, catalog, replicas=args.replicas,
                              routing=args.routing) for seed in args.seeds]
            shares = [r.share for r in rows if r.share is not None]
            cells = " ".join(f"{r.seed}:{'-' if r.share is None else f'{r.share:.0%}'}"
                             f"/h{r.heat:.1f}" for r in rows)
            print(f"{kind} {nodes} nodes: mean {statistics.fmean(shares):.0%} min "
                  f"{min(shares):.0%} of the oracle; heat max "
                  f"{max(r.heat for r in rows):.1f}  [{cells}]" if shares else
                  f"{kind} {nodes} nodes: no seed where the oracle saves anything", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
