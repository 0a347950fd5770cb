"""Reading a /metrics page (webhook.report.promread.parse) and summing its samples
(webhook.report.series.sum_by and total), as the report and the benchmarks read them."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from webhook.report.promread import parse
from webhook.report.series import sum_by, total


def _page() -> str:
    """A page as prometheus_client writes it: a labelled counter (with its _created samples),
    a histogram and a labelled gauge."""
    registry = CollectorRegistry()
    reviews = Counter("ll_reviews", "Reviews.", ["result", "reason"], registry=registry)
    reviews.labels("patched", "scored").inc(3)
    reviews.labels("patched", "memo").inc(2)
    reviews.labels("skipped", "").inc(4)
    seconds = Histogram("ll_review_seconds", "Review time.", buckets=(0.01, 0.1),
                        registry=registry)
    for value in (0.005, 0.05, 0.5):
        seconds.observe(value)
    objects = Gauge("ll_objects", "Objects held.", ["state"], registry=registry)
    objects.labels("fresh").set(7)
    objects.labels("stale").set(2)
    return generate_latest(registry).decode()


def test_parse_gives_every_sample_with_its_labels() -> None:
    samples = parse(_page())
    assert ("ll_reviews_total", {"result": "patched", "reason": "scored"}, 3.0) in samples
    assert ("ll_review_seconds_bucket", {"le": "0.1"}, 2.0) in samples
    assert ("ll_review_seconds_count", {}, 3.0) in samples
    assert ("ll_objects", {"state": "stale"}, 2.0) in samples
    assert any(name == "ll_reviews_created" for name, _, _ in samples)


def test_parse_with_prefixes_keeps_the_same_samples_of_those_metrics() -> None:
    page = _page()
    wanted = ("ll_review_seconds", "ll_objects")
    picked = parse(page, wanted)
    assert picked == [s for s in parse(page) if s[0].startswith(wanted)]
    assert {name for name, _, _ in picked} == {
        "ll_review_seconds_bucket", "ll_review_seconds_sum", "ll_review_seconds_count",
        "ll_review_seconds_created", "ll_objects"}


def test_parse_refuses_what_is_not_the_text_format() -> None:
    with pytest.raises(ValueError, match="could not convert"):
        parse('ll_objects{state="fresh" 1\n')


def test_sum_by_adds_the_samples_of_one_name_by_label_values() -> None:
    samples = parse(_page())
    assert sum_by(samples, "ll_reviews_total", ("result",)) == {("patched",): 5.0,
                                                                 ("skipped",): 4.0}
    # "" for a label the samples lack; no labels: one total
    assert sum_by(samples, "ll_reviews_total", ("result", "zone")) == {
        ("patched", ""): 5.0, ("skipped", ""): 4.0}
    assert sum_by(samples, "ll_reviews_total") == {(): 9.0}
    assert sum_by(samples, "ll_absent_total", ("result",)) == {}


def test_total_sums_the_samples_whose_labels_match() -> None:
    samples = parse(_page())
    assert total(samples, "ll_objects") == 9.0
    assert total(samples, "ll_objects", state="fresh") == 7.0
    assert total(samples, "ll_reviews_total", result="patched", reason="memo") == 2.0
    assert total(samples, "ll_objects", state="gone") == 0
    assert total(samples, "ll_absent") == 0
