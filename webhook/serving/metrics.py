"""Prometheus metrics, one registry per server instance (no process globals)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from webhook.core.holdout import COHORTS, Group

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
        # Fine below 1 ms: the target is a p99 under 1 ms while the pod watch is busy.
        self.review_queue_seconds = Histogram(
            "layer_locality_review_queue_seconds",
            "Time a review waited on the event loop: from its first bytes read off the "
            "connection to its handler starting.",
            buckets=(0.0001, 0.00025, 0.0005, 0.00075, 0.001, 0.002, 0.005, 0.01, 0.025,
                     0.1, 1.0),
            registry=self.registry,
        )
        self.bad_requests = Counter(
            "layer_locality_bad_requests",
            "Requests refused with 4xx (malformed HTTP or review, wrong content type or "
            "encoding, too large, not received in time).",
            ["status"],
            registry=self.registry,
        )
        self.aborted_requests = Counter(
            "layer_locality_aborted_requests",
            "Requests whose client went away before the whole body arrived.",
            registry=self.registry,
        )
        self.open_connections = Gauge(
            "layer_locality_open_connections",
            "Client connections open (TLS handshake included), at most --max-connections.",
            registry=self.registry,
        )
        self.connections_closed = Counter(
            "layer_locality_connections_closed",
            "Connections the server refused or closed early, by reason (refused: over "
            "--max-connections with none idle; evicted: idle, closed to make room; "
            "read_timeout: request not read within --request-read-seconds; handshake: TLS "
            "handshake failed or too slow).",
            ["reason"],
            registry=self.registry,
        )
        self.server_errors = Counter(
            "layer_locality_server_errors",
            "Requests the HTTP layer failed on an unexpected error (one log line each, "
            "throttled).",
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

    def watch_registry(self, stats: RegistryStats) -> None:
        """Export the registry resolver's counters (read at scrape time)."""
        self.registry.register(_RegistryCollector(stats))

    def watch_memo(self, memo: MemoStats) -> None:
        """Export the decision memo's hits and misses (read at scrape time)."""
        self.registry.register(_MemoCollector(memo))

    def live_inventory(self) -> InventoryMetrics:
        """Counters for the live inventory's watch loops."""
        return InventoryMetrics(self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RegistryStats(Protocol):
    """What webhook.registry.ResolverStats offers; plain counters, no Prometheus types."""

    @property
    def requests(self) -> Mapping[tuple[str, str], int]: ...
    @property
    def cache(self) -> Mapping[str, int]: ...
    @property
    def failures(self) -> Mapping[str, int]: ...


class MemoStats(Protocol):
    hits: int
    misses: int


class _MemoCollector:
    def __init__(self, memo: MemoStats) -> None:
        self._memo = memo

    def collect(self) -> Iterator[Metric]:
        lookups = CounterMetricFamily(
            "layer_locality_decision_memo_lookups",
            "Reviews whose pod-independent scoring came from the memo (hit: a replica of a "
            "template reviewed on the same inventory version) or was computed (miss).",
            labels=["result"])
        lookups.add_metric(["hit"], self._memo.hits)
        lookups.add_metric(["miss"], self._memo.misses)
        yield lookups


class _RegistryCollector:
    def __init__(self, stats: RegistryStats) -> None:
        self._stats = stats

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "layer_locality_registry_requests",
            "Registry HTTP requests by registry and outcome (status code, timeout, error, "
            "refused).",
            labels=["registry", "outcome"],
        )
        for (registry, outcome), count in sorted(self._stats.requests.items()):
            requests.add_metric([registry, outcome], count)
        yield requests
        cache = CounterMetricFamily(
            "layer_locality_registry_cache_lookups",
            "Registry resolver lookups by result (hit, miss, negative, coalesced).",
            labels=["result"],
        )
        for result, count in sorted(self._stats.cache.items()):
            cache.add_metric([result], count)
        yield cache
        failures = CounterMetricFamily(
            "layer_locality_registry_failures",
            "Image lookups that failed, by kind (not_found, unauthorized, rate_limited, timeout, "
            "digest_mismatch, refused...).",
            labels=["kind"],
        )
        for kind, count in sorted(self._stats.failures.items()):
            failures.add_metric([kind], count)
        yield failures


