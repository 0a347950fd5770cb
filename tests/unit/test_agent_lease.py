"""The agent's Lease renewer (webhook/agent/lease.py) against a fake API with the API server's
resourceVersion rule: created when absent, then one update per renewal with no read, a 409
re-reads and retries, a 404 creates again, other failures are raised by `renew` and retried
with backoff by `run`, which never raises."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from webhook.agent.kube import ApiError
from webhook.agent.lease import LeaseRenewer, LeaseSettings
from webhook.agent.metrics import AgentMetrics, Backoff
from webhook.agent.nodelayers import NodeRef
from webhook.inventory.agentlease import parse_lease, parse_micro_time

NAMESPACE = "agents"
T0 = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


class Leases:
    """read/create/replace over a dict, as the API server answers them; `fail` makes the next
    calls of a kind raise (a status, or None for no answer); `calls` lists them."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.version = 0
        self.calls: list[str] = []
        self.fail: dict[str, list[int | None]] = {}

    def _maybe_fail(self, kind: str) -> None:
        self.calls.append(kind)
        pending = self.fail.get(kind)
        if pending:
            status = pending.pop(0)
            raise ApiError(f"{kind}: failed", status)

    def read_lease(self, namespace: str, name: str) -> dict[str, Any] | None:
        assert namespace == NAMESPACE
        self._maybe_fail("read")
        found = self.objects.get(name)
        return copy.deepcopy(found) if found else None

    def create_lease(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        assert namespace == NAMESPACE == body["metadata"]["namespace"]
        self._maybe_fail("create")
        if body["metadata"]["name"] in self.objects:
            raise ApiError("exists", 409)
        assert "resourceVersion" not in body["metadata"]
        return self._store(body)

    def replace_lease(self, namespace: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
        self._maybe_fail("replace")
        if name not in self.objects:
            raise ApiError("gone", 404)
        if body["metadata"].get("resourceVersion") != self.objects[name]["metadata"][
                "resourceVersion"]:
            raise ApiError("conflict", 409)
        return self._store(body)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.objects[body["metadata"]["name"]] = stored
        return copy.deepcopy(stored)

    def bump(self, name: str) -> None:
        """Someone else wrote the Lease: its version moves on."""
        self.version += 1
        self.objects[name]["metadata"]["resourceVersion"] = str(self.version)


class Clock:
    def __init__(self) -> None:
        self.wall = T0
        self.mono = 1000.0

    def advance(self, seconds: float) -> None:
        self.wall += timedelta(seconds=seconds)
        self.mono += seconds


def renewer(api: Leases, clock: Clock, uid: str | None = "uid-1", duration: int = 60,
            sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> LeaseRenewer:
    return LeaseRenewer(api, NodeRef("node-a", uid), LeaseSettings(NAMESPACE, duration),
                        AgentMetrics(), now=lambda: clock.wall, monotonic=lambda: clock.mono,
                        sleep=sleep)


def renew_time(api: Leases) -> float | None:
    return parse_micro_time(api.objects["node-a"]["spec"]["renewTime"])


def test_created_then_renewed_with_one_update_each_and_no_read() -> None:
    api, clock = Leases(), Clock()
    lease = renewer(api, clock)
    assert not lease.held
    lease.renew()
    assert api.calls == ["read", "create"]
    stored = api.objects["node-a"]
    assert stored["spec"]["holderIdentity"] == "node-a"
    assert stored["spec"]["leaseDurationSeconds"] == 60
    assert stored["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "node-a", "uid": "uid-1"}]
    for _ in range(3):
        clock.advance(20)
        lease.renew()
    assert api.calls == ["read", "create", "replace", "replace", "replace"]
    assert renew_time(api) == (T0 + timedelta(seconds=60)).timestamp()
    # acquireTime stays when it was first taken; the webhook reads the Lease as alive.
    assert parse_micro_time(api.objects["node-a"]["spec"]["acquireTime"]) == T0.timestamp()
    parsed = parse_lease(api.objects["node-a"], clock.wall.timestamp())
    assert parsed is not None and parsed.alive(clock.wall.timestamp() + 59)
    assert lease.held
    assert lease.metrics.lease_renewals._value.get() == 4


def test_a_conflict_rereads_and_retries() -> None:
    api, clock = Leases(), Clock()
    lease = renewer(api, clock)
    lease.renew()
    api.bump("node-a")
    clock.advance(20)
    lease.renew()
    assert api.calls[2:] == ["replace", "read", "replace"]
    assert renew_time(api) == (T0 + timedelta(seconds=20)).timestamp()
    clock.advance(20)
    lease.renew()  # back to one update
    assert api.calls[5:] == ["replace"]


def test_conflicts_without_end_raise() -> None:
    api, clock = Leases(), Clock()
    lease = renewer(api, clock)
    lease.renew()
    api.fail["replace"] = [409] * 10
    with pytest.raises(ApiError) as raised:
        lease.renew()
    assert raised.value.status == 409


def test_a_deleted_lease_is_created_again() -> None:
    api, clock = Leases(), Clock()
    lease = renewer(api, clock)
    lease.renew()
    del api.objects["node-a"]
    clock.advance(20)
    lease.renew()
    assert api.calls[2:] == ["replace", "create"]
    assert renew_time(api) == (T0 + timedelta(seconds=20)).timestamp()
    clock.advance(20)
    lease.renew()
    assert api.calls[4:] == ["replace"]


def test_a_restarted_agent_continues_the_lease_it_finds() -> None:
    api, clock = Leases(), Clock()
    renewer(api, clock).renew()
    clock.advance(100)
    again = renewer(api, clock, uid=None)  # this time the Node could not be read
    again.renew()
    assert api.calls == ["read", "create", "read", "replace"]
    stored = api.objects["node-a"]
    assert parse_micro_time(stored["spec"]["acquireTime"]) == T0.timestamp()
    # Without the Node's uid here, the owner found is kept, not dropped by the update.
    assert stored["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


def test_a_failure_is_raised_and_the_version_kept() -> None:
    """A failed update may have landed: the next one carries the version it knew, is refused
    with a 409 if it did land, and reads then."""
    api, clock = Leases(), Clock()
    lease = renewer(api, clock)
    lease.renew()
    api.fail["replace"] = [None]
    with pytest.raises(ApiError):
        lease.renew()
    api.fail["replace"] = [503]
    with pytest.raises(ApiError):
        lease.renew()
    lease.renew()
    assert api.calls[2:] == ["replace", "replace", "replace"]


def test_held_only_while_the_last_write_lasts() -> None:
    api, clock = Leases(), Clock()
    lease = renewer(api, clock, duration=60)
    lease.renew()
    clock.advance(59)
    assert lease.held
    clock.advance(1)
    assert not lease.held


async def test_run_backs_off_on_failures_never_raises_and_counts_them() -> None:
    api, clock = Leases(), Clock()
    api.fail["read"] = [500, None, 403, 500]
    sleeps: list[float] = []
    done = asyncio.Event()

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.advance(seconds)
        if len(sleeps) == 6:
            done.set()
            await asyncio.Event().wait()  # park: the test ends the task

    lease = renewer(api, clock, duration=60, sleep=sleep)
    task = asyncio.create_task(lease.run())
    await asyncio.wait_for(done.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lease.metrics.lease_renewal_failures._value.get() == 4
    assert lease.metrics.lease_renewals._value.get() == 2
    # Four growing, jittered delays (within [delay/2, delay]), then the renewal period.
    for got, nominal in zip(sleeps[:4], [0.5, 1, 2, 4], strict=True):
        assert nominal / 2 <= got <= nominal
    assert sleeps[4:] == [20, 20]
    assert api.calls == ["read"] * 5 + ["create", "replace"]


async def test_run_survives_an_answer_of_an_unexpected_shape() -> None:
    api, clock = Leases(), Clock()
    api.objects["node-a"] = {"metadata": ["not", "a", "mapping"], "spec": {}}
    slept = asyncio.Event()

    async def sleep(seconds: float) -> None:
        slept.set()
        await asyncio.Event().wait()

    lease = renewer(api, clock, sleep=sleep)
    task = asyncio.create_task(lease.run())
    await asyncio.wait_for(slept.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert lease.metrics.lease_renewal_failures._value.get() == 1


def test_backoff_is_capped_at_the_renewal_period() -> None:
    retry = Backoff(0.5, 20, jitter=0.5)
    delays = [retry.next() for _ in range(12)]
    assert max(delays) <= 20
    assert min(delays[7:]) >= 10  # at the cap, jitter takes at most half off
    retry.reset()
    assert retry.next() <= 0.5
