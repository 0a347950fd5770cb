"""The real-node evaluation's scenarios in the simulator, over many seeds and cluster sizes in
seconds: stock, the webhook and the oracle on each planned trace (planned.py), the webhook's
share of the oracle's saving per seed, and the tail over the seeds (mean, p10, worst, seeds
under a bar), per kind, size and split of the reviews between the webhook's replicas. For
developing the decision on small clusters; `evaluate --real-nodes N` is the judge
(docs/evaluation.md says how far the two agree).

    python -m webhook.evaluation.smallsweep --kinds bursts,steady --nodes 3,4,6,8,12,24 \\
        --seeds 1-40 --routing connection,one,even --explain

`--explain` adds, per kind and size, the webhook's lost bytes by cause (core/causes.py): at
each placement, the bytes its node lacked beyond the best node it could have had in the same
state, and why. `--bound` adds the offline optimum (bound.py) per seed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path

from webhook.core.causes import LossTable
from webhook.core.scoring import ScoringPolicy
from webhook.evaluation.planned import planned_trace
from webhook.evaluation.realcommand import per_scenario_apps
from webhook.evaluation.realscenario import preset
from webhook.evaluation.scenario import generate
from webhook.registry.catalog import StaticCatalog
from webhook.serving.wiring import demo_catalog
from webhook.sim.command import parse_seeds
from webhook.sim.creation import CreationConfig
from webhook.sim.engine import SimConfig, book_for, run
from webhook.sim.lossprobe import cause_lines
from webhook.sim.results import percentile
from webhook.sim.view import ViewConfig
from webhook.sim.workload import Trace

MiB = 1 << 20
BANDWIDTH = 32 * MiB  # the real-node evaluation's per-node throttle
POLICIES = ("stock", "webhook", "oracle")


@dataclasses.dataclass(frozen=True, slots=True)
class SeedResult:
    kind: str
    nodes: int
    seed: int
    stock: float
    webhook: float
    oracle: float
    heat: float  # the webhook's, mean over the simulator's seeds
    routing: str = "connection"
    max_heat: int = 0  # the webhook's, worst over the simulator's seeds
    bound: float | None = None  # the offline optimum's bytes (bound.py), when asked
    bound_lower: float | None = None  # what it proved no placement beats (= bound: optimal)
    max_skew: int = 0  # the webhook's, worst over the simulator's seeds (results.max_skew)

    @property
    def share(self) -> float | None:
        """The webhook's share of the oracle's saving over stock; None when it saves none."""
        best = self.stock - self.oracle
        return (self.stock - self.webhook) / best if best > 0 else None

    def share_of_bound(self, policy: float, proven: bool = False) -> float | None:
        """`policy`'s share of the offline optimum's saving over stock; `proven`: against
        what the solver proved (a floor of the share where it did not finish)."""
        bound = self.bound_lower if proven else self.bound
        if bound is None or self.stock - bound <= 0:
            return None
        return (self.stock - policy) / (self.stock - bound)


@dataclasses.dataclass(frozen=True, slots=True)
class Tail:
    """The webhook's share of the oracle's saving over seeds."""

    seeds: int
    mean: float
    p10: float
    worst: float
    under_90: int
    heat: int
    skew: int = 0  # the worst skew any Deployment reached (the guard keeps to maxSkew, 3)

    @classmethod
    def of(cls, rows: Sequence[SeedResult]) -> Tail | None:
        shares = [r.share for r in rows if r.share is not None]
        if not shares:
            return None
        return cls(len(shares), statistics.fmean(shares), percentile(shares, 10), min(shares),
                   sum(1 for s in shares if s < 0.9), max(r.max_heat for r in rows),
                   max(r.max_skew for r in rows))


def scenario_trace(kind: str, nodes: int, seed: int, catalog: StaticCatalog) -> Trace:
    """The planned trace of the real-node preset `kind` on `nodes` nodes, seed `seed`, at
    the real runs' per-node bandwidth."""
    scenario = per_scenario_apps(generate(dataclasses.replace(preset(kind, nodes), seed=seed),
                                          catalog.images()))
    trace = planned_trace(scenario)
    return dataclasses.replace(trace, nodes=tuple(dataclasses.replace(n, bandwidth=BANDWIDTH)
                                                  for n in trace.nodes))


