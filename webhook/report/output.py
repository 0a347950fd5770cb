"""How `layer-locality report` prints its document (`--output`): aligned text, with the
holdout's comparison first and why a figure is n/a last, or JSON."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping, Sequence

import orjson

from webhook.report.figures import (
    DAY,
    EFFECT_SETTINGS,
    OUTCOMES,
    PATCHED,
    RESULTS,
    EffectDoc,
    HoldoutDoc,
    ReportDoc,
)

WEBHOOK_TIMEOUT_SECONDS = 2  # timeoutSeconds in manifests/base/mutatingwebhookconfiguration.yaml
NA = "n/a"


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