class InventoryMetrics:
    """The live inventory's watch counters (implements
    webhook.inventory.reflector_terms.ReflectorMetrics), and its outcome telemetry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        # Registered with the inventory's counters so that every `serve` exports the same
        # series (zero without a live cluster): dashboards and alerts find them everywhere.
        self.telemetry = TelemetryMetrics(registry)
        self._restarts = Counter(
            "layer_locality_watch_restarts",
            "Watch streams that failed and were resumed after a backoff, by resource.",
            ["resource"],
            registry=registry,
        )
        self._relists = Counter(
            "layer_locality_relists",
            "Decisions to list a resource from scratch, by reason (start: start-up or a "
            "restarted watch loop; expired: 410 Gone, the resourceVersion was too old).",
            ["resource", "reason"],
            registry=registry,
        )
        self._lag = Histogram(
            "layer_locality_watch_event_lag_seconds",
            "Time from reading a watch event off the stream to applying it to the index.",
            buckets=(0.0001, 0.001, 0.01, 0.1, 1.0, 10.0),
            registry=registry,
        )
        self._nl_crd = Gauge(
            "layer_locality_nodelayers_crd_present",
            "1 while the NodeLayers CRD is served (the node agent's objects are watched), 0 "
            "while its list answers 404; -1 before the first list.",
            registry=registry)
        self._nl_crd.set(-1)
        self._nl_objects = Gauge(
            "layer_locality_nodelayers_objects",
            "NodeLayers objects held, by state (fresh: the node agent's Lease is current, or "
            "for an agent without a Lease its heartbeat is within 3 resync periods: used for "
            "scoring; stale: node status only).", ["state"], registry=registry)
        self._nl_rejected = Counter(
            "layer_locality_nodelayers_rejected",
            "NodeLayers objects ignored because they break the contract, by reason.",
            ["reason"], registry=registry)
        for state in ("fresh", "stale"):
            self._nl_objects.labels(state=state)
        self._leases = Gauge(
            "layer_locality_agent_leases",
            "Node agents' Leases held, by state (alive: renewed within their duration: the "
            "node's NodeLayers object and layer labels count; expired).", ["state"],
            registry=registry)
        self._leases_readable = Gauge(
            "layer_locality_agent_leases_readable",
            "1 while the agents' Leases are watched, 0 while listing them is refused (no "
            "RBAC: layer labels are not used); -1 before the first list.", registry=registry)
        self._leases_readable.set(-1)
        for state in ("alive", "expired"):
            self._leases.labels(state=state)

    def nodelayers_crd(self, present: bool) -> None:
        self._nl_crd.set(1 if present else 0)

    def nodelayers_objects(self, fresh: int, stale: int) -> None:
        self._nl_objects.labels(state="fresh").set(fresh)
        self._nl_objects.labels(state="stale").set(stale)

    def nodelayers_rejected(self, reason: str) -> None:
        self._nl_rejected.labels(reason=reason).inc()

    def agent_leases(self, alive: int, expired: int, readable: bool) -> None:
        self._leases.labels(state="alive").set(alive)
        self._leases.labels(state="expired").set(expired)
        self._leases_readable.set(1 if readable else 0)

    def watch_restart(self, resource: str) -> None:
        self._restarts.labels(resource=resource).inc()

    def relist(self, resource: str, reason: str) -> None:
        self._relists.labels(resource=resource, reason=reason).inc()

    def event_lag(self, seconds: float) -> None:
        self._lag.observe(seconds)


RATIO_BUCKETS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
MAX_WORKLOADS = 100_000  # distinct workloads remembered per holdout group
# The holdout's counters, by group and cohort (`layer_locality_holdout_<name>_total`).
HOLDOUT_COUNTERS = (
    ("starts", "Pods in the holdout experiment seen bound (starts), by group and cohort."),
    ("missing_bytes", "Bytes of a start's layers its node lacked at bind (what the kubelet had "
                      "to pull)."),
    ("warm_starts", "Starts whose node held every layer of the pod at bind."),
    ("pull_seconds", "Seconds of the kubelet Pulled events of starts (including waiting)."),
    ("running", "Starts seen Running (or finished) after their bind."),
    ("running_seconds", "Seconds from a start's creationTimestamp until it was seen Running."),
)
PULL_BUCKETS = (0.0, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class TelemetryMetrics:
    """Outcome metrics (names are a contract: dashboards and alerts use them; meanings in
    docs/monitoring.md). Implements webhook.telemetry.recorder.TelemetrySink."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._binds = Counter(
            "layer_locality_binds",
            "Patched pods seen bound, by where the scheduler put them: top (a node of the "
            "highest-weight term), preferred (another node the patch named), other.",
            ["outcome"], registry=registry)
        self._present = Histogram(
            "layer_locality_bind_present_ratio",
            "Patched pods seen bound: bytes of the pod's layers its node held at bind / the "
            "pod's bytes.",
            buckets=RATIO_BUCKETS, registry=registry)
        self._avoided = Counter(
            "layer_locality_bytes_avoided",
            "Sum over patched pods of max(0, bytes present on the chosen node - mean bytes "
            "present over the candidates at review): the estimated pull avoided.",
            registry=registry)
        self._missed = Counter(
            "layer_locality_bytes_missed",
            "Sum over patched pods of max(0, mean bytes present over the candidates - bytes "
            "present on the chosen node): net estimate = avoided - missed.",
            registry=registry)
        self._pull_seconds = Histogram(
            "layer_locality_image_pull_seconds",
            "Container image pulls from kubelet Pulled events (including the wait behind "
            "other pulls; 0 when already present), by whether the pod was patched and its "
            "holdout group (steered, holdout, none).",
            ["patched", "group"], buckets=PULL_BUCKETS, registry=registry)
        self._pulls = Counter(
            "layer_locality_image_pulls",
            "Kubelet Pulled events by whether the pod was patched, its holdout group and "
            "result (pulled, present).", ["patched", "group", "result"], registry=registry)
        # The holdout's comparison, by group and cohort (a hash bucket of workloads: the
        # report's bootstrap resamples cohorts). Series appear as cohorts are seen.
        self._by_cohort = tuple(  # in HOLDOUT_COUNTERS' order
            Counter(f"layer_locality_holdout_{name}", text, ["group", "cohort"],
                    registry=registry) for name, text in HOLDOUT_COUNTERS)
        self._workloads = Gauge(
            "layer_locality_holdout_workloads",
            "Distinct workloads with a start seen by this process, by group (at most "
            f"{MAX_WORKLOADS} each).", ["group"], registry=registry)
        self._seen: dict[str, set[str]] = {}
        self._cells: dict[tuple[str, int], tuple[Counter, ...]] = {}
        self._unparsed = Counter(
            "layer_locality_pull_events_unparsed",
            "Pulled events whose message has a wording this version does not know.",
            registry=registry)
        self._unmatched = Counter(
            "layer_locality_pull_events_unmatched",
            "Pulled events whose pod was never seen bound within a minute (static pods, pods "
            "deleted at once): not counted as pulls.", registry=registry)
        for outcome in ("top", "preferred", "other"):  # every series exists from the start
            self._binds.labels(outcome=outcome)
        for patched, group in (("true", "none"), ("true", "steered"), ("false", "none"),
                               ("false", "steered"), ("false", "holdout")):
            self._pull_seconds.labels(patched=patched, group=group)
            for result in ("pulled", "present"):
                self._pulls.labels(patched=patched, group=group, result=result)

    def bind(self, outcome: str, present_ratio: float | None,
             avoided_bytes: int | None) -> None:
        self._binds.labels(outcome=outcome).inc()
        if present_ratio is not None:
            self._present.observe(present_ratio)
        if avoided_bytes is not None:
            if avoided_bytes >= 0:
                self._avoided.inc(avoided_bytes)
            else:
                self._missed.inc(-avoided_bytes)

    def pull(self, patched: bool, group: str, result: str, seconds: float,
             times: int) -> None:
        label = "true" if patched else "false"
        self._pulls.labels(patched=label, group=group, result=result).inc(times)
        histogram = self._pull_seconds.labels(patched=label, group=group)
        for _ in range(times):
            histogram.observe(seconds)

    def holdout_series(self) -> None:
        """Every (group, cohort) series at 0, for a webhook running the holdout: Prometheus'
        increase() does not count the first value of a series that appears mid-range."""
        for group in (Group.STEERED, Group.HOLDOUT):
            for cohort in range(COHORTS):
                self._cell(group.value, cohort)
            self._workloads.labels(group=group.value)

    def _cell(self, group: str, cohort: int) -> tuple[Counter, ...]:
        """The six counters of (group, cohort), created together (a start's later figures
        begin at 0) and looked up once: `labels()` costs a few microseconds a call."""
        found = self._cells.get((group, cohort))
        if found is None:
            key = str(cohort)
            found = self._cells[group, cohort] = tuple(
                counter.labels(group=group, cohort=key) for counter in self._by_cohort)
        return found

    def start(self, group: str, cohort: int, workload: str, missing_bytes: int) -> None:
        starts, missing, warm, _, _, _ = self._cell(group, cohort)
        starts.inc()
        missing.inc(max(0, missing_bytes))
        if missing_bytes <= 0:
            warm.inc()
        seen = self._seen.setdefault(group, set())
        if workload not in seen and len(seen) < MAX_WORKLOADS:
            seen.add(workload)
            self._workloads.labels(group=group).set(len(seen))

    def start_pull(self, group: str, cohort: int, seconds: float, times: int) -> None:
        _, _, _, pull_seconds, _, _ = self._cell(group, cohort)
        pull_seconds.inc(seconds * times)

    def running(self, group: str, cohort: int, seconds: float) -> None:
        _, _, _, _, running, running_seconds = self._cell(group, cohort)
        running.inc()
        running_seconds.inc(seconds)

    def unparsed(self, times: int) -> None:
        self._unparsed.inc(times)

    def unmatched(self, times: int) -> None:
        self._unmatched.inc(times)
