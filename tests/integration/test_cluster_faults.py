"""Decisions after faults (tests/kit/fault_harness.py) on a control plane of its own: the webhook
the API server calls (the subject) and a second replica (the reference) reviewed again and again
with the same probe pods through each fault, compared with a replica started fresh afterwards
(the truth). For a fault that leaves the cluster as it was (a replica killed, the API server or
etcd restarted, etcd compacted, the API server slowed) no answer may carry a patch unlike the
truth: a replica either decides from the complete, current picture or fails open (unpatched, or
no answer and the API server admits the pod). For a node deleted and created again without its
images, the truth changes, and both replicas must reach it. Every fault: both replicas end on
the truth, and no pod created through the API server meanwhile fails for the webhook's sake
(the control plane's own outage may fail some) or is denied. The seconds are
bench/served/faults.py's to report, not asserted here."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.cluster_fixture import (
    APP_IMAGE,
    BASE_IMAGE,
    COLD,
    WARM,
    new_namespace,
    start_cluster,
)
from tests.kit.fault_harness import Harness
from tests.kit.faults import (
    FAULTS,
    agent_holding_app,
    agent_restarted,
    agent_stopped,
    node_recreated,
)

pytestmark = pytest.mark.controlplane


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    cluster = start_cluster(tmp_path_factory.mktemp("faults"), ["--log-level", "info"])
    try:
        made = Harness(cluster, [APP_IMAGE, BASE_IMAGE], new_namespace(cluster, opted_in=True),
                       settle_seconds=15.0)
        try:
            yield made
        finally:
            made.close()
    finally:
        cluster.down()


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_a_fault_that_changes_nothing_never_gets_a_wrong_patch(harness: Harness,
                                                                fault: str) -> None:
    result = harness.run(fault, lambda: FAULTS[fault](harness))
    assert result.truth_patched == 2 and not result.changed, result
    for replica in (result.subject, result.reference):
        assert replica.unlike_truth == 0, result
        assert replica.converged_after is not None, result
    assert result.pods_created > 0, result
    assert result.pods_failed_webhook == 0 and result.pods_denied == 0, result


def test_a_node_created_again_without_its_images_is_decided_on_as_it_now_is(
        harness: Harness) -> None:
    result = harness.run("node-recreated", lambda: node_recreated(WARM[0])(harness))
    assert result.changed and result.truth_patched == 2, result
    for replica in (result.subject, result.reference):
        assert replica.converged_after is not None, result
    assert result.pods_failed_webhook == 0 and result.pods_denied == 0, result



def test_an_agent_restarted_changes_nothing_and_one_stopped_stops_counting(
        harness: Harness) -> None:
    """A stand-in agent (tests/kit/fault_agent.py: the agent's NodeLayers object and Lease, as it
    writes them) makes a cold node the app's best; restarted within its Lease nothing may
    change; stopped, once its Lease has run out the node counts no more, and both replicas
    reach that truth."""
    agent = agent_holding_app(harness, COLD[0])
    try:
        result = harness.run("agent-restarted", lambda: agent_restarted(agent)(harness))
        assert result.truth_patched == 2 and not result.changed, result
        for replica in (result.subject, result.reference):
            assert replica.unlike_truth == 0 and replica.converged_after is not None, result
        assert result.pods_failed_webhook == 0 and result.pods_denied == 0, result

        result = harness.run("agent-stopped", lambda: agent_stopped(agent)(harness))
        assert result.changed and result.truth_patched == 2, result
        for replica in (result.subject, result.reference):
            assert replica.converged_after is not None, result
        assert result.pods_failed_webhook == 0 and result.pods_denied == 0, result
    finally:
        agent.close()
