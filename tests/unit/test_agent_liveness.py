"""The webhook's view of the node agents' Leases (inventory/leases_watch.py): a node's
NodeLayers object and layer labels count while its agent's Lease is current, whatever the
object's heartbeat; once the Lease runs out (noticed by `expire`, no event needed) or is
gone, they stop counting (a node without any Lease is judged by its heartbeat, as agents
before Leases were). Driven through the inventory's event callbacks, as
test_nodelayers_reindex.py, with a wall clock the test moves."""

from __future__ import annotations

from datetime import UTC, datetime

from tests.helpers import AMD64, Clock, node_object
from tests.nodelayers_helpers import APP, T0, nodelayers_object
from webhook.core.layerlabels import node_layer_labels
from webhook.inventory.agentlease import AGENT_NAMESPACE, lease_body, parse_lease
from webhook.inventory.live import LiveInventory
from webhook.inventory.reflector import DELETED

DAY = 86_400.0




def lease(node: str, renewed: float, duration: int = 180) -> dict[str, object]:
    return lease_body(node, AGENT_NAMESPACE, duration, datetime.fromtimestamp(renewed, UTC))


def app_layers() -> set[str]:
    return {layer.digest for layer in APP.platforms[AMD64].layers}


def inventory() -> tuple[LiveInventory, Clock]:
    """n1 holds APP by its agent's object and carries its layer labels; its status lists
    nothing; the object's heartbeat is a day old (written once, the layers unchanged since)."""
    clock = Clock(T0)
    live = LiveInventory(None, [], wall_clock=clock)
    labels = node_layer_labels({layer.digest: layer.size
                                for layer in APP.platforms[AMD64].layers})
    live._apply_nodes("ADDED", node_object("n1", labels=labels))
    live.nodelayers.event("ADDED", "n1", nodelayers_object("n1", [APP], AMD64, T0 - DAY))
    return live, clock


def test_a_current_lease_keeps_an_old_object_and_the_labels_counting() -> None:
    live, clock = inventory()
    assert live.index.layers_of("n1") == frozenset()  # by its heartbeat: stale
    live.leases.event("ADDED", "n1", lease("n1", clock.now))
    assert live.index.layers_of("n1") == app_layers()
    assert live.index.trusted == live.index.bit("n1")


def test_a_lease_that_runs_out_stops_both_counting_until_renewed() -> None:
    live, clock = inventory()
    live.leases.event("ADDED", "n1", lease("n1", clock.now))
    clock.now += 180
    assert live.leases.expire() == 0  # held for its whole duration
    clock.now += 1
    assert live.leases.expire() == 1
    assert live.index.layers_of("n1") == frozenset() and live.index.trusted == 0
    live.leases.event("MODIFIED", "n1", lease("n1", clock.now))
    assert live.index.layers_of("n1") == app_layers() and live.index.trusted


def test_renewals_that_change_nothing_leave_the_index_alone() -> None:
    live, clock = inventory()
    live.leases.event("ADDED", "n1", lease("n1", clock.now))
    generation = live.index.generation
    for _ in range(5):
        clock.now += 60
        live.leases.event("MODIFIED", "n1", lease("n1", clock.now))
    assert live.index.generation == generation


def test_without_a_lease_the_heartbeat_decides_again() -> None:
    live, clock = inventory()
    live.leases.event("ADDED", "n1", lease("n1", clock.now))
    live.leases.event(DELETED, "n1", None)
    assert live.index.layers_of("n1") == frozenset() and live.index.trusted == 0
    live.nodelayers.event("MODIFIED", "n1", nodelayers_object("n1", [APP], AMD64, clock.now))
    assert live.index.layers_of("n1") == app_layers()  # fresh by its heartbeat
    assert live.index.trusted == 0  # labels need a live agent


def test_a_renewal_from_the_future_counts_from_when_it_arrived() -> None:
    found = parse_lease(lease("n1", T0 + 3600, duration=60), arrived=T0)
    assert found is not None and found.expires == T0 + 60


def test_a_lease_not_an_agents_is_ignored() -> None:
    body = lease("n1", T0)
    body["spec"] = {**body["spec"], "holderIdentity": "someone-else"}  # type: ignore[dict-item]
    assert parse_lease(body, T0) is None
    assert parse_lease({"metadata": {"name": "n1"}, "spec": {}}, T0) is None


async def test_the_expiry_loop_wakes_when_the_soonest_lease_comes_due() -> None:
    """Not at the next sweep (30 s here): the loop sleeps until the soonest Lease's end, so a
    stopped agent's node stops counting at once. The clock moves past the Lease's end while
    the loop waits on a sweep far off; it must have woken at the due time it computed."""
    import asyncio

    live, clock = inventory()
    live.leases.event("ADDED", "n1", lease("n1", clock.now, duration=1))
    assert live.index.layers_of("n1") == app_layers()
    task = asyncio.create_task(live.leases.expiry_loop(longest=30.0))
    try:
        clock.now += 2  # the Lease ran out 1 s ago; the loop wakes within 0.1-1 s of real time
        for _ in range(40):
            await asyncio.sleep(0.05)
            if not live.index.layers_of("n1"):
                break
        assert live.index.layers_of("n1") == frozenset() and live.index.trusted == 0
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
