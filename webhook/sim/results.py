"""What one run measures (per policy). Definitions, as docs/evaluation.md states them:

- bytes pulled: bytes downloaded by all pulls (compressed layer sizes).
- pull time of a pod: bind -> all its images on the node (0 when everything was there);
  p50 / p95 nearest-rank over every bound pod; cold starts: pods whose pull time was > 0
  (pods waiting on a pull).
- heat of a Deployment: the most pods of its ReplicaSet on one node at any moment; `max_heat`
  over all Deployments, `mean_heat` the mean over Deployments with more than one replica.
- CPU-allocation imbalance: every 5 minutes of the arrival window, the population standard
  deviation across nodes of each node's CPU allocation (sum of pod CPU requests / allocatable
  CPU); reported as its mean over the samples (and the max), in percentage points. The mean
  of (max - min) across nodes is kept too.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from webhook.core.causes import Loss
from webhook.core.scoring import ScoringPolicy
from webhook.sim.view import ViewConfig


@dataclass(slots=True)
class RunResult:
    policy: str
    pods: int = 0
    scheduled: int = 0
    bytes_pulled: int = 0
    bytes_needed: int = 0  # sum of the pods' image sizes (what a cold cluster would pull)
    pull_times: list[float] = field(default_factory=list)
    cold_starts: int = 0  # pods that waited for a pull
    waited: int = 0  # pods that failed at least one scheduling attempt
    unscheduled: int = 0  # never placed
    max_heat: int = 0  # max pods of one workload on one node (Deployments)
    # max over binds of a workload's pods on the node less its fewest on any node: the
    # skew kube-scheduler's PodTopologySpread scores on hostname (the guard keeps to maxSkew)
    max_skew: int = 0
    heat_by_workload: dict[str, int] = field(default_factory=dict)
    cpu_stdev: list[float] = field(default_factory=list)  # per sample, across nodes
    cpu_range: list[float] = field(default_factory=list)  # per sample, max - min
    cpu_mean: list[float] = field(default_factory=list)  # per sample, mean allocation
    timeline: list[tuple[float, int]] = field(default_factory=list)  # (time, cum bytes)
    reviews: int = 0
    patched: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    placements: dict[str, str] = field(default_factory=dict)  # trace pod name -> node
    losses: list[Loss] = field(default_factory=list)  # per placement (SimConfig.explain)

    def percentile(self, q: float) -> float:
        return percentile(self.pull_times, q)

    @property
    def mean_pull(self) -> float:
        return statistics.fmean(self.pull_times) if self.pull_times else 0.0

    @property
    def mean_heat(self) -> float:
        """Mean over multi-replica Deployments of the most pods on one node."""
        values = list(self.heat_by_workload.values())
        return statistics.fmean(values) if values else 0.0

    @property
    def imbalance(self) -> float:
        """Mean over samples of the stdev of node CPU allocation (a fraction)."""
        return statistics.fmean(self.cpu_stdev) if self.cpu_stdev else 0.0

    @property
    def max_imbalance(self) -> float:
        return max(self.cpu_stdev, default=0.0)

    @property
    def mean_range(self) -> float:
        return statistics.fmean(self.cpu_range) if self.cpu_range else 0.0

    @property
    def mean_util(self) -> float:
        return statistics.fmean(self.cpu_mean) if self.cpu_mean else 0.0

    def sample_cpu(self, fractions: Sequence[float]) -> None:
        self.cpu_stdev.append(statistics.pstdev(fractions))
        self.cpu_range.append(max(fractions) - min(fractions))
        self.cpu_mean.append(statistics.fmean(fractions))


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of values in any order; 0 for none."""
    return nearest_rank(sorted(values), q) if values else 0.0


def nearest_rank(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of ascending values; NaN for none. The one
    nearest-rank percentile of the house (bench/ reports with it too)."""
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], not {q}")
    if not sorted_values:
        return float("nan")
    rank = max(1, -(-len(sorted_values) * q // 100))
    return sorted_values[min(len(sorted_values), int(rank)) - 1]


def reduction(result: RunResult, stock: RunResult | None) -> float | None:
    """Share of the stock policy's pulled bytes this policy does not pull."""
    if stock is None or stock.bytes_pulled == 0:
        return None
    return 1 - result.bytes_pulled / stock.bytes_pulled


@dataclass(frozen=True, slots=True)
class SweepPoint:
    """The webhook under one calibration / view."""

    label: str
    scoring: ScoringPolicy
    view: ViewConfig
    result: RunResult


@dataclass(frozen=True, slots=True)
class SeedRun:
    """Every policy (and the sweep) on one seed's trace."""

    seed: int
    group: str  # "tuning" | "held-out"
    pods: int
    nodes: int
    results: dict[str, RunResult]
    sweep: tuple[SweepPoint, ...]
    seconds: float  # wall time of the seed's runs
