"""The decision annotation the pod carries (`layer-locality.io/decision`): what was preferred
and why, and an id for the bind. Pure. decide.py writes it; patchsize.py sizes its widest
form from the same function, so the byte budget follows the annotation's fields."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import orjson

from webhook.core.spread import SpreadState

DECISION_VERSION = 3  # 3: `group` and `workload` (the holdout)
# 4: some terms match layer labels (labelled.py); `top` lists the first named node when it
# is at the top weight and is left out when none is (the label terms reach the top); `spread`
# only when the guard left nodes out. Hostname-only decisions stay 3, byte for byte.
LABELS_VERSION = 4
TOP_NODES_IN_DECISION = 3  # nodes the decision annotation lists
# Format 4 lists one: the node a pending pod is counted on. The others cost ~90 bytes each on
# every event of the pod, and label terms name node sets no list of three could show.
TOP_NODES_WITH_LABELS = 1


class _Named(Protocol):
    @property
    def name(self) -> str: ...


class Scored(Protocol):
    """A node named in the patch (decide.NodeScore)."""

    @property
    def node(self) -> _Named: ...
    @property
    def bytes_present(self) -> int: ...
    @property
    def siblings(self) -> int: ...
    @property
    def weight(self) -> int: ...


def listed_top(chosen: Sequence[Scored], spread: SpreadState | None,
               labels: bool = False) -> list[tuple[str, int, int | None, int | None]]:
    """The annotation's `top` list as (node, bytes present, siblings, weight): what other
    replicas read back (`pods.pending_placement`), so what this one counts a pending pod by
    too. Siblings and weights only with the spread guard on (they say where it is
    counted)."""
    listed = TOP_NODES_WITH_LABELS if labels else TOP_NODES_IN_DECISION
    guarded = spread is not None
    return [(score.node.name, score.bytes_present, score.siblings if guarded else None,
             score.weight if guarded else None) for score in chosen[:listed]]


def top_entry(name: str, bytes_present: int, siblings: int | None,
              weight: int | None = None) -> dict[str, Any]:
    """One node of the annotation's `top` list (`siblings` and `weight`, the node's summed
    term weight, only with the spread guard on)."""
    entry: dict[str, Any] = {"node": name, "bytes": bytes_present}
    if siblings is not None:
        entry["siblings"] = siblings
    if weight is not None:
        entry["weight"] = weight
    return entry


def decision_annotation(
    pod_bytes: int,
    chosen: Sequence[Scored],
    spread: SpreadState | None,
    left_out: int,
    token: str,
    stand_ins: int = 0,
    mean_bytes: int = 0,
    terms: int = 0,
    cut: int = 0,
    preferred_nodes: int | None = None,
    group: str = "",
    workload: str = "",
    by: str = "",
    labels: bool = False,
) -> str:
    """The short JSON the pod carries. `chosen`: the nodes named, best first, or only the
    first of them when `preferred_nodes` says how many there are. `group` and `workload`:
    for a pod in the holdout experiment, its group and its workload's hash. `by`: the id of
    the webhook replica that decided (live mode): the other replicas read it from their pod
    watch, to count this pending pod and know the replica active. `labels`: some of the
    terms match layer labels (format version 4)."""
    top = [top_entry(*entry) for entry in listed_top(chosen, spread, labels)]
    doc: dict[str, Any] = {"v": LABELS_VERSION if labels else DECISION_VERSION}
    if token:
        doc["id"] = token
    if by:
        doc["by"] = by
    if group:
        # The report compares the groups pod by pod, bootstrapping over workloads.
        doc.update(group=group, workload=workload)
    # meanBytes: what a placement blind to layers would find on average (the candidates' mean
    # bytes present): the baseline of the bytes-avoided estimate when the pod is seen bound.
    count = len(chosen) if preferred_nodes is None else preferred_nodes
    doc.update(podBytes=pod_bytes, meanBytes=mean_bytes, preferredNodes=count)
    if top or not labels:  # format 4 leaves out what says nothing: every pod event carries it
        doc["top"] = top
    if terms:
        # terms: how many preferred terms were appended (the last ones of the list): a bind
        # is classified against these only, never against terms the pod brought itself.
        doc["terms"] = terms
    if spread is not None and (left_out or not labels):
        doc["spread"] = {"maxSkew": spread.max_skew, "leftOut": left_out}
    if stand_ins:
        doc["standIns"] = stand_ins  # images scored from their repository's previous tag
    if cut:
        doc["cut"] = cut  # nodes left unnamed to keep the patch within max_patch_bytes
    return orjson.dumps(doc).decode()


def unsteered_annotation(token: str, group: str, workload: str, pod_bytes: int,
                         reason: str) -> str:
    """A pod of the holdout experiment the webhook gives no preference (`reason`: why; held
    out or not): every reviewed pod of the experiment carries its group, so that the report
    compares whole groups, whatever the decision was."""
    doc: dict[str, Any] = {"v": DECISION_VERSION}
    if token:
        doc["id"] = token
    doc.update(group=group, workload=workload, podBytes=pod_bytes, skipped=reason)
    return orjson.dumps(doc).decode()
