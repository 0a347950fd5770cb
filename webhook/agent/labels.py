"""The node's layer labels (webhook/core/layerlabels.py): after each pass, the labels the rule
gives for the node's layers against the Node's labels as last known; when they differ, one JSON
merge patch of the agent's own keys.

The Node's labels are read once at start (the agent reads its Node anyway) and then taken from
each patch's answer, so a patch needs no read before it. After a failed patch, which may or may
not have landed, the next attempt reads first. The first pass after a restart therefore
reconciles: labels of layers gone while the agent was down are removed."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from webhook.core.layerlabels import LabelRule, is_layer_label, label_changes, node_layer_labels

from .kube import ApiError, node_labels
from .metrics import AgentMetrics

log = logging.getLogger(__name__)
# Refusals that a retry within the pass cannot heal (the policy, RBAC, a bad value): the next
# pass (an image change or the resync) tries again.
FINAL = frozenset({400, 401, 403, 422})


class NodeApi(Protocol):
    def read_node(self, name: str) -> dict[str, Any]: ...

    def patch_node_labels(self, name: str,
                          changes: Mapping[str, str | None]) -> dict[str, str]: ...


class NodeLabeler:
    """Keeps `node`'s layer labels equal to what `rule` gives for its layers. `labels`: the
    Node's labels as read at start (None: unknown, read before the first patch)."""

    def __init__(self, api: NodeApi, node: str, rule: LabelRule,
                 labels: Mapping[str, str] | None = None,
                 metrics: AgentMetrics | None = None) -> None:
        self.api, self.node, self.rule = api, node, rule
        self.metrics = metrics or AgentMetrics()
        self._labels = dict(labels) if labels is not None else None
        self._failing = False
        if self._labels is not None:
            self._count()

    def reconcile(self, layers: Mapping[str, int]) -> bool:
        """Patch the node's layer labels to what `layers` (digest -> size) give; True when it
        wrote. Blocking: run it in a thread. Raises ApiError (counted, logged once a run)."""
        desired = node_layer_labels(layers, self.rule)
        try:
            if self._labels is None:
                self._labels = node_labels(self.api.read_node(self.node))
                self._count()
            changes = label_changes(self._labels, desired)
            if not changes:
                self._recovered()
                return False
            try:
                self._labels = self.api.patch_node_labels(self.node, changes)
            except ApiError:
                self._labels = None  # it may have landed: read before the next attempt
                raise
        except ApiError as exc:
            self.metrics.label_patch_failures.inc()
            if not self._failing:
                log.warning("node %s's layer labels not written (%s); retrying", self.node, exc)
            self._failing = True
            raise
        self.metrics.label_patches.inc()
        self._count()
        added = sum(1 for value in changes.values() if value is not None)
        log.info("node %s layer labels: %d set, %d removed", self.node, added,
                 len(changes) - added)
        self._recovered()
        return True

    def _count(self) -> None:
        self.metrics.node_labels.set(sum(1 for key in self._labels or () if is_layer_label(key)))

    def _recovered(self) -> None:
        if self._failing:
            log.info("node %s's layer labels written again", self.node)
            self._failing = False


def remove_layer_labels(api: NodeApi, node: str) -> int:
    """`--remove-labels`: remove every layer label from `node` in one patch; how many there
    were. Raises ApiError."""
    current = node_labels(api.read_node(node))
    changes = label_changes(current, {})
    if changes:
        api.patch_node_labels(node, changes)
    return len(changes)
