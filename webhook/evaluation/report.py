"""`layer-locality evaluate` results: runs aggregated per (scenario, mode), the webhook's share of
the oracle's reduction, the simulator's agreement with the real scheduler, and the JSON
document; render.py draws the table and the plots. Pure.

Definitions, per scenario (every seed and repeat of it pooled):
- each RunMetrics field: the mean, min..max and sample stdev over the runs of a mode;
- the oracle's bytes: the mean of the simulator's `oracle` bytes over the replays of the
  scenario's runs of both modes (each run's observed trace is replayed);
- "% of the oracle" = (mean stock bytes - mean webhook bytes) / (mean stock bytes - mean oracle
  bytes); its spread over the repeat pairs (the stock and webhook runs of one seed and repeat,
  the pair's oracle being the mean of its two replays);
- the simulator's agreement: the simulator's stock bytes and heat over the replays of the stock
  runs, its webhook bytes and heat over the replays of the webhook runs, each vs the real mean
  of the same runs, as (sim - real) / real; the bars: bytes of stock and heat within 5 %,
  webhook bytes within 10 %.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.evaluation.measure import RunMetrics, Simulated
from webhook.sim.results import nearest_rank

MiB = 1 << 20
GiB = 1 << 30
MODES = ("stock", "webhook")
# The opted-in runs under another split of the reviews than by connection (`--splits`).
SPLIT_MODES = {"connection": "webhook", "one": "webhook-one", "even": "webhook-even"}
METRICS: tuple[str, ...] = tuple(RunMetrics.__dataclass_fields__)
# (what, mode, measure, bar): the simulator's agreement with the real runs.
BARS: tuple[tuple[str, str, str, float], ...] = (
    ("stock bytes", "stock", "bytes", 0.05),
    ("webhook bytes", "webhook", "bytes", 0.10),
    ("stock heat", "stock", "heat", 0.05),
    ("webhook heat", "webhook", "heat", 0.05),
)


@dataclass(frozen=True, slots=True)
class EvalRun:
    """One finished run on the real scheduler."""

    scenario: str
    seed: int
    repeat: int
    mode: str
    metrics: RunMetrics
    simulated: Simulated | None  # None: --no-simulate
    wall_seconds: float
    settled: bool
    write_errors: int
    pull_seconds: tuple[float, ...] = ()  # per started pod, nominal (bind -> images there)
    split: str = ""  # how the reviews were split between the replicas ("": no balancer)
    reviews: tuple[int, ...] = ()  # per webhook replica
    connections: tuple[int, ...] = ()  # API-server connections pinned to each replica
    per_connection: tuple[int, ...] = ()  # reviews each API-server connection carried
    # Per node: (name, bytes, pods that downloaded something); bytes at the data set's sizes.
    per_node: tuple[tuple[str, int, int], ...] = ()
    running_seconds: tuple[float, ...] = ()  # real nodes: per pod, bind -> Running (wall s)
    registry_bytes: int | None = None  # real nodes: blob bytes the registry served (as built)
    cpu_busy: float | None = None  # real nodes: CPU busy share, cluster start to teardown


@dataclass(frozen=True, slots=True)
class Spread:
    n: int
    mean: float
    low: float
    high: float
    stdev: float | None  # sample stdev; None for a single value


def spread(values: Iterable[float]) -> Spread | None:
    xs = [float(v) for v in values]
    if not xs:
        return None
    return Spread(len(xs), statistics.fmean(xs), min(xs), max(xs),
                  statistics.stdev(xs) if len(xs) > 1 else None)


@dataclass(frozen=True, slots=True)
class ModeSummary:
    mode: str
    runs: int
    metrics: Mapping[str, Spread]  # RunMetrics field -> spread over the runs
    wall_seconds: Spread
    unsettled: int
    write_errors: int
    # Real nodes: bind -> Running over every pod of the mode's runs, (p50, p95) wall seconds.
    running: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class Agreement:
    what: str
    simulated: float
    real: float
    relative: float | None  # (simulated - real) / real; None when real is 0 and sim is not
    bar: float

    @property
    def met(self) -> bool:
        return self.relative is not None and abs(self.relative) <= self.bar


@dataclass(frozen=True, slots=True)
class SplitSummary:
    """The opted-in runs of one split of the reviews against the stock runs."""

    mode: str
    reduction: float | None  # 1 - mean bytes / mean stock bytes
    share_of_oracle: float | None
    pair_shares: Spread | None
    heat: Spread
    reviews: tuple[tuple[int, ...], ...]  # per run, per replica
    connections: tuple[int, ...] = ()  # per run: the API server's connections to the balancer


@dataclass(frozen=True, slots=True)
class ScenarioSummary:
    scenario: str
    seeds: tuple[int, ...]
    repeats: int  # the most of one (seed, mode)
    modes: Mapping[str, ModeSummary]
    oracle_bytes: float | None
    oracle_heat: float | None
    reduction: float | None  # 1 - mean webhook bytes / mean stock bytes
    share_of_oracle: float | None
    pair_shares: Spread | None  # the share per repeat pair
    heat_vs_stock: float | None  # mean webhook heat / mean stock heat
    agreement: tuple[Agreement, ...]
    splits: tuple[SplitSummary, ...] = ()  # every opted-in mode, "webhook" first
    # The webhook's lost bytes by cause over its runs' replays (core/causes.py), summed.
    causes: Mapping[str, float] = field(default_factory=dict)


def share_of_oracle(stock: float, webhook: float, oracle: float) -> float | None:
    """(stock - webhook) / (stock - oracle); None when the oracle saves nothing."""
    best = stock - oracle
    return (stock - webhook) / best if best > 0 else None


def relative(simulated: float, real: float) -> float | None:
    if real == 0:
        return 0.0 if simulated == 0 else None
    return (simulated - real) / real


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summarize(runs: Sequence[EvalRun]) -> list[ScenarioSummary]:
    """One summary per scenario, in the order the runs came."""
    return [_scenario([r for r in runs if r.scenario == name], name)
            for name in dict.fromkeys(r.scenario for r in runs)]


def _scenario(runs: Sequence[EvalRun], name: str) -> ScenarioSummary:
    modes: dict[str, ModeSummary] = {}
    for mode in [*MODES, *sorted({r.mode for r in runs} - set(MODES))]:
        members = [r for r in runs if r.mode == mode]
        if not members:
            continue
        metrics = {}
        for metric in METRICS:
            got = spread(float(getattr(r.metrics, metric)) for r in members)
            assert got is not None
            metrics[metric] = got
        wall = spread(r.wall_seconds for r in members)
        assert wall is not None
        pooled = sorted(x for r in members for x in r.running_seconds)
        modes[mode] = ModeSummary(mode, len(members), metrics, wall,
                                  sum(1 for r in members if not r.settled),
                                  sum(r.write_errors for r in members),
                                  (nearest_rank(pooled, 50), nearest_rank(pooled, 95))
                                  if pooled else None)
    replays = [r for r in runs if r.simulated is not None and "oracle" in r.simulated.bytes_pulled]
    oracle_bytes = _mean([r.simulated.bytes_pulled["oracle"] for r in replays
                          if r.simulated is not None])
    oracle_heat = _mean([r.simulated.heat["oracle"] for r in replays
                         if r.simulated is not None and "oracle" in r.simulated.heat])
    stock, hook = modes.get("stock"), modes.get("webhook")
    splits = [_split(runs, mode, modes[mode], stock, oracle_bytes)
              for mode in modes if mode.startswith("webhook")]
    main = next((x for x in splits if x.mode == "webhook"), None)
    heat_ratio = None
    if stock is not None and hook is not None:
        sh = stock.metrics["heat"].mean
        heat_ratio = hook.metrics["heat"].mean / sh if sh > 0 else None
    counts: dict[tuple[int, str], int] = {}
    for r in runs:
        counts[(r.seed, r.mode)] = counts.get((r.seed, r.mode), 0) + 1
    return ScenarioSummary(
        scenario=name, seeds=tuple(dict.fromkeys(r.seed for r in runs)),
        repeats=max(counts.values(), default=0), modes=modes,
        oracle_bytes=oracle_bytes, oracle_heat=oracle_heat,
        reduction=main.reduction if main is not None else None,
        share_of_oracle=main.share_of_oracle if main is not None else None,
        pair_shares=main.pair_shares if main is not None else None,
        heat_vs_stock=heat_ratio, agreement=tuple(_agreement(runs)), splits=tuple(splits),
        causes=_causes(r for r in runs if r.mode == "webhook"))


def _causes(runs: Iterable[EvalRun]) -> dict[str, float]:
    """Lost bytes by cause over the runs' replays, most first."""
    total: dict[str, float] = {}
    for r in runs:
        for cause, lost in (r.simulated.causes if r.simulated is not None else {}).items():
            total[cause] = total.get(cause, 0.0) + lost
    return dict(sorted(total.items(), key=lambda item: -item[1]))


