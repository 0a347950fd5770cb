"""A Prometheus histogram as the report reads it: cumulative buckets, their sum and count, and
quantiles interpolated from the buckets exactly as Prometheus' `histogram_quantile` does, so
the report and the dashboard read the same numbers from the same buckets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Buckets = Sequence[tuple[float, float]]  # (upper bound `le`, cumulative count)


def bucket_quantile(q: float, buckets: Buckets) -> float | None:
    """The q-quantile of cumulative buckets, as Prometheus' histogram_quantile computes it
    (promql/quantile.go bucketQuantile): linear interpolation inside the bucket holding rank
    q*count, a lower bound of 0 for the first bucket (unless its bound is <= 0), and the
    second-highest bound when the rank falls in the +Inf bucket. None where Prometheus answers
    NaN: no +Inf bucket, fewer than two buckets, no observations, q NaN."""
    if math.isnan(q):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    merged: dict[float, float] = {}
    for bound, count in buckets:  # buckets sharing a bound add up (coalesceBuckets)
        merged[bound] = merged.get(bound, 0.0) + count
    ordered = sorted(merged.items())
    if not ordered or ordered[-1][0] != math.inf or len(ordered) < 2:
        return None
    envelope: list[tuple[float, float]] = []  # counts forced monotonic (ensureMonotonic)
    for bound, count in ordered:
        envelope.append((bound, max(count, envelope[-1][1]) if envelope else count))
    observations = envelope[-1][1]
    if observations == 0:
        return None
    rank = q * observations
    b = next((i for i, (_, count) in enumerate(envelope[:-1]) if count >= rank), len(envelope) - 1)
    if b == len(envelope) - 1:
        return envelope[-2][0]
    if b == 0 and envelope[0][0] <= 0:
        return envelope[0][0]
    start, below = (envelope[b - 1][0], envelope[b - 1][1]) if b > 0 else (0.0, 0.0)
    end, count = envelope[b]
    if count == below:  # q == 0 with an empty first bucket: 0/0, NaN in Prometheus
        return None
    return start + (end - start) * ((rank - below) / (count - below))


@dataclass(frozen=True)
class Histogram:
    buckets: tuple[tuple[float, float], ...]
    sum: float
    count: float

    def quantile(self, q: float) -> float | None:
        return bucket_quantile(q, self.buckets)

    @property
    def mean(self) -> float | None:
        return self.sum / self.count if self.count > 0 else None
