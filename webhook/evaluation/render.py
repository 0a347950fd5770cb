"""`layer-locality evaluate`'s table and matplotlib PNGs, from report.py's summaries
(matplotlib is imported only when plotting). Pure but for `plot`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from webhook.evaluation.report import (
    METRICS,
    MODES,
    EvalRun,
    GiB,
    MiB,
    ScenarioSummary,
    Spread,
)
from webhook.report.plots import save_figure

# ---- table -------------------------------------------------------------------------------------

# field -> (label, scale, decimals of the mean, decimals of min..max)
_ROWS: dict[str, tuple[str, float, int, int]] = {
    "pods": ("pods started", 1.0, 1, 0),
    "bytes_pulled": ("bytes pulled GiB", 1.0 / GiB, 2, 2),
    "no_pull": ("pods pulling nothing", 1.0, 1, 0),
    "pull_mean": ("pull mean s", 1.0, 1, 1),
    "pull_p50": ("pull p50 s", 1.0, 1, 1),
    "pull_p95": ("pull p95 s", 1.0, 1, 1),
    "heat": ("heat", 1.0, 1, 0),
    "balance": ("cpu balance pts", 1.0, 1, 1),
    "unscheduled": ("unscheduled", 1.0, 1, 0),
    "patched": ("patched by webhook", 1.0, 1, 0),
}
LEGEND = (
    "Per metric: mean, min..max and sample stdev over every seed and repeat of a mode. Times\n"
    "are nominal seconds (bind -> images on the node); heat: most pods of one Deployment on\n"
    "one node at once; cpu balance: stdev across nodes of the cpu allocated at the end\n"
    "(percentage points). Oracle: the simulator's oracle on each run's observed trace.\n"
    "% of the oracle = (stock - webhook) / (stock - oracle), mean bytes. Simulator vs real:\n"
    "the simulator replaying each run's trace vs the run itself, (sim - real) / real.\n")


def size(value: float) -> str:
    return f"{value / GiB:.2f} GiB" if abs(value) >= GiB else f"{value / MiB:.0f} MiB"


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.1%}" if signed else f"{value:.0%}"


def _cell(s: Spread | None, scale: float, decimals: int, range_decimals: int) -> str:
    if s is None:
        return f"{'':>8} {'':>17} {'':>7}"
    span = f"{s.low * scale:.{range_decimals}f}..{s.high * scale:.{range_decimals}f}"
    sd = "-" if s.stdev is None else f"{s.stdev * scale:.{decimals}f}"
    return f"{s.mean * scale:>8.{decimals}f} {span:>17} {sd:>7}"


def scenario_table(s: ScenarioSummary) -> str:
    modes = [m for m in MODES if m in s.modes] + [m for m in s.modes if m not in MODES]
    runs = ", ".join(f"{s.modes[m].runs} {m}" for m in modes)
    seeds = ",".join(str(x) for x in s.seeds)
    lines = [f"{s.scenario}: seeds {seeds}; {runs} runs", ""]
    for block in (modes[k:k + 2] for k in range(0, len(modes), 2)):  # 100 columns at most
        lines.append(f"{'':<20}" + "".join(f"  {m.upper():<34}" for m in block).rstrip())
        lines.append(f"{'METRIC':<20}" + f"  {'mean':>8} {'min..max':>17} {'sd':>7}" * len(block))
        for field in METRICS:
            label, scale, dec, rdec = _ROWS.get(field, (field, 1.0, 2, 2))
            lines.append(f"{label:<20}" + "".join(
                "  " + _cell(s.modes[m].metrics.get(field), scale, dec, rdec) for m in block))
        lines.append(f"{'wall s':<20}" + "".join(
            "  " + _cell(s.modes[m].wall_seconds, 1.0, 0, 0) for m in block))
        lines.append("")
    notes = [f"{m}: {s.modes[m].unsettled} run(s) not settled" for m in modes
             if s.modes[m].unsettled]
    notes += [f"{m}: {s.modes[m].write_errors} kubelet stand-in write errors" for m in modes
              if s.modes[m].write_errors]
    lines += [f"  warning: {n}" for n in notes]
    running = [f"{m} {times[0]:.1f} / {times[1]:.1f}" for m in modes
               if (times := s.modes[m].running) is not None]
    if running:
        lines.append(f"  bind -> Running s    p50 / p95 (every pod, real nodes): "
                     f"{'; '.join(running)}")
    if s.oracle_bytes is not None:
        heat = "-" if s.oracle_heat is None else f"{s.oracle_heat:.1f}"
        lines.append(f"  oracle (simulated)   bytes {size(s.oracle_bytes)}, heat {heat}")
    if s.reduction is not None:
        pairs = s.pair_shares
        per_pair = "" if pairs is None else (
            f" (repeat pairs {_pct(pairs.low)}..{_pct(pairs.high)}"
            + ("" if pairs.stdev is None else f", sd {_pct(pairs.stdev)}") + ")")
        lines.append(f"  webhook vs stock     {_pct(-s.reduction, signed=True)} bytes; "
                     f"{_pct(s.share_of_oracle)} of the oracle{per_pair}")
    if "stock" in s.modes and "webhook" in s.modes:
        ratio = "-" if s.heat_vs_stock is None else f"{s.heat_vs_stock:.2f}x"
        oracle = "" if s.oracle_heat is None else f"; oracle {s.oracle_heat:.1f}"
        lines.append(f"  heat                 webhook {s.modes['webhook'].metrics['heat'].mean:.1f}"
                     f" = {ratio} stock ({s.modes['stock'].metrics['heat'].mean:.1f}){oracle}")
    for x in s.splits if len(s.splits) > 1 or any(x.reviews for x in s.splits) else ():
        pairs = x.pair_shares
        per_pair = "" if pairs is None else f" (pairs {_pct(pairs.low)}..{_pct(pairs.high)})"
        reduction = "-" if x.reduction is None else _pct(-x.reduction, signed=True)
        lines.append(f"  {x.mode:<20} {reduction} bytes; {_pct(x.share_of_oracle)} of the "
                     f"oracle{per_pair}; heat max {x.heat.high:.0f}")
        reviews = [f"{'/'.join(map(str, r))} ({c} conn.)"
                   for r, c in zip(x.reviews, x.connections, strict=False) if r]
        for k in range(0, len(reviews), 5):
            lines.append(f"{'':<23}reviews per replica: {', '.join(reviews[k:k + 5])}")
    if s.causes:
        lost = ", ".join(f"{cause} {size(b)}" for cause, b in s.causes.items() if b > 0)
        lines.append(f"  lost bytes by cause (the simulator's replays of the opted-in runs, "
                     f"core/causes.py): {lost or 'none'}")
    if s.agreement:
        lines.append("  simulator vs real (replays of the observed traces):")
        for a in s.agreement:
            if a.what.endswith("bytes"):
                sim, real = size(a.simulated), size(a.real)
            else:
                sim, real = f"{a.simulated:.1f}", f"{a.real:.1f}"
            lines.append(f"    {a.what:<14} sim {sim:>10}  real {real:>10}  "
                         f"{_pct(a.relative, signed=True):>7}  bar {a.bar:.0%}  "
                         f"{'met' if a.met else 'MISSED'}")
    return "\n".join(lines) + "\n"


def table(summaries: Sequence[ScenarioSummary], meta: Mapping[str, Any] | None = None,
          failed: Sequence[Mapping[str, Any]] = ()) -> str:
    meta = meta or {}
    out = []
    if meta:
        bandwidth, clock = meta.get("bandwidth"), meta.get("clockScale")
        scale = "?" if clock is None else f"{clock:g}"
        head = (f"Kubernetes {meta.get('kubernetesVersion', '?')} (real scheduler), "
                f"{meta.get('nodes', '?')} nodes, clock x{scale}, "
                f"{size(bandwidth) if bandwidth else '?'}/s per node, "
                f"{meta.get('repeats', '?')} repeat(s)")
        if meta.get("wallSeconds") is not None:
            head += f", {meta['wallSeconds'] / 60:.1f} min"
        args = meta.get("webhookArgs") or []
        if args:
            head += f"\nwebhook args: {' '.join(args)}"
        out.append(head + "\n")
    for s in summaries:
        out.append(scenario_table(s))
    if failed:
        out.append(f"{len(failed)} run(s) failed: " + "; ".join(
            f"{f.get('scenario')} seed {f.get('seed')} {f.get('mode')} repeat "
            f"{int(f.get('repeat', 0)) + 1}" for f in failed) + "\n")
    if not summaries:
        out.append("no run finished\n")
    out.append(LEGEND)
    return "\n".join(out)


# ---- plots -------------------------------------------------------------------------------------

COLOURS = {"stock": "tab:gray", "webhook": "tab:blue", "webhook-one": "tab:orange",
           "webhook-even": "tab:purple", "oracle": "tab:green"}


def plot(runs: Sequence[EvalRun], summaries: Sequence[ScenarioSummary], out: Path
         ) -> list[Path]:
    """eval-bytes.png: mean bytes per mode per scenario, min..max error bars, the oracle;
    eval-pull-times.png: per scenario, the CDF of per-pod pull times per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written = []
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    shown = [m for m in COLOURS if any(m in s.modes for s in summaries)]
    width = 0.7 / max(2, len(shown))
    oracle_labelled = False
    for i, s in enumerate(summaries):
        for j, mode in enumerate(m for m in shown if m in s.modes):
            b = s.modes[mode].metrics["bytes_pulled"]
            x = i + (j - (len(shown) - 1) / 2) * width
            ax.bar(x, b.mean / GiB, width, color=COLOURS[mode],
                   yerr=[[(b.mean - b.low) / GiB], [(b.high - b.mean) / GiB]], capsize=4,
                   label=mode if i == 0 else None)
        if s.oracle_bytes is not None:
            label: dict[str, Any] = {} if oracle_labelled else {"label": "oracle (simulated)"}
            half = width * len(shown) / 2 + width * 0.1
            ax.hlines(s.oracle_bytes / GiB, i - half, i + half,
                      colors=COLOURS["oracle"], linestyles="dashed", **label)
            oracle_labelled = True
    ax.set_xticks(range(len(summaries)), [s.scenario for s in summaries])
    ax.set_ylabel("bytes pulled per run (GiB)")
    ax.set_title("Bytes pulled on the real scheduler (mean, min..max)")
    ax.legend()
    ax.grid(alpha=0.3, axis="y")
    written.append(save_figure(fig, out / "eval-bytes.png"))

    names = [s.scenario for s in summaries]
    fig, axes = plt.subplots(1, max(1, len(names)), figsize=(5.2 * max(1, len(names)), 4.0),
                             dpi=100, squeeze=False)
    for ax, name in zip(axes[0], names, strict=False):
        for mode in shown:
            values = sorted(t for r in runs if r.scenario == name and r.mode == mode
                            for t in r.pull_seconds)
            if not values:
                continue
            n = len(values)
            ax.step(values, [(k + 1) / n for k in range(n)], where="post", label=mode,
                    color=COLOURS[mode])
        ax.set_xscale("symlog", linthresh=1.0)
        ax.set_xlabel("pull time per pod (nominal s, symlog)")
        ax.set_ylabel("share of pods")
        ax.set_title(f"{name}: pull-time CDF (all runs)")
        ax.legend(loc="lower right")
        ax.grid(alpha=0.3)
    written.append(save_figure(fig, out / "eval-pull-times.png"))
    return written
