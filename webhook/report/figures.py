"""What `layer-locality report` computes: the operator's before/after (ReportDoc), and the
holdout's comparison of steered and held-out workloads, from metric samples.

Pure: /metrics and Prometheus both arrive as the same flat samples (webhook.report.series), so
the figures are computed once, here; webhook.report.output prints them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TypedDict

from webhook.report.effects import Cell, EffectSettings, Interval, effect
from webhook.report.histogram import Histogram
from webhook.report.series import SERIES, Sample, counters, histograms

DAY = 86400.0


class PullTimes(TypedDict):
    p50: float | None
    p95: float | None


class FollowDoc(TypedDict):
    binds: dict[str, float]
    followed_rate: float | None


class PresentDoc(TypedDict):
    at_bind_p50: float | None
    at_bind_mean: float | None
    pulls_present_share: dict[str, float | None]


class BytesDoc(TypedDict):
    total: float | None
    per_day: float | None


class ReviewsDoc(TypedDict):
    counts: dict[str, float]
    error_share: float | None
    p99_seconds: float | None


class EffectDoc(TypedDict):
    """One metric compared between the holdout's groups (webhook.report.effects.Effect)."""

    metric: str
    unit: str  # seconds, bytes, share
    better: str  # lower | higher: which way steering should move it
    steered: float | None
    holdout: float | None
    difference: float | None  # steered - holdout
    difference_ci: list[float] | None  # [low, high], 95 %
    relative: float | None  # steered / holdout - 1
    relative_ci: list[float] | None
    pods: dict[str, float]  # group -> pods behind the figure
    workloads: dict[str, float | None]  # group -> distinct workloads (None: not exported)
    cohorts: dict[str, int]  # group -> cohorts with pods (the bootstrap's units)
    verdict: str  # lower | higher | no clear difference | not enough data


class HoldoutDoc(TypedDict):
    on: bool  # pods of the experiment were seen
    confidence: float
    effects: list[EffectDoc]
    # group -> cumulative pull-time buckets [[le, count], ...] (kubelet events per container)
    pull_buckets: dict[str, list[list[float]]]


class ReportDoc(TypedDict):
    """`layer-locality report --output json`; null where a metric is missing."""

    source: str
    span_seconds: float | None
    holdout: HoldoutDoc
    follow: FollowDoc
    present: PresentDoc
    pull_seconds: dict[str, PullTimes]
    bytes_avoided: BytesDoc
    reviews: ReviewsDoc


PATCHED = {"patched": "true", "not_patched": "false"}  # report column -> `patched` label value
OUTCOMES = ("top", "preferred", "other")
RESULTS = ("patched", "skipped", "error")


def _share(part: float, whole: float) -> float | None:
    return part / whole if whole > 0 else None


