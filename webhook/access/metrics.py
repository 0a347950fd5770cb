"""The refusals, counted on the server's registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter


class AccessMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.refused = Counter(
            "layer_locality_callers_refused",
            "Requests refused for their caller, by endpoint (admission, metrics; other: "
            "another path of the admission port) and reason "
            "(no_certificate, wrong_name, handshake: a certificate the client CA did not "
            "verify; no_token, malformed, unauthenticated, forbidden, unavailable, busy).",
            ["endpoint", "reason"],
            registry=registry,
        )
        self.authorized = Counter(
            "layer_locality_metrics_scrapes_authorized",
            "Metrics requests whose bearer token was accepted and allowed.",
            registry=registry,
        )
