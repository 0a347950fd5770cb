"""Simulation output: tables, a JSON document and matplotlib PNGs (matplotlib is imported only
when plotting). Metric definitions: results.py. Seeds are reported one by one, then summarised
per group (tuning seeds, held-out seeds) so that a calibration chosen on the first is checked
on the second."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from webhook.report.plots import save_figure
from webhook.sim.results import RunResult, SeedRun, SweepPoint, reduction

MiB = 1 << 20
GiB = 1 << 30
GROUPS = ("tuning", "held-out")


def summary(result: RunResult, stock: RunResult | None = None) -> dict[str, Any]:
    return {
        "policy": result.policy,
        "pods": result.pods,
        "scheduled": result.scheduled,
        "bytesPulled": result.bytes_pulled,
        "bytesNeeded": result.bytes_needed,
        "reductionVsStock": reduction(result, stock),
        "pullSeconds": {"p50": result.percentile(50), "p95": result.percentile(95),
                        "mean": result.mean_pull},
        "coldStarts": result.cold_starts,
        "schedulingFailures": {"podsThatWaited": result.waited,
                               "neverScheduled": result.unscheduled},
        "maxPodsOfOneWorkloadPerNode": result.max_heat,
        "meanMaxPodsPerNode": result.mean_heat,
        "nodeCpuAllocation": {"mean": result.mean_util, "stdevAcrossNodes": result.imbalance,
                              "maxStdevAcrossNodes": result.max_imbalance,
                              "rangeAcrossNodes": result.mean_range},
        "webhook": {"reviews": result.reviews, "patched": result.patched,
                    "reasons": result.reasons} if result.reviews else None,
    }


def share_of_oracle(result: RunResult, results: Mapping[str, RunResult]) -> float | None:
    """This policy's reduction vs stock as a share of the oracle's (same seed)."""
    stock, oracle = results.get("stock"), results.get("oracle")
    if stock is None or oracle is None:
        return None
    best, got = reduction(oracle, stock), reduction(result, stock)
    return got / best if best and got is not None else None


def document(runs: Sequence[SeedRun], meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    seeds = []
    for r in runs:
        stock = r.results.get("stock")
        hook = r.results.get("webhook")
        seeds.append({
            "seed": r.seed, "group": r.group, "pods": r.pods, "nodes": r.nodes,
            "seconds": r.seconds,
            "policies": [summary(x, stock) for x in r.results.values()],
            "webhookShareOfOracle": share_of_oracle(hook, r.results) if hook else None,
            "sweep": [{"label": p.label, "minBytes": p.scoring.min_bytes,
                       "fullBytes": p.scoring.full_bytes, "maxWeight": p.scoring.max_weight,
                       "baseline": p.scoring.baseline, "watchDelay": p.view.watch_delay,
                       "registryDelay": p.view.registry_delay,
                       "shareOfOracle": share_of_oracle(p.result, r.results),
                       **summary(p.result, stock)} for p in r.sweep],
        })
    groups: dict[str, Any] = {}
    for group in GROUPS:
        members = [r for r in runs if r.group == group]
        if members:
            groups[group] = {"seeds": [r.seed for r in members],
                             "policies": [aggregate(members, name) for name in _names(members)],
                             "sweep": [aggregate(members, label, sweep=True)
                                       for label in _labels(members)]}
    return {"meta": dict(meta or {}), "seeds": seeds, "summary": groups}


def aggregate(runs: Sequence[SeedRun], name: str, sweep: bool = False) -> dict[str, Any]:
    """One policy (or sweep point) over the seeds of a group: means, and the worst seed."""
    rows: list[tuple[RunResult, Mapping[str, RunResult]]] = []
    for r in runs:
        found = _find(r, name, sweep)
        if found is not None:
            rows.append((found, r.results))
    saved = [x for x in (reduction(res, all_.get("stock")) for res, all_ in rows) if x is not None]
    shares = [x for x in (share_of_oracle(res, all_) for res, all_ in rows) if x is not None]
    return {
        "policy": name, "seeds": len(rows),
        "reductionVsStock": _stats(saved),
        "shareOfOracle": _stats(shares),
        "pullP50": _mean([res.percentile(50) for res, _ in rows]),
        "pullP95": _mean([res.percentile(95) for res, _ in rows]),
        "coldStarts": _mean([res.cold_starts for res, _ in rows]),
        "maxHeat": max((res.max_heat for res, _ in rows), default=0),
        "meanHeat": _mean([res.mean_heat for res, _ in rows]),
        "cpuImbalance": _mean([res.imbalance for res, _ in rows]),
    }


def _find(run: SeedRun, name: str, sweep: bool) -> RunResult | None:
    if not sweep:
        return run.results.get(name)
    return next((p.result for p in run.sweep if p.label == name), None)


def _names(runs: Sequence[SeedRun]) -> list[str]:
    return list(dict.fromkeys(n for r in runs for n in r.results))


def _labels(runs: Sequence[SeedRun]) -> list[str]:
    return list(dict.fromkeys(p.label for r in runs for p in r.sweep))


def _stats(values: Sequence[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"mean": statistics.fmean(values), "min": min(values), "max": max(values)}


def _mean(values: Sequence[float]) -> float:
    return statistics.fmean(values) if values else 0.0


_HEAD = (f"{'POLICY':<14} {'PULLED':>9} {'VS STOCK':>8} {'P50 s':>6} {'P95 s':>6} "
         f"{'MEAN s':>6} {'COLD':>5} {'WAITED':>6} {'UNSCHED':>7} {'HEAT':>4} "
         f"{'HEAT~':>5} {'CPU':>4} {'IMBAL':>5} {'/ORACLE':>7}")
LEGEND = (
    "PULLED: bytes downloaded; P50/P95/MEAN: pull time per pod (bind -> images ready); "
    "COLD: pods that waited on a pull;\n"
    "WAITED/UNSCHED: pods that failed a scheduling attempt / were never placed; "
    "HEAT: max pods of one Deployment on one node,\n"
    "HEAT~: its mean over multi-replica Deployments; CPU: mean node cpu allocation; IMBAL: "
    "stdev across nodes of node cpu allocation\n"
    "(percentage points, mean over 5-minute samples); /ORACLE: the reduction vs stock as a "
    "share of the oracle's.\n")


def table(run: SeedRun) -> str:
    """One seed: a row per policy, then per sweep point."""
    stock = run.results.get("stock")
    lines = [_HEAD]
    rows: list[tuple[str, RunResult]] = list(run.results.items())
    rows += [(f"  {p.label}", p.result) for p in run.sweep]
    for label, r in rows:
        share = share_of_oracle(r, run.results) if r.policy not in ("stock", "oracle") else None
        lines.append(
            f"{label:<14} {r.bytes_pulled / GiB:>5.1f} GiB {_pct(reduction(r, stock)):>8} "
            f"{r.percentile(50):>6.1f} {r.percentile(95):>6.1f} {r.mean_pull:>6.1f} "
            f"{r.cold_starts:>5} {r.waited:>6} {r.unscheduled:>7} {r.max_heat:>4} "
            f"{r.mean_heat:>5.2f} {r.mean_util:>4.0%} {100 * r.imbalance:>5.1f} "
            f"{_share(share):>7}")
    return "\n".join(lines) + "\n"


def seeds_table(runs: Sequence[SeedRun]) -> str:
    """A row per seed: each policy's reduction vs stock, the webhook's share of the oracle's,
    each policy's heat."""
    names = _names(runs)
    saved = [n for n in names if n != "stock"]
    lines = [f"{'SEED':>4} {'GROUP':<9} {'PODS':>5} {'SECS':>5}  "
             + " ".join(f"{n[:8]:>8}" for n in saved) + f"  {'/ORACLE':>7}  HEAT "
             + " ".join(f"{n[:8]:>8}" for n in names)]
    for r in runs:
        stock, hook = r.results.get("stock"), r.results.get("webhook")
        cells = [_pct(reduction(r.results[n], stock)) if n in r.results else "" for n in saved]
        heats = [str(r.results[n].max_heat) if n in r.results else "" for n in names]
        share = share_of_oracle(hook, r.results) if hook else None
        lines.append(f"{r.seed:>4} {r.group:<9} {r.pods:>5} {r.seconds:>5.1f}  "
                     + " ".join(f"{c:>8}" for c in cells) + f"  {_share(share):>7}       "
                     + " ".join(f"{h:>8}" for h in heats))
    lines.append("")
    lines.append("Per seed: bytes pulled vs stock per policy, the webhook's share of the oracle's"
                 " reduction, HEAT per policy.")
    return "\n".join(lines) + "\n"


