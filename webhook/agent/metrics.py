"""The agent's Prometheus metrics (its own registry, served on --listen's /metrics) and the
capped exponential backoff every retry of the agent uses."""

from __future__ import annotations

import random

from prometheus_client import CollectorRegistry, Counter, Gauge


class AgentMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.passes = Counter("layer_locality_agent_passes", "Runtime reads", registry=r)
        self.outages = Counter("layer_locality_agent_runtime_outages",
                               "Times the runtime became unreachable", registry=r)
        self.publishes = Counter("layer_locality_agent_publishes", "NodeLayers writes",
                                 registry=r)
        self.publish_failures = Counter("layer_locality_agent_publish_failures",
                                        "NodeLayers writes that failed (retried)", registry=r)
        self.skipped = Gauge("layer_locality_agent_images_skipped",
                             "Images whose manifest is missing from the content store (last pass)",
                             registry=r)
        self.images = Gauge("layer_locality_agent_images", "Images published (last pass)",
                            registry=r)
        self.truncated = Gauge("layer_locality_agent_truncated_images",
                               "Images left out by the object's bounds (last pass)", registry=r)
        self.ready = Gauge("layer_locality_agent_ready", "1 once the first publish succeeded",
                           registry=r)
        self.label_patches = Counter("layer_locality_agent_label_patches",
                                     "Patches of the node's layer labels", registry=r)
        self.label_patch_failures = Counter(
            "layer_locality_agent_label_patch_failures",
            "Patches (or reads) of the node's layer labels that failed (retried)", registry=r)
        self.node_labels = Gauge("layer_locality_agent_node_labels",
                                 "Layer labels on the node, as last written or read",
                                 registry=r)
        self.lease_renewals = Counter("layer_locality_agent_lease_renewals",
                                      "Writes of the node's agent Lease (creations included)",
                                      registry=r)
        self.lease_renewal_failures = Counter(
            "layer_locality_agent_lease_renewal_failures",
            "Renewals of the node's agent Lease that failed (retried with backoff)", registry=r)


class Backoff:
    """Delays doubling from `initial` up to `cap`. With `jitter` each delay is drawn from
    [(1 - jitter) x delay, delay]: thousands of agents failing together (an API-server outage)
    then do not retry in step."""

    def __init__(self, initial: float, cap: float, jitter: float = 0.0,
                 rng: random.Random | None = None) -> None:
        self.initial, self.cap, self.jitter = initial, cap, jitter
        self.delay = initial
        self._rng = rng or random.Random()

    def next(self) -> float:
        delay, self.delay = self.delay, min(self.delay * 2, self.cap)
        if self.jitter:
            delay *= 1 - self.jitter * self._rng.random()
        return delay

    def reset(self) -> None:
        self.delay = self.initial