def _split(runs: Sequence[EvalRun], mode: str, summary: ModeSummary,
           stock: ModeSummary | None, oracle_bytes: float | None) -> SplitSummary:
    """The opted-in runs of `mode` against the stock runs and the oracle."""
    members = [r for r in runs if r.mode == mode]
    reduction = share = None
    if stock is not None:
        s, w = stock.metrics["bytes_pulled"].mean, summary.metrics["bytes_pulled"].mean
        reduction = 1 - w / s if s > 0 else None
        if oracle_bytes is not None:
            share = share_of_oracle(s, w, oracle_bytes)
    return SplitSummary(mode, reduction, share, spread(_pair_shares(runs, mode)),
                        summary.metrics["heat"], tuple(r.reviews for r in members),
                        tuple(len(r.per_connection) for r in members))


def _pair_shares(runs: Sequence[EvalRun], webhook: str = "webhook") -> list[float]:
    """The share of the oracle per (seed, repeat) whose stock and `webhook` runs both have a
    replay; the pair's oracle is the mean of its two replays' oracle bytes."""
    by_key = {(r.seed, r.repeat, r.mode): r for r in runs}
    out = []
    for (seed, repeat, mode), stock in by_key.items():
        hook = by_key.get((seed, repeat, webhook))
        if mode != "stock" or hook is None or stock.simulated is None \
                or hook.simulated is None:
            continue
        oracles = [x.bytes_pulled.get("oracle") for x in (stock.simulated, hook.simulated)]
        if None in oracles:
            continue
        oracle = statistics.fmean(o for o in oracles if o is not None)
        share = share_of_oracle(stock.metrics.bytes_pulled, hook.metrics.bytes_pulled, oracle)
        if share is not None:
            out.append(share)
    return out


