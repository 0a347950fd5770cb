"""The webhook runs with a real token of the ServiceAccount of manifests/base (TokenRequest),
bound by the shipped ClusterRole: its inventory (nodes, pods, events, NodeLayers) works with
exactly that, and the token can do nothing more."""

from __future__ import annotations

import re
import subprocess

import pytest

from webhook.devcluster.cluster import LocalCluster
from webhook.devcluster.processes import child_env

pytestmark = pytest.mark.controlplane


def as_webhook(cluster: LocalCluster, *args: str) -> subprocess.CompletedProcess[str]:
    """kubectl with the webhook's own kubeconfig (its ServiceAccount token)."""
    return subprocess.run(
        [str(cluster.kubectl), f"--kubeconfig={cluster.webhook_kubeconfig}", *args],
        capture_output=True, text=True, check=False, env=child_env())


def can_i(cluster: LocalCluster, *args: str) -> bool:
    """`kubectl auth can-i` as the webhook: exit 0 yes, 1 no."""
    result = as_webhook(cluster, "auth", "can-i", *args)
    assert result.returncode in (0, 1), result.stderr
    return result.returncode == 0


def test_the_webhook_token_is_the_service_account(local_cluster: LocalCluster) -> None:
    result = as_webhook(local_cluster, "auth", "whoami", "-o",
                        "jsonpath={.status.userInfo.username}")
    assert result.stdout == "system:serviceaccount:layer-locality:layer-locality", result.stderr


@pytest.mark.parametrize("verb_resource", [
    ("list", "nodes"), ("watch", "nodes"), ("list", "pods", "-A"), ("watch", "pods", "-A"),
    ("list", "events", "-A"), ("watch", "events", "-A"),
    ("list", "nodelayers.layer-locality.io"), ("watch", "nodelayers.layer-locality.io"),
])
def test_what_the_inventory_needs_is_allowed(local_cluster: LocalCluster,
                                             verb_resource: tuple[str, ...]) -> None:
    assert can_i(local_cluster, *verb_resource)


@pytest.mark.parametrize("verb_resource", [
    ("create", "pods", "-A"), ("delete", "pods", "-A"), ("patch", "pods", "-A"),
    ("get", "secrets", "-A"), ("list", "secrets", "-A"),
    ("update", "nodes"), ("patch", "nodes"), ("update", "nodes/status"),
    ("create", "nodelayers.layer-locality.io"), ("update", "nodelayers.layer-locality.io"),
    ("create", "events", "-A"), ("update", "mutatingwebhookconfigurations"),
])
def test_everything_else_is_denied(local_cluster: LocalCluster,
                                   verb_resource: tuple[str, ...]) -> None:
    assert not can_i(local_cluster, *verb_resource)


def test_the_running_webhook_met_no_forbidden_answer(local_cluster: LocalCluster) -> None:
    """It became ready with that token (the fixture waits for /readyz, which needs every
    initial list), and nothing it asked for was refused."""
    log = local_cluster.plane.log("webhook").read_text(errors="replace")
    assert "Forbidden" not in log
    # Each line without its timestamp, whose milliseconds can read 403 (",403 INFO").
    messages = [re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", "", line)
                for line in log.splitlines()]
    assert len(messages) > 1 and messages[0].startswith("INFO ")
    assert not [m for m in messages if re.search(r"\b403\b", m)]
