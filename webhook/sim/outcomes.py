"""The webhook's outcome telemetry in the simulator, and the simulator's own count of the same.

`TelemetryFeed` hands the watch's binds and the kubelet's `Pulled` events (messages built
from the world's pull results, in the kubelet's newest wording) to the same recorder the live
inventory uses (webhook.telemetry.recorder), so the metrics a simulated run exports are the
ones a cluster would. `SimAccounting` counts the same outcomes from what the simulator itself
knows: which nodes each review's decision put in its top level and named at all (by node
name, from the Decision object), where the engine bound the pod, and the bytes of the pod the
world's node held just before the bind. With a view that lags nothing (watch and registry
delays 0, no image GC) the two must agree: one source of truth.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from typing import Any

from webhook.core.decide import Decision
from webhook.core.pods import DECISION_ANNOTATION, decision_id
from webhook.sim.watch import BoundPod, ImagePull
from webhook.sim.world import NodeState, PodRun
from webhook.telemetry.binds import BindOutcome
from webhook.telemetry.pulls import format_go_duration
from webhook.telemetry.recorder import Telemetry


def image_pulls(node: NodeState, run: PodRun, now: float) -> tuple[ImagePull, ...]:
    """What the kubelet will report for each image of a pod bound at `now`. An image another
    pod is still pulling counts as pulled, its time the wait until it is there: the kubelet
    finds it absent and asks the runtime, which joins the pull in progress."""
    return tuple(ImagePull(image.ref, max(0.0, node.images[image.ref].ready_at - now),
                           image.size) for image in run.images)


def kubelet_message(pull: ImagePull) -> str:
    """The `Pulled` message (pkg/kubelet/images/image_manager.go, newest wording); the sim
    does not separate the pull from the wait behind other pulls, so both durations agree."""
    if pull.seconds <= 0:
        return f'Container image "{pull.image}" already present on machine'
    took = format_go_duration(pull.seconds)
    return (f'Successfully pulled image "{pull.image}" in {took} ({took} including waiting). '
            f"Image size: {pull.size} bytes.")


class TelemetryFeed:
    """A watch listener feeding the recorder: binds, pod ends, and each bind's pull events."""

    def __init__(self, telemetry: Telemetry) -> None:
        self.telemetry = telemetry

    def node(self, obj: Mapping[str, Any]) -> None:
        return None

    def bound(self, pod: BoundPod) -> None:
        self.telemetry.bound(pod.uid, pod.pod, pod.node)
        for n, pull in enumerate(pod.pulls):
            uid = f"{pod.uid}-pulled-{n}"
            self.telemetry.event("ADDED", uid, {
                "metadata": {"uid": uid}, "reason": "Pulled", "count": 1,
                "involvedObject": {"kind": "Pod", "uid": pod.uid},
                "message": kubelet_message(pull)})

    def gone(self, uid: str) -> None:
        self.telemetry.gone(uid)


class SimAccounting:
    """Bind outcomes and bytes present as the simulator knows them (a watch listener, so that
    it sees each bind with what the engine recorded; its decisions come from `reviewed`)."""

    def __init__(self) -> None:
        self._decisions: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        self.outcomes: Counter[str] = Counter()
        self.present_ratios: list[float] = []

    def reviewed(self, token: str | None, decision: Decision | None) -> None:
        if token is None or decision is None or not decision.preferred:
            return
        top = max(score.weight for score in decision.preferred)
        self._decisions[token] = (
            frozenset(s.node.name for s in decision.preferred if s.weight == top),
            frozenset(s.node.name for s in decision.preferred))

    def node(self, obj: Mapping[str, Any]) -> None:
        return None

    def bound(self, pod: BoundPod) -> None:
        token = decision_id({"metadata": {"annotations": {
            DECISION_ANNOTATION: pod.annotations.get(DECISION_ANNOTATION)}}})
        decided = self._decisions.pop(token, None) if token is not None else None
        if decided is None:
            return
        top, named = decided
        outcome = (BindOutcome.TOP if pod.node in top
                   else BindOutcome.PREFERRED if pod.node in named else BindOutcome.OTHER)
        self.outcomes[outcome] += 1
        if pod.account is not None and pod.account.pod_bytes:
            self.present_ratios.append(pod.account.bytes_present / pod.account.pod_bytes)

    def gone(self, uid: str) -> None:
        return None
