"""What a run on real nodes did, per pod, from the kubelets' `Pulled` events and the registry's
log: its pulls, and the registry bytes its node fetched for it. Pure."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.evaluation.kubelet import PodStart
from webhook.evaluation.pulls import ImagePull
from webhook.evaluation.run import NAMESPACE, PodSeen
from webhook.telemetry.pulls import PRESENT, parse_message, pulled_event


@dataclass(slots=True)
class PodTimes:
    node: str = ""
    bound: float | None = None
    running: float | None = None


def attribute_bytes(pods: Sequence[tuple[str, str, float, set[str]]],
                    fetched: Mapping[str, Sequence[tuple[str, int]]]) -> dict[str, int]:
    """Registry bytes per pod: pods (uid, node, bound, the blobs its images need) in bind
    order; a node's fetch of a blob counts for the first pod bound there that needs it (its
    later pods found it there, or waited on the same download). Pure."""
    left: dict[str, dict[str, int]] = {}
    for node, blobs in fetched.items():
        sizes = left.setdefault(node, {})
        for digest, size in blobs:
            sizes[digest] = sizes.get(digest, 0) + size
    out: dict[str, int] = {}
    for uid, node, _, needs in sorted(pods, key=lambda p: (p[2], p[0])):
        sizes = left.get(node, {})
        out[uid] = sum(sizes.pop(d, 0) for d in sorted(needs))
    return out


def starts_from(pods: Mapping[str, PodSeen], times: Mapping[str, PodTimes],
                events: Iterable[Mapping[str, Any]], blobs_of: Mapping[str, set[str]],
                fetched: Mapping[str, Sequence[tuple[str, int]]],
                namespace: str = NAMESPACE) -> tuple[list[PodStart], dict[str, float]]:
    """Each bound pod as a PodStart (the measure's input; one deleted before it ran too, as
    the stand-in counts it): its node and bind time, its pulls as its kubelet's `Pulled`
    events say (present, or pulled in N s including waiting), the registry bytes of layers its
    node fetched for it; and bind -> Running per pod that ran."""
    said: dict[str, list[tuple[str, bool, float]]] = defaultdict(list)
    for event in events:
        pulled = pulled_event(event)
        message = parse_message(pulled.message) if pulled is not None else None
        if pulled is not None and message is not None:
            said[pulled.pod_uid].append((message.image, message.result == PRESENT,
                                         message.seconds))
    bound = [(uid, t.node, t.bound, set().union(*(blobs_of.get(i, set())
                                                  for i in pods[uid].images)))
             for uid, t in times.items() if t.bound is not None and uid in pods]
    attributed = attribute_bytes(bound, fetched)
    starts, running = [], {}
    for uid, node, at, _ in sorted(bound, key=lambda p: (p[2], p[0])):
        t, seen = times[uid], pods[uid]
        if at is None:
            continue
        # A pod deleted before it ran still cost its pulls, as the stand-in counts it: it ends
        # when it went (or, never gone, with the run).
        end = t.running if t.running is not None else (seen.gone if seen.gone is not None
                                                          else at)
        pulls = []
        for image in seen.images:
            present, seconds = next(((p, s) for i, p, s in said.get(uid, []) if i == image),
                                    (False, end - at))
            pulls.append(ImagePull(image, present, 0, 0, at, at, at + seconds))
        if pulls and attributed.get(uid):
            pulls[0] = dataclasses.replace(pulls[0], bytes=attributed[uid])
        waited = max((p.end for p in pulls), default=at)
        starts.append(PodStart(namespace, seen.name, uid, node, seen.owner, at, waited,
                               tuple(pulls)))
        if t.running is not None:
            running[uid] = t.running - at
    return starts, running
