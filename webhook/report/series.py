"""The metric series `layer-locality report` reads, and how it reads them from flat samples.

The samples come either from one webhook's /metrics (totals since that process started) or from
Prometheus (`increase(...[window])` summed over every replica, see webhook.report.promread);
both arrive as the same flat samples, summed here by each series' labels into counters and
histograms.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from webhook.report.histogram import Histogram

Labels = tuple[str, ...]
Sample = tuple[str, Mapping[str, str], float]  # (sample name, labels, value)


@dataclass(frozen=True)
class Series:
    """One metric the report reads and the labels it is aggregated by (every other label, such
    as the replica's instance, is aggregated away: summed for what each replica counts of its
    own, like reviews; the max for what every replica observes of the whole cluster, like binds
    and kubelet pull events, which would otherwise count once per replica)."""

    key: str
    metric: str  # the family name: counters get `_total`, histograms `_bucket|_sum|_count`
    histogram: bool
    by: Labels = ()
    cluster_wide: bool = False
    gauge: bool = False  # read as is (its highest value over the window), not as an increase


SERIES = (
    Series("binds", "layer_locality_binds", False, ("outcome",), cluster_wide=True),
    Series("present", "layer_locality_bind_present_ratio", True, cluster_wide=True),
    Series("pull_seconds", "layer_locality_image_pull_seconds", True, ("patched", "group"),
           cluster_wide=True),
    # By group too: the max across replicas is taken per series, then the groups are added.
    Series("pulls", "layer_locality_image_pulls", False, ("patched", "result", "group"),
           cluster_wide=True),
    Series("bytes_avoided", "layer_locality_bytes_avoided", False, cluster_wide=True),
    Series("reviews", "layer_locality_reviews", False, ("result",)),
    Series("review_seconds", "layer_locality_review_duration_seconds", True),
    # The holdout's comparison (by cohort: the bootstrap's units).
    *(Series(key, f"layer_locality_holdout_{name}", False, ("group", "cohort"),
             cluster_wide=True)
      for key, name in (("h_starts", "starts"), ("h_missing", "missing_bytes"),
                        ("h_warm", "warm_starts"), ("h_pull", "pull_seconds"),
                        ("h_running", "running"), ("h_running_seconds", "running_seconds"))),
    Series("h_workloads", "layer_locality_holdout_workloads", False, ("group",),
           cluster_wide=True, gauge=True),
)



def sum_by(samples: Iterable[Sample], name: str, labels: Sequence[str] = ()
           ) -> dict[Labels, float]:
    """The values of the samples named `name` summed by their values of `labels` ("" for a
    label a sample lacks); {} when there is none."""
    totals: dict[Labels, float] = {}
    for sample, found, value in samples:
        if sample == name:
            key = tuple(found.get(label, "") for label in labels)
            totals[key] = totals.get(key, 0.0) + value
    return totals


def total(samples: Iterable[Sample], name: str, /, **match: str) -> float:
    """The values of the samples named `name` whose labels have the values in `match`,
    summed (0 when there is none)."""
    return sum(value for sample, found, value in samples
               if sample == name and all(found.get(k) == v for k, v in match.items()))


def counters(samples: Iterable[Sample], series: Series) -> dict[Labels, float]:
    """A counter's (or gauge's) values summed by the series' labels; {} when absent."""
    return sum_by(samples, series.metric if series.gauge else f"{series.metric}_total",
                  series.by)


def histograms(samples: Iterable[Sample], series: Series) -> dict[Labels, Histogram]:
    """A histogram's buckets, sum and count summed by the series' labels."""
    buckets: dict[Labels, dict[float, float]] = {}
    sums: dict[Labels, float] = {}
    counts: dict[Labels, float] = {}
    for name, labels, value in samples:
        key = tuple(labels.get(label, "") for label in series.by)
        if name == f"{series.metric}_bucket" and "le" in labels:
            per = buckets.setdefault(key, {})
            bound = float(labels["le"])  # "+Inf" parses to inf
            per[bound] = per.get(bound, 0.0) + value
        elif name == f"{series.metric}_sum":
            sums[key] = sums.get(key, 0.0) + value
        elif name == f"{series.metric}_count":
            counts[key] = counts.get(key, 0.0) + value
    return {key: Histogram(tuple(sorted(per.items())), sums.get(key, 0.0),
                           counts.get(key, max(per.values(), default=0.0)))
            for key, per in buckets.items()}


def created_span(samples: Iterable[Sample], now: float) -> float | None:
    """Seconds since the earliest layer-locality metric was created (`_created`, about the
    process start): what the totals of one /metrics page cover."""
    created = [value for name, _, value in samples
               if name.startswith("layer_locality_") and name.endswith("_created")]
    return max(now - min(created), 0.0) if created else None

