"""`report --plot`: the holdout's plots are written as PNG images from the report's document,
and nothing is written (or overwritten) without an experiment."""

from __future__ import annotations

from pathlib import Path

from tests.unit.test_report_holdout import experiment, page
from webhook.report.figures import figures
from webhook.report.plots import plot  # matplotlib: the sim extra, which the tests install
from webhook.serving.metrics import Metrics

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