def summary_table(runs: Sequence[SeedRun]) -> str:
    """Per group (tuning, held-out): each policy and sweep point over the group's seeds."""
    lines = [f"{'GROUP':<9} {'POLICY':<14} {'SEEDS':>5} {'VS STOCK':>8} {'WORST':>6} "
             f"{'/ORACLE':>7} {'WORST':>6} {'P50 s':>6} {'P95 s':>6} {'COLD':>6} {'HEAT':>4} "
             f"{'HEAT~':>5} {'IMBAL':>5}"]
    for group in GROUPS:
        members = [r for r in runs if r.group == group]
        if not members:
            continue
        entries = [(n, aggregate(members, n)) for n in _names(members)]
        entries += [(f"  {n}", aggregate(members, n, sweep=True)) for n in _labels(members)]
        for label, a in entries:
            saved, share = a["reductionVsStock"] or {}, a["shareOfOracle"] or {}
            if label in ("stock", "oracle"):
                share = {}  # 0 % and 100 % by definition
            lines.append(
                f"{group:<9} {label:<14} {a['seeds']:>5} {_pct(saved.get('mean')):>8} "
                f"{_pct(saved.get('min')):>6} {_share(share.get('mean')):>7} "
                f"{_share(share.get('min')):>6} {a['pullP50']:>6.1f} {a['pullP95']:>6.1f} "
                f"{a['coldStarts']:>6.0f} {a['maxHeat']:>4} {a['meanHeat']:>5.2f} "
                f"{100 * a['cpuImbalance']:>5.1f}")
    lines.append("")
    lines.append("Means over the group's seeds; WORST: the seed with the least reduction / share;"
                 " HEAT: the worst seed.")
    return "\n".join(lines) + "\n"


