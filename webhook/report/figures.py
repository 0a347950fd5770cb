"""What `layer-locality report` prints: the operator's before/after, from metric samples.

Pure: the samples come either from one webhook's /metrics (totals since that process started)
or from Prometheus (`increase(...[window])` summed over every replica, see webhook.report.promread);
both arrive as the same flat samples, so the figures are computed once, here. Quantiles are
interpolated from histogram buckets exactly as Prometheus' `histogram_quantile` does, so the
report and the dashboard read the same numbers from the same buckets.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TypedDict

import orjson

from webhook.report.effects import Cell, EffectSettings, Interval, effect

Labels = tuple[str, ...]
Sample = tuple[str, Mapping[str, str], float]  # (sample name, labels, value)
Buckets = Sequence[tuple[float, float]]  # (upper bound `le`, cumulative count)
DAY = 86400.0
WEBHOOK_TIMEOUT_SECONDS = 2  # timeoutSeconds in manifests/base/mutatingwebhookconfiguration.yaml
NA = "n/a"


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


def counters(samples: Iterable[Sample], series: Series) -> dict[Labels, float]:
    """A counter's (or gauge's) values summed by the series' labels; {} when absent."""
    totals: dict[Labels, float] = {}
    wanted = series.metric if series.gauge else f"{series.metric}_total"
    for name, labels, value in samples:
        if name == wanted:
            key = tuple(labels.get(label, "") for label in series.by)
            totals[key] = totals.get(key, 0.0) + value
    return totals


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


def as_json(doc: ReportDoc) -> bytes:
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"


def as_table(doc: ReportDoc) -> str:
    """The report as aligned text; n/a where a metric is missing or has no observations."""
    follow, present, pulls = doc["follow"], doc["present"], doc["pull_seconds"]
    binds, reviews = follow["binds"], doc["reviews"]
    span = doc["span_seconds"]
    both = ("patched", "not patched")
    rows: list[tuple[str, Sequence[str]]] = [
        ("Does the scheduler follow the preferences?", ()),
        ("  binds: top / preferred / other", [_slash(binds, OUTCOMES, _count)]),
        ("  followed rate (top + preferred)", [_pct(follow["followed_rate"])]),
        ("How much of a pod was already on its node?", ()),
        ("  bytes present at bind: median / mean",
         [f"{_pct(present['at_bind_p50'])} / {_pct(present['at_bind_mean'])}"]),
        ("", both),
        ("  image pulls already present",
         [_pct(present["pulls_present_share"][c]) for c in PATCHED]),
        ("Did pulls get faster?", both),
        ("  pull time p50", [_seconds(pulls[c]["p50"]) for c in PATCHED]),
        ("  pull time p95", [_seconds(pulls[c]["p95"]) for c in PATCHED]),
        ("Bytes avoided, upper bound (not measured: the holdout above is)", ()),
        ("  total / per day", [f"{_bytes(doc['bytes_avoided']['total'])} / "
                               f"{_bytes(doc['bytes_avoided']['per_day'])}"]),
        ("Review health", ()),
        ("  reviews: patched / skipped / error", [_slash(reviews["counts"], RESULTS, _count)]),
        ("  errors", [_pct(reviews["error_share"])]),
        (f"  latency p99 (webhook timeout {WEBHOOK_TIMEOUT_SECONDS} s)",
         [_seconds(reviews["p99_seconds"])]),
    ]
    width = max(len(label) for label, _ in rows) + 2
    lines = [f"layer-locality report: {doc['source']}",
             f"covering {_duration(span)}" if span is not None else "covering: n/a", ""]
    lines += holdout_lines(doc["holdout"])
    for label, cells in rows:
        lines.append((label.ljust(width) + "".join(c.ljust(14) for c in cells)).rstrip())
    lines += why_na(doc)
    return "\n".join(lines) + "\n"


def why_na(doc: ReportDoc) -> list[str]:
    """Why figures are n/a (or zero): what the webhook must see for them."""
    notes = []
    if not sum(doc["follow"]["binds"].values()):
        notes.append("no bind seen: the bind, bytes-present and bytes-avoided figures come "
                     "from live mode's pod watch (pods the webhook patched, once bound); a "
                     "static inventory (--demo, --nodes) has no pod watch, so they stay n/a")
    elif all(doc["pull_seconds"][c]["p50"] is None for c in PATCHED):
        notes.append("no image pull seen: pull figures come from the kubelet's Pulled events "
                     "(live mode's event watch; RBAC: list and watch events); a cluster "
                     "without kubelets (make cluster) has none")
    if not doc["reviews"]["counts"]:
        notes.append("no review seen: review health comes from the webhook's own /metrics "
                     "(layer_locality_reviews_total)")
    return ["", *(textwrap.fill(f"n/a: {note}", width=100, subsequent_indent="     ")
                  for note in notes)] if notes else []