def figures(samples: Sequence[Sample], span_seconds: float | None, source: str) -> ReportDoc:
    """The report from samples holding totals (since start, or over a window)."""
    by = {s.key: s for s in SERIES}
    binds = counters(samples, by["binds"])
    bind_counts = {o: binds.get((o,), 0.0) for o in OUTCOMES} if binds else {}
    followed = bind_counts.get("top", 0.0) + bind_counts.get("preferred", 0.0)
    present = histograms(samples, by["present"]).get(())
    # The series are read by group too (the max across replicas is per series); the figures
    # here add the groups up: the same samples read by fewer labels.
    pulls = counters(samples, replace(by["pulls"], by=("patched", "result")))
    shares = {column: _share(pulls.get((value, "present"), 0.0),
                             pulls.get((value, "present"), 0.0) + pulls.get((value, "pulled"), 0.0))
              for column, value in PATCHED.items()}
    per_patched = histograms(samples, replace(by["pull_seconds"], by=("patched",)))
    per_group = histograms(samples, replace(by["pull_seconds"], by=("group",)))
    times: dict[str, PullTimes] = {}
    for column, value in PATCHED.items():
        hist = per_patched.get((value,))
        times[column] = {"p50": hist.quantile(0.5) if hist else None,
                         "p95": hist.quantile(0.95) if hist else None}
    avoided = counters(samples, by["bytes_avoided"]).get(())
    per_day = (avoided * DAY / span_seconds
               if avoided is not None and span_seconds else None)
    reviews = counters(samples, by["reviews"])
    review_counts = {r: reviews.get((r,), 0.0) for r in RESULTS} if reviews else {}
    latency = histograms(samples, by["review_seconds"]).get(())
    return {
        "source": source,
        "span_seconds": span_seconds,
        "holdout": holdout_figures(samples, {key[0]: h for key, h in per_group.items()}),
        "follow": {"binds": bind_counts,
                   "followed_rate": _share(followed, sum(bind_counts.values()))},
        "present": {"at_bind_p50": present.quantile(0.5) if present else None,
                    "at_bind_mean": present.mean if present else None,
                    "pulls_present_share": shares},
        "pull_seconds": times,
        "bytes_avoided": {"total": avoided, "per_day": per_day},
        "reviews": {"counts": review_counts,
                    "error_share": _share(review_counts.get("error", 0.0),
                                          sum(review_counts.values())),
                    "p99_seconds": latency.quantile(0.99) if latency else None},
    }


EFFECT_SETTINGS = EffectSettings()
GROUPS = ("steered", "holdout")  # holdout.Group's values in the experiment
# The compared figures: (name, unit, which way is better, numerator series, denominator).
COMPARED = (
    ("image pull seconds per start", "seconds", "lower", "h_pull", "h_starts"),
    ("bytes pulled per start", "bytes", "lower", "h_missing", "h_starts"),
    ("starts that pulled nothing", "share", "higher", "h_warm", "h_starts"),
    ("seconds from creation to Running", "seconds", "lower", "h_running_seconds",
     "h_running"),
)


def holdout_figures(samples: Sequence[Sample], pulls_by_group: Mapping[str, Histogram],
                    settings: EffectSettings = EFFECT_SETTINGS) -> HoldoutDoc:
    """Steered against held-out workloads on each COMPARED figure, with its interval."""
    by = {s.key: s for s in SERIES}
    values = {key: counters(samples, by[key]) for key in
              {"h_starts", "h_missing", "h_warm", "h_pull", "h_running", "h_running_seconds"}}
    workloads = counters(samples, by["h_workloads"])
    effects: list[EffectDoc] = []
    for name, unit, better, numerator, denominator in COMPARED:
        cells: dict[int, tuple[Cell, Cell]] = {}
        cohorts = {int(key[1]) for key in values[denominator] if key[1].isdigit()}
        for cohort in cohorts:
            steered, held = (Cell(values[denominator].get((g, str(cohort)), 0.0),
                                  values[numerator].get((g, str(cohort)), 0.0)) for g in GROUPS)
            cells[cohort] = (steered, held)
        found = effect(cells, settings)
        effects.append({
            "metric": name, "unit": unit, "better": better,
            "steered": found.steered, "holdout": found.holdout,
            "difference": found.difference,
            "difference_ci": _pair(found.difference_ci),
            "relative": found.relative, "relative_ci": _pair(found.relative_ci),
            "pods": {"steered": found.steered_units, "holdout": found.holdout_units},
            "workloads": {g: workloads.get((g,)) for g in GROUPS},
            "cohorts": {"steered": found.steered_cohorts, "holdout": found.holdout_cohorts},
            "verdict": found.verdict,
        })
    on = any(value > 0 for value in values["h_starts"].values())
    return {"on": on, "confidence": settings.confidence, "effects": effects,
            "pull_buckets": {g: [[bound, count] for bound, count in pulls_by_group[g].buckets]
                             for g in GROUPS if g in pulls_by_group}}


def _pair(interval: Interval | None) -> list[float] | None:
    return None if interval is None else [interval.low, interval.high]

