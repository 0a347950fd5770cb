"""What one run measured (`RunMetrics`), from its record; and the same run replayed through
the simulator (`simulated`): its trace as observed (every pod at the nominal time it appeared,
with its owner, images, requests and end) under the simulator's stock, webhook and oracle
policies. The oracle's bytes are the reference for "% of the oracle". Pure."""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from webhook.evaluation.pulls import PullSettings
from webhook.evaluation.run import RunRecord
from webhook.evaluation.scenario import Scenario
from webhook.registry.catalog import StaticCatalog
from webhook.sim.creation import CreationConfig
from webhook.sim.engine import SimConfig, compare
from webhook.sim.results import percentile
from webhook.sim.view import ViewConfig
from webhook.sim.workload import PodSpec, Trace
from webhook.sim.world import WorldConfig

# The observed trace has no end for pods still running when the run settled.
OPEN_END = 1e9


@dataclass(frozen=True, slots=True)
class RunMetrics:
    pods: int  # pods started
    bytes_pulled: int
    no_pull: int  # pods started without downloading anything
    pull_mean: float  # nominal seconds, bind -> images on the node
    pull_p50: float
    pull_p95: float
    heat: int  # most pods of one owner on one node at any moment
    balance: float  # CPU allocation stdev across nodes at the end, percentage points
    unscheduled: int
    patched: int  # pods the webhook gave terms


def heat(intervals: Iterable[tuple[str, str, float, float]]) -> int:
    """Most concurrent (owner, node) members over (owner, node, start, end) intervals."""
    events = []
    for owner, node, start, end in intervals:
        events.append((start, 1, (owner, node)))
        events.append((end, -1, (owner, node)))
    events.sort(key=lambda e: (e[0], e[1]))  # ends before starts at the same time
    live: Counter[tuple[str, str]] = Counter()
    worst = 0
    for _, step, key in events:
        live[key] += step
        worst = max(worst, live[key])
    return worst


def measure(record: RunRecord, scenario: Scenario) -> RunMetrics:
    starts = record.starts
    pulls = [s.pull_seconds for s in starts]
    owned = [(s.owner, s.node, s.bound, record.ends.get(s.uid, OPEN_END))
             for s in starts if s.owner and s.owner.startswith("ReplicaSet/")]
    capacity = {n.name: n.cpu_milli for n in scenario.nodes}
    used = dict.fromkeys(capacity, 0)
    for s in starts:
        seen = record.pods.get(s.uid)
        if seen is not None and s.uid not in record.ends and seen.gone is None:
            used[s.node] += seen.cpu_milli
    shares = [100.0 * used[n] / capacity[n] for n in capacity]
    return RunMetrics(
        pods=len(starts), bytes_pulled=sum(s.bytes for s in starts),
        no_pull=sum(1 for s in starts if s.bytes == 0),
        pull_mean=statistics.fmean(pulls) if pulls else 0.0,
        pull_p50=percentile(pulls, 50), pull_p95=percentile(pulls, 95),
        heat=heat((o, n, b, e) for o, n, b, e in owned if o is not None),
        balance=statistics.pstdev(shares) if shares else 0.0,
        unscheduled=record.unscheduled,
        patched=sum(1 for p in record.pods.values() if p.decision and p.decision.get("terms")),
    )


def observed_trace(record: RunRecord, scenario: Scenario,
                   pulls: PullSettings | None = None) -> Trace:
    """The run as the simulator replays it: each pod at the nominal time it appeared; with
    `pulls`, the nodes pull at its bandwidth onto its disk."""
    pods = []
    replicas: dict[str, int] = {}  # decision `by` -> index, in order of first review
    for seen in sorted(record.pods.values(), key=lambda p: (p.created, p.name)):
        by = (seen.decision or {}).get("by")
        replica = replicas.setdefault(by, len(replicas)) if isinstance(by, str) else None
        owner = seen.owner or ""
        replicaset = owner.startswith("ReplicaSet/")
        end = seen.gone if seen.gone is not None else record.ends.get(seen.uid)
        pods.append(PodSpec(
            name=seen.name, workload=owner.partition("/")[2] if replicaset else seen.name,
            kind="Deployment" if replicaset else "Pod", arrival=round(seen.created, 3),
            duration=round(end - seen.created, 3) if end is not None else OPEN_END,
            images=seen.images, cpu_milli=seen.cpu_milli, memory=seen.memory,
            replica=replica))
    nodes = scenario.nodes if pulls is None else tuple(
        replace(n, bandwidth=pulls.bandwidth, disk=pulls.disk) for n in scenario.nodes)
    return Trace(nodes=nodes, pods=tuple(pods), images=scenario.images)