def _bars(runs: Sequence[EvalRun]) -> list[tuple[str, str, str, float]]:
    """BARS, and the webhook's bars again for each other split the runs have."""
    extra = sorted({r.mode for r in runs if r.mode.startswith("webhook-")})
    return [*BARS, *((what.replace("webhook", mode), mode, measure, bar) for mode in extra
                     for what, base, measure, bar in BARS if base == "webhook")]


def _agreement(runs: Sequence[EvalRun]) -> list[Agreement]:
    out = []
    for what, mode, measure, bar in _bars(runs):
        policy = mode.partition("-")[0]  # the replay routes the reviews as the run split them
        pairs: list[tuple[float, float]] = []
        for r in runs:
            if r.mode != mode or r.simulated is None:
                continue
            table = r.simulated.bytes_pulled if measure == "bytes" else r.simulated.heat
            if policy not in table:
                continue
            real = r.metrics.bytes_pulled if measure == "bytes" else r.metrics.heat
            pairs.append((float(table[policy]), float(real)))
        if pairs:
            sim = statistics.fmean(p[0] for p in pairs)
            real_mean = statistics.fmean(p[1] for p in pairs)
            out.append(Agreement(what, sim, real_mean, relative(sim, real_mean), bar))
    return out


# ---- JSON --------------------------------------------------------------------------------------

def _spread_doc(s: Spread | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"n": s.n, "mean": s.mean, "min": s.low, "max": s.high, "stdev": s.stdev}


