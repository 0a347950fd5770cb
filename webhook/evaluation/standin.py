"""The kubelet stand-in checked against real nodes: the same scenario (same node names, images,
bandwidth and operations) run once on real kubelets and containerd and once on fake nodes with
the stand-in, compared per mode on what placement depends on and produces: bytes pulled, heat,
downloading pods per node, and the share of pods that pulled nothing. A difference above
`BAR` is reported as a disagreement. Pure, except `plot`."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook.evaluation.report import EvalRun

BAR = 0.10
# The stand-in's pull time per downloaded layer on the real nodes' clock (x1), beside bytes /
# bandwidth. containerd fetches up to 3 layers of an image at once, so per-layer latency
# mostly overlaps: measured on the real nodes here (docs/evaluation.md).
LAYER_OVERHEAD = 0.3
MEASURES = ("bytes", "heat", "downloading pods per node", "pods that pulled nothing")


@dataclass(frozen=True, slots=True)
class Row:
    measure: str
    real: float
    stand_in: float

    @property
    def relative(self) -> float | None:
        """(stand-in - real) / real; None when real is 0 and the stand-in is not."""
        if self.real == 0:
            return 0.0 if self.stand_in == 0 else None
        return (self.stand_in - self.real) / self.real

    @property
    def agrees(self) -> bool:
        rel = self.relative
        return rel is not None and abs(rel) <= BAR


@dataclass(frozen=True, slots=True)
class Comparison:
    scenario: str
    mode: str
    runs: tuple[int, int]  # real, stand-in
    rows: tuple[Row, ...]


def _values(runs: Sequence[EvalRun]) -> dict[str, float]:
    def per_node(r: EvalRun) -> float:
        return statistics.fmean(p for _, _, p in r.per_node) if r.per_node else 0.0

    return {
        "bytes": statistics.fmean(r.metrics.bytes_pulled for r in runs),
        "heat": statistics.fmean(r.metrics.heat for r in runs),
        "downloading pods per node": statistics.fmean(per_node(r) for r in runs),
        "pods that pulled nothing": statistics.fmean(
            r.metrics.no_pull / r.metrics.pods if r.metrics.pods else 0.0 for r in runs),
    }


def compare(runs: Sequence[EvalRun], suffix: str) -> list[Comparison]:
    """Per (scenario, mode) with runs on both sides: the means side by side."""
    out = []
    for scenario in dict.fromkeys(r.scenario for r in runs if not r.scenario.endswith(suffix)):
        for mode in dict.fromkeys(r.mode for r in runs if r.scenario == scenario):
            real = [r for r in runs if r.scenario == scenario and r.mode == mode]
            stand_in = [r for r in runs if r.scenario == scenario + suffix and r.mode == mode]
            if not real or not stand_in:
                continue
            a, b = _values(real), _values(stand_in)
            out.append(Comparison(scenario, mode, (len(real), len(stand_in)),
                                  tuple(Row(m, a[m], b[m]) for m in MEASURES)))
    return out


def comparison_doc(c: Comparison) -> dict[str, Any]:
    return {"scenario": c.scenario, "mode": c.mode, "runs": {"real": c.runs[0],
                                                             "standIn": c.runs[1]},
            "rows": [{"measure": r.measure, "real": r.real, "standIn": r.stand_in,
                      "relative": r.relative, "agrees": r.agrees} for r in c.rows]}


def _fmt(measure: str, value: float) -> str:
    if measure == "bytes":
        return f"{value / (1 << 30):.2f} GiB"
    if measure == "pods that pulled nothing":
        return f"{100 * value:.0f} %"
    return f"{value:.1f}"


def table(comparisons: Sequence[Comparison]) -> str:
    if not comparisons:
        return ""
    lines = ["", f"real nodes vs the kubelet stand-in (same scenario; disagreement above "
                 f"{BAR:.0%})"]
    for c in comparisons:
        lines.append(f"  {c.scenario}, {c.mode} ({c.runs[0]} real, {c.runs[1]} stand-in runs)")
        for r in c.rows:
            rel = r.relative
            verdict = "n/a" if rel is None else f"{rel:+.0%}" + ("" if r.agrees else "  DIFFERS")
            lines.append(f"    {r.measure:<28} real {_fmt(r.measure, r.real):>10}   "
                         f"stand-in {_fmt(r.measure, r.stand_in):>10}   {verdict}")
    return "\n".join(lines) + "\n"


def plot(comparisons: Sequence[Comparison], out: Path) -> list[Path]:
    """eval-real-vs-stand-in.png: each measure, real and stand-in, per (scenario, mode)."""
    if not comparisons:
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, len(MEASURES), figsize=(4 * len(MEASURES), 3.6))
    labels = [f"{c.scenario}\n{c.mode}" for c in comparisons]
    for k, (ax, measure) in enumerate(zip(axes, MEASURES, strict=True)):
        real = [c.rows[k].real for c in comparisons]
        stand_in = [c.rows[k].stand_in for c in comparisons]
        scale = (1 << 30) if measure == "bytes" else 1.0
        xs = range(len(comparisons))
        ax.bar([x - 0.2 for x in xs], [v / scale for v in real], 0.4, label="real nodes",
               color="tab:green")
        ax.bar([x + 0.2 for x in xs], [v / scale for v in stand_in], 0.4, label="stand-in",
               color="tab:gray")
        ax.set_xticks(list(xs), labels, fontsize=7)
        ax.set_title(measure + (" (GiB)" if measure == "bytes" else ""), fontsize=9)
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path = out / "eval-real-vs-stand-in.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]
