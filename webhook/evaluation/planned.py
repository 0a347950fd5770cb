"""A scenario as the simulator replays it before any run (`measure.observed_trace` is the trace
a run observed): each Deployment's pods at the times its actions create them, a rolling
update's new pods a step at a time as its old ones go. For sweeping the decision over many
seeds and cluster sizes in seconds (python -m webhook.evaluation.smallsweep); the real runs
are the judge.

Approximations, named: a rollout replaces `max(1, 25 % + 25 %)` of the replicas every
`rollout_step` seconds (the Deployment's default maxSurge and maxUnavailable, with a pod's
start taken as that long); a deleted Deployment's pods end at once; requests as the scenario
gives them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from webhook.evaluation.scenario import Scenario
from webhook.sim.workload import PodSpec, Trace

OPEN_END = 1e9


@dataclass
class _Deployment:
    image: str
    cpu_milli: int
    memory: int
    version: int = 1
    pods: list[int] = field(default_factory=list)  # indices into the trace's pods, alive


def planned_trace(scenario: Scenario, rollout_step: float = 5.0) -> Trace:
    """The scenario's pods, arrival order; each pod's workload is its ReplicaSet (the
    Deployment and its version), as the spreading and the webhook count it."""
    pods: list[PodSpec] = []
    ends: dict[int, float] = {}
    deployments: dict[str, _Deployment] = {}

    def add(name: str, d: _Deployment, at: float) -> None:
        workload = f"{name}-v{d.version}"
        d.pods.append(len(pods))
        pods.append(PodSpec(name=f"{workload}-{len(pods)}", workload=workload, arrival=at,
                            images=(d.image,), cpu_milli=d.cpu_milli, memory=d.memory))

    for action in scenario.actions:
        if action.op == "create":
            d = deployments[action.deployment] = _Deployment(action.image, action.cpu_milli,
                                                             action.memory)
            for _ in range(action.replicas):
                add(action.deployment, d, action.at)
        elif action.op == "scale":
            d = deployments[action.deployment]
            for _ in range(action.replicas - len(d.pods)):
                add(action.deployment, d, action.at)
            for index in d.pods[action.replicas:]:
                ends[index] = action.at
            del d.pods[action.replicas:]
        elif action.op == "update":
            d = deployments[action.deployment]
            old, d.pods = d.pods, []
            d.image, d.version = action.image, d.version + 1
            step = max(1, math.ceil(0.25 * len(old)) + math.floor(0.25 * len(old)))
            for k in range(0, len(old), step):
                at = action.at + rollout_step * (k // step)
                for index in old[k:k + step]:
                    add(action.deployment, d, at)
                    ends[index] = at + rollout_step
        elif action.op == "delete":
            for index in deployments.pop(action.deployment).pods:
                ends[index] = action.at
    timed = [PodSpec(name=p.name, workload=p.workload, arrival=p.arrival, images=p.images,
                     cpu_milli=p.cpu_milli, memory=p.memory,
                     duration=ends[i] - p.arrival if i in ends else OPEN_END)
             for i, p in enumerate(pods)]
    timed.sort(key=lambda p: p.arrival)
    return Trace(nodes=scenario.nodes, pods=tuple(timed), images=scenario.images)
