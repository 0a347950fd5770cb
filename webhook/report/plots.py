"""`layer-locality report --plot DIR`: the holdout's comparison as PNG plots (matplotlib, the
`sim` extra). Reads the report's document only (webhook.report.figures); no figures are
computed here.

- `holdout-pull-times.png`: the distribution of kubelet image pull times (per container start,
  waits included) of steered and held-out pods, from the histogram's cumulative buckets;
- `holdout-effects.png`: each compared figure's relative effect (steered / held out - 1) with
  its interval (green: better with steering, red: worse, grey: no clear difference); a
  figure without enough data is left out, its label saying so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook.config import ConfigError

if TYPE_CHECKING:  # the CLI imports this module for its options: keep it light
    from webhook.report.figures import ReportDoc

COLOURS = {"steered": "tab:blue", "holdout": "tab:orange"}
NAMES = ("holdout-pull-times.png", "holdout-effects.png")
REPLACE_HELP = ("replace PNGs that already exist in the --plot directory (without it, a "
                "directory holding one, e.g. docs/images with the committed plots, is refused "
                "before any work)")


def check_plot_dir(out: Path | None, names: Sequence[str], replace: bool) -> None:
    """Before any work: refuse to overwrite plots already in `out` (the committed ones in
    docs/images, say) unless `replace` (--replace-plots) says so."""
    if out is None or replace:
        return
    existing = [name for name in names if (out / name).exists()]
    if existing:
        raise ConfigError(f"--plot {out}: would overwrite {', '.join(existing)}; give another "
                          "directory, or --replace-plots to overwrite them")


def save_figure(fig: Any, path: Path) -> Path:
    """Lay out, write as PNG at 100 dpi and close (the simulator's and the evaluation's plots
    too)."""
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def plot(doc: ReportDoc, out: Path) -> list[Path]:
    """The plots written (none when no pod of the holdout experiment was seen)."""
    holdout = doc["holdout"]
    if not holdout["on"]:
        return []
    import matplotlib  # first: not in the image (the sim extra)

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    fig, ax = plt.subplots(figsize=(7, 4))
    for group, buckets in holdout["pull_buckets"].items():
        finite = [(bound, count) for bound, count in buckets if bound != float("inf")]
        total = buckets[-1][1] if buckets else 0.0
        if not finite or total <= 0:
            continue
        ax.step([b for b, _ in finite], [c / total for _, c in finite], where="post",
                marker="o", color=COLOURS.get(group), label=f"{group} ({total:,.0f} pulls)")
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("image pull time, seconds (kubelet Pulled events, waits included)")
    ax.set_ylabel("share of pulls at most this long")
    ax.set_title("Image pull times: steered vs held-out workloads")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    written.append(save_figure(fig, out / "holdout-pull-times.png"))

    effects = holdout["effects"]
    fig, ax = plt.subplots(figsize=(7, 0.8 + 0.7 * len(effects)))
    for row, effect in enumerate(reversed(effects)):
        relative, interval = effect["relative"], effect["relative_ci"]
        label = f"{effect['metric']}\n({effect['verdict']})"
        ax.text(-0.02, row, label, transform=ax.get_yaxis_transform(), ha="right",
                va="center", fontsize=8)
        if relative is None or interval is None:  # not enough data: nothing to draw
            continue
        low, high = interval
        verdict = effect["verdict"]
        colour = ("grey" if verdict not in ("lower", "higher")
                  else "tab:green" if verdict == effect["better"] else "tab:red")
        ax.errorbar([100 * relative], [row], xerr=[[100 * (relative - low)],
                                                   [100 * (high - relative)]],
                    fmt="o", capsize=4, color=colour)
    ax.axvline(0.0, color="grey", linewidth=1)
    ax.set_yticks([])
    ax.set_ylim(-0.7, len(effects) - 0.3)
    confidence = f"{100 * holdout['confidence']:.0f} %"
    ax.set_xlabel(f"steered vs held out, % ({confidence} interval)")
    ax.set_title("What steering changed")
    ax.grid(axis="x", alpha=0.3)
    fig.subplots_adjust(left=0.4)
    written.append(save_figure(fig, out / "holdout-effects.png"))
    return written
