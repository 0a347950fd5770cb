"""The live inventory's view of the node agents' Leases (agentlease.py): whose agent is alive.

A node whose agent's Lease is current has its NodeLayers object and its layer labels
trusted; once the Lease runs out (the agent stopped renewing: crashed, deleted, its node
cut off), both stop counting until it is renewed. A node with no Lease at all is judged
the old way (its NodeLayers heartbeat): agents older than Leases keep working.

The watch is on one namespace (the agents'); a renewal that changes no node's state
changes nothing else, so renewals cost a few dictionary operations. Without the RBAC to
list Leases there (the agent component not installed), one line is logged, a gauge says so,
and the list is retried every `absent_retry_seconds`. Runs on the event loop.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable, Mapping, Set
from typing import Any, Protocol, runtime_checkable

from webhook.inventory import reflector_terms
from webhook.inventory.agentlease import AgentLease, parse_lease
from webhook.inventory.podstate import node_key
from webhook.inventory.reflector import DELETED, Reflector

log = logging.getLogger(__name__)


@runtime_checkable
class LeaseMetrics(Protocol):
    """What webhook.serving.metrics.InventoryMetrics reports about agent Leases."""

    def agent_leases(self, alive: int, expired: int, readable: bool) -> None: ...


class AgentLeases:
    def __init__(
        self,
        api: Any,  # kubernetes.client.CoordinationV1Api, or None: no watch
        namespace: str,
        changed: Callable[[str], None],  # a node's agent came alive or ran out: re-index it
        listed: Callable[[], None] = lambda: None,  # the first list (or refusal) is in
        metrics: object = None,
        wall_clock: Callable[[], float] = time.time,
        absent_retry_seconds: float = 300.0,
    ) -> None:
        self._api = api
        self.namespace = namespace
        self._changed = changed
        self._on_listed = listed
        self._metrics = metrics if isinstance(metrics, LeaseMetrics) else None
        self._clock = wall_clock
        self._absent_retry = absent_retry_seconds
        self._leases: dict[str, AgentLease] = {}
        self._alive: set[str] = set()  # nodes whose Lease was current when last looked at
        # When the Leases seen alive run out, soonest first: expire() looks at those due
        # only (a renewal leaves its earlier entry behind, skipped when it comes due). At
        # most about one entry per renewal within a Lease's duration.
        self._due: list[tuple[float, str]] = []
        self.readable: bool | None = None  # None: not listed yet

    def reflectors(self, settings: reflector_terms.ReflectorSettings,
                   metrics: reflector_terms.ReflectorMetrics) -> list[Reflector]:
        if self._api is None:
            return []
        return [Reflector("leases", self._list, node_key, self.event, self._listed, settings,
                          metrics, on_unavailable=self.unreadable)]

    def _list(self, **kwargs: Any) -> Any:
        try:
            return self._api.list_namespaced_lease(self.namespace, **kwargs)
        except Exception as exc:
            # 403: no RBAC (the agent component not installed); 404: no Lease API at all
            # (a stand-in API server).
            if getattr(exc, "status", None) not in (401, 403, 404) or kwargs.get("watch"):
                raise
            raise reflector_terms.Unavailable(
                f"leases in {self.namespace} not readable", self._absent_retry) from exc

    def _listed(self, names: Set[str]) -> None:
        if self.readable is not True:
            log.info("agent leases: watching namespace %s (%d)", self.namespace,
                     len(self._leases))
        self.readable = True
        self._report()
        self._on_listed()

    def unreadable(self, exc: object = None) -> None:
        """The list was refused (no RBAC): no agent counts as alive by its Lease."""
        if self.readable is not False:
            log.warning("agent leases in namespace %s not readable (%s): layer labels are "
                        "not used, NodeLayers judged by their heartbeat; checking again every "
                        "%.0fs", self.namespace, exc, self._absent_retry)
        self.readable = False
        for name in list(self._leases):
            self.event(DELETED, name, None)
        self._on_listed()

    # -- events --------------------------------------------------------------------------

    def event(self, kind: str, name: str, obj: Mapping[str, Any] | None) -> None:
        lease = None
        if kind != DELETED and obj is not None:
            lease = parse_lease(obj, self._clock())
        if lease is None:
            if self._leases.pop(name, None) is not None:
                self._alive.discard(name)
                self._changed(name)
                self._report()
            return
        previous = self._leases.get(name)
        self._leases[name] = lease
        was = name in self._alive
        now = lease.alive(self._clock())
        if now:
            self._alive.add(name)
            heapq.heappush(self._due, (lease.expires, name))
        else:
            self._alive.discard(name)
        if previous is None or was != now:
            self._changed(name)
            self._report()

    # -- what the inventory reads ----------------------------------------------------------

    def alive(self, name: str) -> bool | None:
        """Whether `name`'s agent is alive by its Lease; None when it has none (judge its
        NodeLayers by the heartbeat)."""
        lease = self._leases.get(name)
        return None if lease is None else lease.alive(self._clock())

    def expire(self) -> int:
        """Re-index the nodes whose Lease ran out since they were last looked at (no event
        says so: the agent just stopped renewing); returns how many."""
        now = self._clock()
        gone: list[str] = []
        due = self._due
        while due and due[0][0] < now:
            _, name = heapq.heappop(due)
            lease = self._leases.get(name)
            if name in self._alive and (lease is None or not lease.alive(now)):
                self._alive.discard(name)
                gone.append(name)
        for name in gone:
            self._changed(name)
        if gone:
            log.info("agent leases ran out on %d node(s), e.g. %s", len(gone), gone[0])
        self._report()
        return len(gone)

    async def expiry_loop(self, longest: float = 30.0) -> None:
        """`expire` when the soonest Lease comes due (a renewal's older entry wakes it early
        and changes nothing), at least every `longest` seconds: a stopped agent stops
        counting within about 0.1 s of its Lease running out, not at the next sweep."""
        while True:
            wait = longest
            if self._due:
                wait = min(longest, self._due[0][0] - self._clock())
            await asyncio.sleep(max(0.1, wait))
            self.expire()

    def _report(self) -> None:
        if self._metrics is not None:
            alive = len(self._alive)
            self._metrics.agent_leases(alive, len(self._leases) - alive, self.readable is True)

    @property
    def count(self) -> int:
        return len(self._leases)


def coordination_api(core: Any) -> Any:
    """A CoordinationV1Api sharing `core`'s ApiClient; None for stand-ins without one."""
    api_client = getattr(core, "api_client", None)
    if api_client is None:
        return None
    from kubernetes import client  # only where a real client exists

    return client.CoordinationV1Api(api_client)