def run_doc(r: EvalRun) -> dict[str, Any]:
    return {
        "scenario": r.scenario, "seed": r.seed, "repeat": r.repeat, "mode": r.mode,
        "wallSeconds": r.wall_seconds, "settled": r.settled, "writeErrors": r.write_errors,
        "metrics": {name: getattr(r.metrics, name) for name in METRICS},
        "simulated": None if r.simulated is None else {
            "bytesPulled": dict(r.simulated.bytes_pulled), "heat": dict(r.simulated.heat),
            "causes": dict(r.simulated.causes)},
        "pullSeconds": list(r.pull_seconds),
        "split": r.split, "reviewsPerReplica": list(r.reviews),
        "connectionsPerReplica": list(r.connections),
        "reviewsPerConnection": list(r.per_connection),
        "perNode": [{"node": n, "bytes": b, "downloadingPods": p} for n, b, p in r.per_node],
        "runningSeconds": list(r.running_seconds), "registryBytes": r.registry_bytes,
        "cpuBusy": r.cpu_busy,
    }


def run_from_doc(doc: Mapping[str, Any]) -> EvalRun:
    """`run_doc`'s inverse: a run read back from an evaluation's JSON."""
    sim = doc.get("simulated")
    return EvalRun(
        scenario=str(doc["scenario"]), seed=int(doc["seed"]), repeat=int(doc["repeat"]),
        mode=str(doc["mode"]), metrics=RunMetrics(**doc["metrics"]),
        simulated=None if sim is None else Simulated(dict(sim["bytesPulled"]),
                                                     dict(sim["heat"]),
                                                     dict(sim.get("causes") or {})),
        wall_seconds=float(doc["wallSeconds"]), settled=bool(doc["settled"]),
        write_errors=int(doc["writeErrors"]), pull_seconds=tuple(doc["pullSeconds"]),
        split=str(doc["split"]), reviews=tuple(doc["reviewsPerReplica"]),
        connections=tuple(doc["connectionsPerReplica"]),
        per_connection=tuple(doc["reviewsPerConnection"]),
        per_node=tuple((str(n["node"]), int(n["bytes"]), int(n["downloadingPods"]))
                       for n in doc.get("perNode", [])),
        running_seconds=tuple(doc.get("runningSeconds", [])),
        registry_bytes=doc.get("registryBytes"), cpu_busy=doc.get("cpuBusy"))


def summary_doc(s: ScenarioSummary) -> dict[str, Any]:
    return {
        "scenario": s.scenario, "seeds": list(s.seeds), "repeats": s.repeats,
        "modes": {m.mode: {"runs": m.runs, "unsettled": m.unsettled,
                           "writeErrors": m.write_errors,
                           "wallSeconds": _spread_doc(m.wall_seconds),
                           "runningSeconds": ({"p50": m.running[0], "p95": m.running[1]}
                                              if m.running is not None else None),
                           "metrics": {k: _spread_doc(v) for k, v in m.metrics.items()}}
                  for m in s.modes.values()},
        "oracle": {"bytesPulled": s.oracle_bytes, "heat": s.oracle_heat},
        "webhookReductionVsStock": s.reduction,
        "shareOfOracle": s.share_of_oracle,
        "shareOfOraclePerRepeatPair": _spread_doc(s.pair_shares),
        "heatVsStock": s.heat_vs_stock,
        "splits": {x.mode: {"reductionVsStock": x.reduction, "shareOfOracle": x.share_of_oracle,
                            "shareOfOraclePerRepeatPair": _spread_doc(x.pair_shares),
                            "heat": _spread_doc(x.heat),
                            "reviewsPerReplica": [list(r) for r in x.reviews],
                            "connections": list(x.connections)}
                   for x in s.splits},
        "simulatorAgreement": [{"what": a.what, "simulated": a.simulated, "real": a.real,
                                "relative": a.relative, "bar": a.bar, "met": a.met}
                               for a in s.agreement],
    }


def document(runs: Sequence[EvalRun], summaries: Sequence[ScenarioSummary],
             meta: Mapping[str, Any] | None = None,
             failed: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    return {"meta": dict(meta or {}), "runs": [run_doc(r) for r in runs],
            "failed": [dict(f) for f in failed], "summary": [summary_doc(s) for s in summaries]}