def sweep_one(kind: str, nodes: int, seed: int, catalog: StaticCatalog,
              sim_seeds: int = 3, replicas: int = 2, routing: str = "connection",
              watch_delay: float = 0.05, losses: LossTable | None = None,
              bound_seconds: float = 0.0, scoring: ScoringPolicy | None = None,
              watch_jitter: float = 0.0, young: bool = False) -> SeedResult:
    """Stock, the webhook and the oracle on one seed's trace, means over `sim_seeds`
    tie-break seeds; the webhook's lost bytes by cause added to `losses` when given; the
    offline optimum when `bound_seconds` > 0 (its time limit)."""
    trace = scenario_trace(kind, nodes, seed, catalog)
    view = ViewConfig(watch_delay=watch_delay, registry_delay=0.0, replicas=replicas,
                      routing=routing, watch_jitter=watch_jitter, young=young)
    book = book_for(trace, catalog)
    totals = dict.fromkeys(POLICIES, 0.0)
    heat, worst, skew = 0.0, 0, 0
    start: dict[str, str] | None = None  # the oracle's placement: where the bound starts
    best = 0
    for k in range(sim_seeds):
        config = SimConfig(seed=1000 * seed + k, view=view, creation=CreationConfig(bursts=True),
                           explain=losses is not None, scoring=scoring or ScoringPolicy())
        for policy in POLICIES:
            result = run(trace, policy, catalog, config, book)
            totals[policy] += result.bytes_pulled / sim_seeds
            if policy == "oracle" and (start is None or result.bytes_pulled < best):
                start, best = dict(result.placements), result.bytes_pulled
            if policy == "webhook":
                heat += result.max_heat / sim_seeds
                worst = max(worst, result.max_heat)
                skew = max(skew, result.max_skew)
                if losses is not None:
                    losses.add(result.losses)
    bound = lower = None
    if bound_seconds > 0:
        from webhook.evaluation.bound import solve

        solved = solve(trace, book, time_limit=bound_seconds, start=start)
        bound, lower = float(solved.bytes_pulled), float(solved.lower)
    return SeedResult(kind, nodes, seed, totals["stock"], totals["webhook"], totals["oracle"],
                      heat, routing, worst, bound, lower, skew)


def tail_line(kind: str, nodes: int, routing: str, rows: Sequence[SeedResult]) -> str:
    tail = Tail.of(rows)
    head = f"{kind} {nodes} nodes, {routing}:"
    if tail is None:
        return f"{head} no seed where the oracle saves anything"
    cells = " ".join(f"{r.seed}:{'-' if r.share is None else f'{r.share:.0%}'}"
                     for r in rows)
    return (f"{head} mean {tail.mean:.0%} p10 {tail.p10:.0%} worst {tail.worst:.0%} "
            f"under 90 % {tail.under_90}/{tail.seeds}; heat max {tail.heat}; past maxSkew "
            f"{sum(r.max_skew > 3 for r in rows)}/{len(rows)} seeds (skew max {tail.skew})"
            f"  [{cells}]")


def bound_line(rows: Sequence[SeedResult]) -> str:
    """The webhook's and the oracle's share of the offline optimum's saving; where the solver
    stopped at its time limit, the share against what it proved too (a floor)."""
    shares = {name: [s for s in (r.share_of_bound(getattr(r, name)) for r in rows)
                     if s is not None] for name in ("webhook", "oracle")}
    if not shares["webhook"]:
        return "  offline optimum: no seed where it saves anything"
    open_rows = [r for r in rows if r.bound is not None and r.bound_lower is not None
                 and r.bound_lower < r.bound]
    line = "  of the offline optimum's saving: " + "; ".join(
        f"{name} mean {statistics.fmean(v):.0%} p10 {percentile(v, 10):.0%} worst {min(v):.0%}"
        for name, v in shares.items())
    if open_rows:
        floors = [s for s in (r.share_of_bound(r.webhook, proven=True) for r in open_rows)
                  if s is not None]
        line += (f"; not proved optimal on {len(open_rows)} of {len(rows)} seeds (the webhook "
                 f"at least {min(floors):.0%} there)" if floors else "")
    return line


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kinds", default="bursts")
    parser.add_argument("--nodes", default="3,4,6,8")
    parser.add_argument("--seeds", type=parse_seeds, default=parse_seeds("1-10"))
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--routing", default="connection",
                        help="comma-separated splits of the reviews: connection,one,even,random")
    parser.add_argument("--sim-seeds", type=int, default=3,
                        help="the simulator's tie-break seeds per scenario seed")
    parser.add_argument("--explain", action="store_true",
                        help="the webhook's lost bytes by cause, per kind and size")
    parser.add_argument("--bound", type=float, default=0.0, metavar="SECONDS",
                        help="also solve the offline optimum per seed (time limit each)")
    parser.add_argument("--json", type=Path, help="write every seed's figures here")
    parser.add_argument("--watch-jitter", type=float, default=0.0, metavar="SECONDS",
                        help="each replica's pod watch up to this much later again, drawn "
                        "per event and replica (replicas that see each other late)")
    parser.add_argument("--young", action="store_true",
                        help="the replicas in their first minutes (a cold start, a rollout)")
    args = parser.parse_args(argv)
    catalog = demo_catalog()
    everything: list[SeedResult] = []
    for kind in args.kinds.split(","):
        for nodes in (int(n) for n in args.nodes.split(",")):
            for routing in args.routing.split(","):
                table = LossTable() if args.explain else None
                rows = [sweep_one(kind, nodes, seed, catalog, sim_seeds=args.sim_seeds,
                                  replicas=args.replicas, routing=routing, losses=table,
                                  bound_seconds=args.bound, watch_jitter=args.watch_jitter,
                                  young=args.young)
                        for seed in args.seeds]
                everything += rows
                print(tail_line(kind, nodes, routing, rows), flush=True)
                if args.bound > 0:
                    print(bound_line(rows), flush=True)
                if table is not None:
                    gap = sum(max(0.0, r.webhook - r.oracle) for r in rows) * args.sim_seeds
                    print("\n".join(cause_lines(table, gap)), flush=True)
    if args.json is not None:
        args.json.write_text(json.dumps([{**dataclasses.asdict(r), "share": r.share}
                                         for r in everything], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
