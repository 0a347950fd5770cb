"""The node's agent Lease (webhook/inventory/agentlease.py): created, then renewed every third
of its duration, as the kubelet's node lease controller keeps a node's Lease.

Steady state, one write per renewal and no read: an update carrying the resourceVersion the
last write returned. A 409 (someone else wrote it, or an earlier write that timed out did land)
re-reads and retries; a 404 (deleted) creates it again. Any other failure is counted and
retried with jittered backoff, never beyond the renewal period; the renewer never raises.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from webhook.inventory.agentlease import (
    DEFAULT_LEASE_SECONDS,
    lease_body,
    parse_micro_time,
    renew_seconds,
)

from .kube import ApiError
from .metrics import AgentMetrics, Backoff
from .nodelayers import NodeRef

log = logging.getLogger(__name__)
CONFLICT_RETRIES = 3


class LeaseApi(Protocol):
    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    def replace_lease(self, namespace: str, name: str,
                      body: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True, slots=True)
class LeaseSettings:
    namespace: str
    duration: int = DEFAULT_LEASE_SECONDS
    backoff_initial: float = 0.5
    backoff_jitter: float = 0.5

    @property
    def period(self) -> float:
        return renew_seconds(self.duration)


class LeaseRenewer:
    """Keeps `node`'s Lease in `settings.namespace`. `renew` is one renewal (blocking: run it
    in a thread); `run` renews forever. `held` says whether the last successful write still
    holds the Lease."""

    def __init__(self, api: LeaseApi, node: NodeRef, settings: LeaseSettings,
                 metrics: AgentMetrics | None = None,
                 now: Callable[[], datetime] = lambda: datetime.now(UTC),
                 monotonic: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self.api, self.node, self.settings = api, node, settings
        self.metrics = metrics or AgentMetrics()
        self._now, self._monotonic, self._sleep = now, monotonic, sleep
        self._version: str | None = None  # resourceVersion of our last write; None: read first
        self._acquired: datetime | None = None
        self._owners: list[Any] | None = None  # kept when the Node's uid is unknown
        self._renewed = -math.inf  # monotonic time of the last successful write
        self._failing: str | None = None

    @property
    def held(self) -> bool:
        return self._monotonic() - self._renewed < self.settings.duration

    def renew(self) -> None:
        """One renewal: update with the last written version; read and retry on a conflict,
        create when absent. Raises ApiError."""
        namespace, name = self.settings.namespace, self.node.name
        for _ in range(CONFLICT_RETRIES):
            now = self._now()
            if self._version is None:
                current = self.api.read_lease(namespace, name)
                if current is None:
                    self._wrote(self.api.create_lease(namespace, self._body(now)), now)
                    return
                self._adopt(current, now)
            try:
                written = self.api.replace_lease(namespace, name, self._body(now))
            except ApiError as exc:
                if exc.status == 409:
                    self._version = None
                    continue
                if exc.status == 404:
                    self._version = None
                    self._wrote(self.api.create_lease(namespace, self._body(now)), now)
                    return
                raise
            self._wrote(written, now)
            return
        raise ApiError(f"renewing lease {namespace}/{name}: {CONFLICT_RETRIES} conflicts in a "
                       "row", 409)

    async def run(self) -> None:
        """Renew every `settings.period`; a failure is retried with jittered backoff capped at
        the period, so an API-server outage costs no more writes than the steady state."""
        period = self.settings.period
        retry = Backoff(self.settings.backoff_initial, period, self.settings.backoff_jitter)
        while True:
            try:
                await asyncio.to_thread(self.renew)
            except Exception as exc:  # ApiError, or an answer of an unexpected shape
                self._failed(exc)
                await self._sleep(retry.next())
                continue
            retry.reset()
            await self._sleep(period)

    def _body(self, now: datetime) -> dict[str, Any]:
        body = lease_body(self.node.name, self.settings.namespace, self.settings.duration, now,
                          node_uid=self.node.uid, acquired=self._acquired,
                          resource_version=self._version)
        if self.node.uid is None and self._owners:
            body["metadata"]["ownerReferences"] = self._owners
        return body

    def _adopt(self, current: dict[str, Any], now: datetime) -> None:
        """Continue the Lease as found: its version, its acquireTime when it is ours, its owner
        when the Node's uid is unknown here."""
        metadata = current.get("metadata") or {}
        spec = current.get("spec") or {}
        self._version = metadata.get("resourceVersion") or None
        self._owners = metadata.get("ownerReferences") or None
        acquired = parse_micro_time(spec.get("acquireTime"))
        if spec.get("holderIdentity") == self.node.name and acquired is not None:
            self._acquired = datetime.fromtimestamp(acquired, UTC)
        else:
            self._acquired = now

    def _wrote(self, written: dict[str, Any], now: datetime) -> None:
        metadata = written.get("metadata") or {}
        # No version in the answer: read before the next write rather than update blindly.
        self._version = metadata.get("resourceVersion") or None
        self._owners = metadata.get("ownerReferences") or self._owners
        if self._acquired is None:
            self._acquired = now
        self._renewed = self._monotonic()
        self.metrics.lease_renewals.inc()
        if self._failing is not None:
            log.info("lease %s/%s renewed again", self.settings.namespace, self.node.name)
            self._failing = None

    def _failed(self, exc: Exception) -> None:
        self.metrics.lease_renewal_failures.inc()
        if self._failing is None:  # one line per run of failures
            log.warning("lease renewal failed, retrying with backoff: %s",
                        exc if isinstance(exc, ApiError) else repr(exc))
        self._failing = str(exc)
