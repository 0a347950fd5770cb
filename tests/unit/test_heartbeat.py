"""Fake nodes' heartbeats (devcluster/heartbeat.py): a Lease per node in kube-node-lease,
renewed in place, created when missing; another API error is not swallowed by a round."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from webhook.devcluster.heartbeat import LEASE_NAMESPACE, LEASE_SECONDS, lease_body, renew

NOW = dt.datetime(2026, 11, 26, 8, 0, 1, 250_000, tzinfo=dt.UTC)


class Coordination:
    """CoordinationV1Api's two calls renew makes, over a dict of leases."""

    def __init__(self, existing: dict[str, dict[str, Any]], fail: int | None = None) -> None:
        self.leases = existing
        self.fail = fail
        self.calls: list[str] = []

    def patch_namespaced_lease(self, name: str, namespace: str, body: dict[str, Any]) -> None:
        assert namespace == LEASE_NAMESPACE
        self.calls.append(f"patch {name}")
        if self.fail is not None:
            raise ApiException(status=self.fail)
        if name not in self.leases:
            raise ApiException(status=404)
        self.leases[name]["spec"].update(body["spec"])

    def create_namespaced_lease(self, namespace: str, body: dict[str, Any]) -> None:
        assert namespace == LEASE_NAMESPACE
        self.calls.append(f"create {body['metadata']['name']}")
        self.leases[body["metadata"]["name"]] = body


def test_a_lease_names_its_node_and_the_time() -> None:
    body = lease_body("fake-1", NOW)
    assert body["metadata"] == {"name": "fake-1", "namespace": "kube-node-lease"}
    assert body["spec"] == {"holderIdentity": "fake-1", "leaseDurationSeconds": LEASE_SECONDS,
                            "renewTime": "2026-11-26T08:00:01.250000Z"}


def test_existing_leases_are_renewed_and_missing_ones_created() -> None:
    old = lease_body("fake-1", NOW - dt.timedelta(seconds=30))
    api = Coordination({"fake-1": old})
    renew(api, ["fake-1", "fake-2"], NOW)
    assert api.calls == ["patch fake-1", "patch fake-2", "create fake-2"]
    assert {name: lease["spec"]["renewTime"] for name, lease in api.leases.items()} == {
        "fake-1": "2026-11-26T08:00:01.250000Z", "fake-2": "2026-11-26T08:00:01.250000Z"}


def test_an_error_other_than_not_found_ends_the_round() -> None:
    api = Coordination({}, fail=403)
    with pytest.raises(ApiException):
        renew(api, ["fake-1", "fake-2"], NOW)
    assert api.calls == ["patch fake-1"]