def sim_config(pulls: PullSettings, seed: int, watch_delay: float,
               webhook_replicas: int = 2, routing: str = "connection") -> SimConfig:
    """The simulator set as the evaluation's cluster runs: the stand-in's bandwidth and
    per-layer time, its image list refreshed every `image_list_period` on each node's phase
    (the same model, sim/world.py), a pod of an image another pod is pulling waiting for that
    pull (both), every image known to the webhook (it serves an offline catalog), pods created
    at their observed times (no synthetic bursts)."""
    return SimConfig(
        seed=seed,
        world=WorldConfig(layer_overhead=pulls.layer_overhead,
                          image_list_period=pulls.image_list_period,
                          gc=pulls.gc_high is not None,
                          **({"gc_high": pulls.gc_high, "gc_low": pulls.gc_low}
                             if pulls.gc_high is not None else {})),
        view=ViewConfig(watch_delay=watch_delay, registry_delay=0.0, replicas=webhook_replicas,
                        routing=routing),
        creation=CreationConfig(bursts=False))


@dataclass(frozen=True, slots=True)
class Simulated:
    bytes_pulled: Mapping[str, float]  # policy -> bytes (mean over the simulator's seeds)
    heat: Mapping[str, float]
    # The webhook's lost bytes by cause (core/causes.py), mean over the simulator's seeds.
    causes: Mapping[str, float] = field(default_factory=dict)


# The webhook's watch delay in the replay, in wall seconds (scaled by the clock): the API
# server's watch on loopback delivers a pod event 2-4 ms after the write returns (measured on
# the local cluster: 40 pods, median 2.4 ms, max 4.4 ms), and the webhook's event loop serves
# reviews first during a burst. 12.5 ms is 0.25 nominal seconds at x20.
WATCH_DELAY_WALL = 0.0125
# Simulator seeds per replay (its tie-breaks): one draw of a 60-pod trace varies by several
# per cent, as the real runs do.
SIM_SEEDS = 3


def simulated(record: RunRecord, scenario: Scenario, base: StaticCatalog, pulls: PullSettings,
              policies: Sequence[str] = ("stock", "webhook", "oracle"),
              watch_delay: float | None = None, seeds: int = SIM_SEEDS,
              webhook_replicas: int = 2, routing: str = "connection") -> Simulated:
    """The simulator's policies on the run's observed trace, means over `seeds` tie-break
    seeds; `watch_delay` nominal (default WATCH_DELAY_WALL on the run's clock). A pod whose
    decision says which replica reviewed it goes to that replica; the others by `routing`."""
    trace = observed_trace(record, scenario, pulls)
    delay = WATCH_DELAY_WALL * pulls.clock_scale if watch_delay is None else watch_delay
    return replay(trace, base, policies, [
        sim_config(pulls, 1000 * (record.repeat + 1) + k, delay, webhook_replicas, routing)
        for k in range(seeds)])


def replay(trace: Trace, base: StaticCatalog, policies: Sequence[str],
           configs: Sequence[SimConfig]) -> Simulated:
    """`policies` on `trace` under each of `configs` (tie-break seeds, mostly): the means."""
    bytes_pulled: dict[str, float] = dict.fromkeys(policies, 0.0)
    heat: dict[str, float] = dict.fromkeys(policies, 0.0)
    causes: dict[str, float] = {}
    for config in configs:
        results = compare(trace, base, policies, replace(config, explain=True))
        for policy, result in results.items():
            bytes_pulled[policy] += result.bytes_pulled / len(configs)
            heat[policy] += result.max_heat / len(configs)
            if policy != "webhook":
                continue
            for loss in result.losses:
                if loss.cause.value and loss.cause.value != "over-skew":
                    causes[loss.cause.value] = (causes.get(loss.cause.value, 0.0)
                                                + loss.lost / len(configs))
    return Simulated(bytes_pulled, heat, causes)
