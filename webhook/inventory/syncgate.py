"""Whether the live inventory holds a complete, current picture: what readiness and every
decision wait for. Event loop only.

Each awaited resource (Nodes, Pods, NodeLayers, the agents' Leases) is **synced** once a full
list of it has been applied (a resource the cluster does not serve, an absent CRD, Leases the
RBAC does not let us read, counts as listed: there is nothing more to wait for, and its
retries take nothing away: reflector.py), and stops
being so while it is listed again (a 410 Gone, a restarted watch): a relist applies page by
page, and a picture half old and half new is not one to decide from. A watch that keeps
failing (the API server unreachable) leaves the last picture in place but makes it **stale**
after `stale_seconds`: events it should have shown are missing. The inventory is ready while
every resource is synced and none is stale; `missing` says why not, for /readyz and the log.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable


class SyncGate:
    def __init__(self, awaited: Iterable[str], clock: Callable[[], float],
                 stale_seconds: float = 60.0) -> None:
        self._awaited = set(awaited)
        self._clock = clock
        self._stale = stale_seconds
        self._listed: set[str] = set()  # listed in full, not being listed again
        self._relisting: set[str] = set()  # listed once, being listed again
        self._failing: dict[str, float] = {}  # resource -> since when its watch fails
        self._moved = asyncio.Event()  # set by every change of state

    def await_(self, resource: str) -> None:
        """Readiness waits for `resource` too."""
        self._awaited.add(resource)
        self._update()

    def listing(self, resource: str) -> None:
        """A (re)list of `resource` started: not synced until it ends."""
        if resource in self._listed:
            self._listed.discard(resource)
            self._relisting.add(resource)
        self._update()

    def synced(self, resource: str) -> None:
        """A full list of `resource` was applied (or there is none to apply)."""
        self._listed.add(resource)
        self._relisting.discard(resource)
        self._failing.pop(resource, None)
        self._update()

    def failing(self, resource: str) -> None:
        """`resource`'s watch failed; stale once it has failed for `stale_seconds`."""
        self._failing.setdefault(resource, self._clock())

    def healthy(self, resource: str) -> None:
        """`resource`'s watch delivered again."""
        self._failing.pop(resource, None)

    @property
    def ready(self) -> bool:
        if not self._awaited <= self._listed:
            return False
        if self._failing:
            oldest = min(self._failing.values())
            if self._clock() - oldest > self._stale:
                return False
        return True

    def missing(self) -> list[str]:
        """Why it is not ready, one phrase per resource ([] when it is)."""
        now = self._clock()
        out = []
        for resource in sorted(self._awaited):
            if resource in self._relisting:
                out.append(f"{resource}: listing again")
            elif resource not in self._listed:
                out.append(f"{resource}: first list not complete")
            elif now - self._failing.get(resource, now) > self._stale:
                out.append(f"{resource}: watch failing for "
                           f"{now - self._failing[resource]:.0f}s")
        return out

    async def wait(self) -> None:
        """Until ready (checked again whenever a list ends, and each second meanwhile)."""
        await self._until(lambda: self.ready)

    async def wait_listed(self, but: str) -> None:
        """Until every awaited resource except `but` has been listed in full."""
        await self._until(lambda: self._awaited - {but} <= self._listed)

    async def _until(self, condition: Callable[[], bool]) -> None:
        while not condition():
            self._moved.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._moved.wait(), timeout=1.0)

    def _update(self) -> None:
        self._moved.set()  # the waiters look again