def holdout_lines(doc: HoldoutDoc) -> list[str]:
    """The holdout's comparison as text: what steering changed, or why it cannot say."""
    confidence = f"{100 * doc['confidence']:.0f} %"
    lines = [f"What did steering change? Steered vs held-out workloads ({confidence} "
             "intervals, bootstrap over workloads)"]
    if not doc["on"]:
        return [*lines, "  no pods of the holdout experiment seen: turn it on (--holdout 0.2, "
                "see docs/monitoring.md), let workloads start pods, then run report again", ""]
    header = (f"  {'':<34}{'steered':>11}{'holdout':>11}  {'effect [interval]':<38}"
              f"{'pods s/h':>12}{'workloads s/h':>15}")
    lines.append(header)
    for e in doc["effects"]:
        fmt = _FORMATS[e["unit"]]
        cell = _effect_cell(e, fmt)
        workloads = "/".join(_count(w) if w is not None else NA
                             for w in (e["workloads"]["steered"], e["workloads"]["holdout"]))
        pods = f"{_count(e['pods']['steered'])}/{_count(e['pods']['holdout'])}"
        lines.append(f"  {e['metric']:<34}{_or_na(e['steered'], fmt):>11}"
                     f"{_or_na(e['holdout'], fmt):>11}  {cell:<38}{pods:>12}{workloads:>15}")
    short = [e for e in doc["effects"] if e["verdict"] == "not enough data"]
    if short and len(short) == len(doc["effects"]):
        cohorts = short[0]["cohorts"]
        lines.append(f"  not enough data to tell: each group needs {EFFECT_SETTINGS.min_units:.0f}"
                     f" pods in {EFFECT_SETTINGS.min_cohorts} cohorts of workloads (has "
                     f"{cohorts['steered']} steered, {cohorts['holdout']} held out); wait, or "
                     "raise --holdout")
    else:
        lines.extend(f"  {_verdict(e)}" for e in doc["effects"])
    lines.append("")
    return lines


def _effect_cell(e: EffectDoc, fmt: Callable[[float], str]) -> str:
    if e["difference"] is None:
        return NA
    text = _signed(e["difference"], fmt)
    if e["difference_ci"] is not None:
        low, high = e["difference_ci"]
        text += f" [{_signed(low, fmt)}, {_signed(high, fmt)}]"
    if e["relative"] is not None:
        text += f" ({100 * e['relative']:+.0f} %)"
    return text


def _verdict(e: EffectDoc) -> str:
    verdict = e["verdict"]
    if verdict == "not enough data":
        return f"{e['metric']}: not enough data to tell"
    if verdict == "no clear difference":
        return f"{e['metric']}: no clear difference"
    good = verdict == e["better"]
    return f"{e['metric']}: {verdict} with steering ({'better' if good else 'worse'})"


def _signed(value: float, fmt: Callable[[float], str]) -> str:
    return ("+" if value > 0 else "-" if value < 0 else "") + fmt(abs(value))


def _or_na(value: float | None, fmt: Callable[[float], str]) -> str:
    return NA if value is None else fmt(value)


def _share_fmt(value: float) -> str:
    return f"{100 * value:.1f}%"


def _seconds_fmt(value: float) -> str:
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _slash(values: Mapping[str, float], keys: Sequence[str], fmt: Callable[[float], str]) -> str:
    return " / ".join(fmt(values[k]) for k in keys) if values else NA


def _count(value: float) -> str:
    return f"{value:,.0f}"


def _pct(value: float | None) -> str:
    return NA if value is None else f"{100 * value:.1f}%"


def _seconds(value: float | None) -> str:
    if value is None:
        return NA
    return f"{value * 1000:.1f} ms" if value < 1 else f"{value:.2f} s"


def _bytes(value: float | None) -> str:
    if value is None:
        return NA
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(value) >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def _duration(seconds: float) -> str:
    if seconds >= DAY:
        return f"{seconds / DAY:.1f} days"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} hours"
    return f"{seconds / 60:.1f} minutes" if seconds >= 60 else f"{seconds:.0f} seconds"



_FORMATS: dict[str, Callable[[float], str]] = {"seconds": _seconds_fmt, "bytes": _bytes,
                                               "share": _share_fmt}
