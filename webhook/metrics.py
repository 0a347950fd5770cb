"""Prometheus metrics, one registry per server instance (no process globals)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.reviews = Counter(
            "layer_locality_reviews",
            "Admission reviews answered, by result (patched, skipped, error) and reason.",
            ["result", "reason"],
            registry=self.registry,
        )
        self.review_seconds = Histogram(
            "layer_locality_review_duration_seconds",
            "Time spent handling one admission review (decode to encoded answer).",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=self.registry,
        )
        self.bad_requests = Counter(
            "layer_locality_bad_requests",
            "Requests refused with 4xx (malformed review, wrong content type, too large).",
            ["status"],
            registry=self.registry,
        )
        self.budget_misses = Counter(
            "layer_locality_layer_budget_misses",
            "Images whose layers were not known within the review budget (resolved later).",
            registry=self.registry,
        )
        self.inventory_nodes = Gauge(
            "layer_locality_inventory_nodes", "Nodes in the inventory.", registry=self.registry
        )
        self.inventory_layers = Gauge(
            "layer_locality_inventory_layers",
            "Distinct layers held by at least one node.",
            registry=self.registry,
        )
        self.tls_reloads = Counter(
            "layer_locality_tls_reloads",
            "Serving certificate reloads after the files changed, by result.",
            ["result"],
            registry=self.registry,
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
