"""`report --plot`: the holdout's plots are written as PNG images from the report's document,
and nothing is written (or overwritten) without an experiment. Every --plot keeps existing
plots unless --replace-plots; the sweep plot's labels do not overlap."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_report_holdout import experiment, page
from webhook.cli import main
from webhook.evaluation.command import PLOT_NAMES as EVAL_PLOT_NAMES
from webhook.report.figures import figures
from webhook.report.plots import NAMES as PLOT_NAMES
from webhook.report.plots import plot  # matplotlib: the sim extra, which the tests install
from webhook.serving.metrics import Metrics
from webhook.sim.command import PLOT_NAMES as SIM_PLOT_NAMES
from webhook.sim.report import place_labels

PNG = b"\x89PNG\r\n\x1a\n"


def test_plots_of_an_experiment(tmp_path: Path) -> None:
    metrics, _ = experiment(120, steered_factor=0.4)
    written = plot(figures(page(metrics), None, "test"), tmp_path / "plots")
    assert [p.name for p in written] == ["holdout-pull-times.png", "holdout-effects.png"]
    for path in written:
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 5_000, path


def test_no_experiment_no_plot(tmp_path: Path) -> None:
    metrics = Metrics()
    metrics.live_inventory()
    assert plot(figures(page(metrics), None, "test"), tmp_path / "plots") == []
    assert not (tmp_path / "plots").exists()


def test_existing_plots_are_kept_unless_replace_is_given(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--plot DIR` where DIR already holds one of the command's plots (docs/images and its
    committed PNGs, say) is refused before any work; --replace-plots overwrites."""
    out = tmp_path / "images"
    out.mkdir()
    for command, names, args in (
            (["report", "--url", "http://127.0.0.1:1/metrics"], PLOT_NAMES, []),
            (["simulate", "--nodes", "3", "--hours", "0.1", "--policies", "stock"],
             SIM_PLOT_NAMES, []),
            (["evaluate", "--repeats", "1"], EVAL_PLOT_NAMES, [])):
        committed = out / names[-1]
        committed.write_bytes(b"committed")
        assert main([*command, *args, "--plot", str(out)], env={}) == 2
        err = capsys.readouterr().err
        assert f"--plot {out}: would overwrite {names[-1]}" in err and "--replace-plots" in err
        assert committed.read_bytes() == b"committed"
    assert main(["simulate", "--nodes", "3", "--hours", "0.1", "--policies", "stock",
                 "--output", "json", "--plot", str(out), "--replace-plots"], env={}) == 0
    written = {p.name for p in out.iterdir() if p.read_bytes().startswith(PNG)}
    assert written and written <= set(SIM_PLOT_NAMES)


def test_crowded_labels_do_not_overlap() -> None:
    """The calibration sweep's labels: a dozen points in one spot get a dozen separate
    labels, each inside the axes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.text import Annotation, Text

    fig, ax = plt.subplots(figsize=(6, 4), dpi=100)
    points = [(f"calibration-{i}", 1.1 + 0.002 * (i % 4), 50 + 0.3 * i) for i in range(12)]
    points += [("far", 2.0, 10.0), ("default", 1.104, 51.0)]
    ax.scatter([x for _, x, _ in points], [y for _, _, y in points])
    ax.set_xlim(0.9, 2.2)
    ax.set_ylim(0, 80)
    place_labels(ax, points, bold="default")
    canvas: Any = fig.canvas  # Agg: has a renderer
    renderer = canvas.get_renderer()
    labels = [t for t in ax.texts if isinstance(t, Annotation)]
    assert sorted(t.get_text() for t in labels) == sorted(name for name, _, _ in points)
    boxes = []
    for text in labels:
        text.update_positions(renderer)
        boxes.append(Text.get_window_extent(text, renderer))
    frame = ax.get_window_extent(renderer)
    for i, box in enumerate(boxes):
        assert frame.x0 <= box.x0 <= box.x1 <= frame.x1
        assert frame.y0 <= box.y0 <= box.y1 <= frame.y1
        assert not any(box.overlaps(other) for other in boxes[i + 1:]), labels[i].get_text()
    plt.close(fig)