def report(runs: Sequence[SeedRun]) -> str:
    out = []
    for r in runs:
        out.append(f"seed {r.seed} ({r.group}): {r.pods} pods on {r.nodes} nodes, "
                   f"{r.seconds:.1f} s\n")
        out.append(table(r))
    if len(runs) > 1:
        out.append(seeds_table(runs))
        out.append(summary_table(runs))
    out.append(LEGEND)
    return "\n".join(out)


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{-value:+.0%}"


def plot(results: Mapping[str, RunResult], sweep: Sequence[SweepPoint], out: Path
         ) -> list[Path]:
    """Write bytes-over-time, pull-time CDF and (with a sweep) the calibration trade-off."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written = []
    styles = {"stock": "tab:gray", "webhook": "tab:blue", "plugin": "tab:orange",
              "oracle": "tab:green", "greedy": "tab:red"}

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for name, r in results.items():
        xs = [0.0] + [t / 3600 for t, _ in r.timeline]
        ys = [0.0] + [b / GiB for _, b in r.timeline]
        ax.step(xs, ys, where="post", label=name, color=styles.get(name))
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("cumulative bytes pulled (GiB)")
    ax.set_title("Bytes pulled over time")
    ax.legend()
    ax.grid(alpha=0.3)
    written.append(save_figure(fig, out / "sim-bytes-over-time.png"))

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for name, r in results.items():
        values = sorted(r.pull_times)
        if not values:
            continue
        n = len(values)
        ax.step(values, [(i + 1) / n for i in range(n)], where="post", label=name,
                color=styles.get(name))
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("pull time per pod (s, symlog)")
    ax.set_ylabel("share of pods")
    ax.set_title("Pull-time CDF")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    written.append(save_figure(fig, out / "sim-pull-time-cdf.png"))

    stock = results.get("stock")
    if sweep and stock is not None:
        # Left: every policy and the calibrations; right: the calibrations alone, zoomed, each
        # labelled (they save about the same and crowd one spot on the left).
        fig, (ax, zoom) = plt.subplots(1, 2, figsize=(11.5, 5.0), dpi=100,
                                       gridspec_kw={"width_ratios": [1, 1.25]})
        # Colour: node CPU-allocation imbalance, the third axis of the frontier.
        xs = [p.result.mean_heat for p in sweep]
        ys = [100 * (reduction(p.result, stock) or 0.0) for p in sweep]
        imbalance = [100 * p.result.imbalance for p in sweep]
        norm = matplotlib.colors.Normalize(min(imbalance), max(imbalance))
        for panel in (ax, zoom):
            dots = panel.scatter(xs, ys, c=imbalance, cmap="viridis", norm=norm, s=28, zorder=3)
            for p, x, y in zip(sweep, xs, ys, strict=True):
                if p.label == "default":
                    panel.scatter([x], [y], marker="*", s=260, facecolors="none",
                                  edgecolors="black", linewidths=1.2, zorder=4,
                                  label="chosen default")
            panel.grid(alpha=0.3)
            panel.set_xlabel("heating: mean over Deployments of max pods on one node")
        fig.colorbar(dots, ax=zoom, label="node CPU-allocation imbalance (stdev, points)")
        for name in ("stock", "plugin", "oracle", "greedy"):
            if name in results:
                r = results[name]
                red = reduction(r, stock) or 0.0
                ax.scatter(r.mean_heat, 100 * red, marker="s", color=styles[name], label=name)
        ax.set_ylabel("bytes pulled saved vs stock (%)")
        ax.set_title("Savings vs heating: policies and calibrations")
        ax.legend(loc="lower right", fontsize=8)
        span_x, span_y = max(xs) - min(xs) or 0.1, max(ys) - min(ys) or 5.0
        zoom.set_xlim(min(xs) - 0.35 * span_x, max(xs) + 0.35 * span_x)
        zoom.set_ylim(min(ys) - 0.15 * span_y, max(ys) + 0.15 * span_y)
        zoom.set_title("The webhook's calibrations (zoomed)")
        (x0, x1), (y0, y1) = zoom.get_xlim(), zoom.get_ylim()
        ax.add_patch(matplotlib.patches.Rectangle((x0, y0), x1 - x0, y1 - y0, fill=False,
                                                  edgecolor="0.4", linestyle="--", lw=0.8))
        place_labels(zoom, [(p.label, x, y) for p, x, y in zip(sweep, xs, ys, strict=True)],
                     bold="default")
        written.append(save_figure(fig, out / "sim-calibration-sweep.png"))
    return written


def place_labels(ax: Any, points: Sequence[tuple[str, float, float]], bold: str = "") -> None:
    """Label each point where the label overlaps no other label, no point, the legend and
    stays inside the axes: offsets on growing rings around the point are tried in turn, the
    first free one wins, with a leader line once away from the point. Points in a tight
    cluster (most calibrations save about the same) then fan their labels out around it."""
    import math

    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

    fig = ax.figure
    fig.tight_layout()  # the final layout first: positions are measured in display space
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    taken = []
    for label, x, y in points:
        px, py = ax.transData.transform((x, y))
        half = 12 if label == bold else 4  # the star around the chosen point is larger
        taken.append(Bbox.from_extents(px - half, py - half, px + half, py + half))
    legend = ax.get_legend()
    if legend is not None:
        taken.append(legend.get_window_extent(renderer))
    # the chosen point first, then from the top down
    order = sorted(points, key=lambda p: (p[0] != bold, -p[2]))
    rings = [(6.0 + 11.0 * ring, 8 + 4 * ring) for ring in range(9)]
    for label, x, y in order:
        placed = None
        for radius, steps in rings:
            for step in range(steps):
                angle = 2 * math.pi * step / steps + math.pi / 4
                dx, dy = radius * math.cos(angle), radius * math.sin(angle)
                text = ax.annotate(
                    label, (x, y), xytext=(dx, dy), textcoords="offset points", fontsize=7,
                    fontweight="bold" if label == bold else "normal",
                    ha="left" if dx >= -1 else "right", va="bottom" if dy >= -1 else "top",
                    arrowprops=(dict(arrowstyle="-", color="0.5", lw=0.6, shrinkA=0,
                                     shrinkB=3) if radius > 10 else None))
                text.update_positions(renderer)
                box = Text.get_window_extent(text, renderer).expanded(1.05, 1.15)
                inside = (box.x0 >= frame.x0 and box.x1 <= frame.x1 and box.y0 >= frame.y0
                          and box.y1 <= frame.y1)
                if inside and not any(box.overlaps(other) for other in taken):
                    placed = box
                    break
                text.remove()
            if placed is not None:
                break
        if placed is None:  # no free place: the first choice, as before
            ax.annotate(label, (x, y), xytext=(3, 3), textcoords="offset points", fontsize=7)
        else:
            taken.append(placed)
