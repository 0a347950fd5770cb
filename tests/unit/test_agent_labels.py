"""The node's layer labels as the agent writes them (webhook/agent/labels.py), against a fake
Node API that merges patches as the API server does: one patch only when the labels differ,
no read before it, a read after a failure, only the agent's own keys ever in a patch."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import pytest

from webhook.agent.kube import ApiError
from webhook.agent.labels import NodeLabeler, remove_layer_labels
from webhook.agent.metrics import AgentMetrics
from webhook.core.layerlabels import LAYER_LABEL_PREFIX, LabelRule

MiB = 1 << 20


def digest(n: int) -> str:
    return "sha256:" + f"{n:016x}" * 4  # distinct in the 16 hex digits the key keeps


def key(n: int) -> str:
    return LAYER_LABEL_PREFIX + f"{n:016x}"


class Nodes:
    """read_node / patch_node_labels of one Node. `fail`: statuses the next patches raise;
    `land` makes a failing patch apply first (the answer lost on the way back)."""

    def __init__(self, labels: Mapping[str, str]) -> None:
        self.labels = dict(labels)
        self.calls: list[str] = []
        self.patches: list[dict[str, str | None]] = []
        self.fail: list[int | None] = []
        self.land = False

    def read_node(self, name: str) -> dict[str, Any]:
        self.calls.append("read")
        return {"metadata": {"name": name, "uid": "u-1", "labels": dict(self.labels)}}

    def patch_node_labels(self, name: str,
                          changes: Mapping[str, str | None]) -> dict[str, str]:
        self.calls.append("patch")
        self.patches.append(dict(changes))
        if self.fail:
            status = self.fail.pop(0)
            if self.land:
                self._merge(changes)
            raise ApiError(f"patching node {name}: failed", status)
        self._merge(changes)
        return copy.deepcopy(self.labels)

    def _merge(self, changes: Mapping[str, str | None]) -> None:
        for k, v in changes.items():
            if v is None:
                self.labels.pop(k, None)
            else:
                self.labels[k] = v


OTHER = {"kubernetes.io/hostname": "node-a", "team": "blue",
         "layer-locality.io/something-else": "kept"}


def labeler(nodes: Nodes, rule: LabelRule | None = None, known: bool = True) -> NodeLabeler:
    return NodeLabeler(nodes, "node-a", rule or LabelRule(),
                       dict(nodes.labels) if known else None, AgentMetrics())


def test_one_patch_of_the_agents_own_keys_then_nothing_while_unchanged() -> None:
    nodes = Nodes({**OTHER, key(9): "20"})  # layer 9: gone while the agent was down
    labels = labeler(nodes)
    layers = {digest(1): 32 * MiB, digest(2): 8 * MiB, digest(3): 17 * MiB - 1}
    assert labels.reconcile(layers)
    assert nodes.calls == ["patch"]  # the labels read at start: no read before the patch
    assert nodes.patches == [{key(1): "32", key(3): "17", key(9): None}]
    assert nodes.labels == {**OTHER, key(1): "32", key(3): "17"}
    for _ in range(3):
        assert not labels.reconcile(layers)
    assert nodes.calls == ["patch"]
    assert labels.metrics.label_patches._value.get() == 1
    assert labels.metrics.node_labels._value.get() == 2


def test_a_pulled_layer_adds_one_label_a_removed_one_takes_it_away() -> None:
    nodes = Nodes(OTHER)
    labels = labeler(nodes)
    labels.reconcile({digest(1): 32 * MiB})
    labels.reconcile({digest(1): 32 * MiB, digest(2): 100 * MiB})
    labels.reconcile({digest(2): 100 * MiB})
    assert nodes.patches[1:] == [{key(2): "100"}, {key(1): None}]
    assert nodes.labels == {**OTHER, key(2): "100"}


def test_the_rule_bounds_the_labels_and_zero_removes_them_all() -> None:
    nodes = Nodes(OTHER)
    layers = {digest(n): n * 20 * MiB for n in range(1, 8)}
    labeler(nodes, LabelRule(max_labels=3)).reconcile(layers)
    assert {k for k in nodes.labels if k.startswith(LAYER_LABEL_PREFIX)} == {
        key(7), key(6), key(5)}
    off = labeler(nodes, LabelRule(max_labels=0))
    assert off.reconcile(layers)
    assert nodes.patches[-1] == {key(7): None, key(6): None, key(5): None}
    assert nodes.labels == OTHER
    assert not off.reconcile(layers)


def test_labels_unknown_at_start_are_read_before_the_first_patch() -> None:
    nodes = Nodes({**OTHER, key(1): "32"})
    labels = labeler(nodes, known=False)
    assert not labels.reconcile({digest(1): 32 * MiB})
    assert nodes.calls == ["read"]


@pytest.mark.parametrize("status", [None, 500, 409])
def test_after_a_failed_patch_the_next_attempt_reads_first(status: int | None) -> None:
    """The failed patch landed (its answer was lost): the read shows it, so nothing is
    written twice."""
    nodes = Nodes(OTHER)
    labels = labeler(nodes)
    nodes.fail, nodes.land = [status], True
    with pytest.raises(ApiError):
        labels.reconcile({digest(1): 32 * MiB})
    assert labels.metrics.label_patch_failures._value.get() == 1
    assert not labels.reconcile({digest(1): 32 * MiB})
    assert nodes.calls == ["patch", "read"]
    assert nodes.labels == {**OTHER, key(1): "32"}


def test_a_failed_patch_that_did_not_land_is_sent_again() -> None:
    nodes = Nodes(OTHER)
    labels = labeler(nodes)
    nodes.fail = [503]
    with pytest.raises(ApiError):
        labels.reconcile({digest(1): 32 * MiB})
    assert labels.reconcile({digest(1): 32 * MiB})
    assert nodes.calls == ["patch", "read", "patch"]
    assert nodes.patches == [{key(1): "32"}] * 2


def test_remove_labels_removes_only_layer_labels() -> None:
    nodes = Nodes({**OTHER, key(1): "32", key(2): "17"})
    assert remove_layer_labels(nodes, "node-a") == 2
    assert nodes.labels == OTHER
    assert nodes.patches == [{key(1): None, key(2): None}]
    assert remove_layer_labels(nodes, "node-a") == 0
    assert nodes.calls == ["read", "patch", "read"]
