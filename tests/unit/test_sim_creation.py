"""How pods reach admission and the scheduler: slow-start bursts and admission-time naming."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import validate_pod
from webhook.registry.catalog import StaticCatalog
from webhook.sim.creation import (
    CreationConfig,
    admission_object,
    created_object,
    owner_uid,
    plan_steps,
    pod_uid,
    slow_start_sizes,
)
from webhook.sim.engine import SimConfig, run
from webhook.sim.scheduler import PodView, Result
from webhook.sim.watch import SimWatch
from webhook.sim.workload import NodeSpec, PodSpec, Trace
from webhook.sim.world import World

IMAGE = "docker.io/library/busybox:1"


# The ReplicaSet controller's slowStartBatch (initial batch 1, doubling, last batch cut to
# what remains), worked out by hand.
@pytest.mark.parametrize(("count", "sizes"), [
    (0, []), (1, [1]), (2, [1, 1]), (3, [1, 2]), (4, [1, 2, 1]), (7, [1, 2, 4]),
    (12, [1, 2, 4, 5]), (16, [1, 2, 4, 8, 1]),
])
def test_slow_start_batch_sizes(count: int, sizes: list[int]) -> None:
    assert slow_start_sizes(count) == sizes


def deployment(workload: str, replicas: int, at: float) -> list[PodSpec]:
    return [PodSpec(name=f"{workload}-{r}", workload=workload, arrival=round(at + r * 0.01, 3),
                    images=(IMAGE,), cpu_milli=100) for r in range(replicas)]


def test_plan_steps_groups_a_scale_up_into_slow_start_batches() -> None:
    job = PodSpec(name="job-0", workload="job", kind="Job", arrival=10.02, images=(IMAGE,))
    later = deployment("web", 2, 500.0)  # a second scale-up of the same Deployment
    pods = sorted([*deployment("web", 7, 10.0), job, *later], key=lambda p: p.arrival)
    names = [p.name for p in pods]
    config = CreationConfig(step_seconds=0.05)
    steps = [(s.time, [names[i] for i in s.pods]) for s in plan_steps(pods, config)]
    assert steps == [
        (10.0, ["web-0"]),
        (10.02, ["job-0"]),
        (10.05, ["web-1", "web-2"]),
        (10.1, ["web-3", "web-4", "web-5", "web-6"]),
        (500.0, ["web-0"]),
        (500.05, ["web-1"]),
    ]


def test_without_bursts_every_pod_is_its_own_step() -> None:
    pods = deployment("web", 3, 5.0)
    steps = plan_steps(pods, CreationConfig(bursts=False))
    assert [(s.time, s.pods) for s in steps] == [(5.0, (0,)), (5.01, (1,)), (5.02, (2,))]


class Recorder:
    """A policy that records what the cluster looked like at each admission."""

    def __init__(self, world: World, watch: SimWatch) -> None:
        self.name = "recorder"
        self.world = world
        self.log: list[tuple[str, float, int]] = []  # (event, time, pods bound so far)

    def bound(self) -> int:
        return sum(len(n.pods) for n in self.world.nodes.values())

    def admit(self, pod: dict[str, Any], now: float,
              replica: int | None = None) -> dict[str, Any]:
        assert "name" not in pod["metadata"] and "uid" not in pod["metadata"]
        self.log.append(("admit", now, self.bound()))
        return pod

    def schedule(self, view: PodView, now: float) -> Result:
        self.log.append(("schedule", now, self.bound()))
        return Result(sorted(self.world.nodes)[self.bound() % len(self.world.nodes)], 1, {})

    def close(self) -> None:
        return None


@pytest.mark.parametrize("bursts", [True, False])
def test_every_create_of_a_step_is_reviewed_before_any_of_them_is_bound(bursts: bool) -> None:
    trace = Trace(nodes=(NodeSpec(name="a"), NodeSpec(name="b")),
                  pods=tuple(deployment("web", 12, 0.0)))
    recorder: list[Recorder] = []

    def factory(world: World, watch: SimWatch) -> Recorder:
        recorder.append(Recorder(world, watch))
        return recorder[0]

    config = SimConfig(creation=CreationConfig(bursts=bursts, step_seconds=0.05))
    result = run(trace, factory, StaticCatalog(), config)
    assert result.scheduled == 12
    log = recorder[0].log
    if bursts:
        sizes, times = [1, 2, 4, 5], [0.0, 0.05, 0.1, 0.15]
    else:
        sizes, times = [1] * 12, [round(r * 0.01, 3) for r in range(12)]
    expected: list[tuple[str, float, int]] = []
    bound = 0
    for size, at in zip(sizes, times, strict=True):
        # all CREATEs of the step see only the earlier steps' pods bound ...
        expected += [("admit", at, bound)] * size
        # ... then the scheduler binds them one by one
        expected += [("schedule", at, bound + k) for k in range(size)]
        bound += size
    assert log == expected


@pytest.mark.parametrize(("kind", "owner_kind"), [("Deployment", "ReplicaSet"), ("Job", "Job")])
def test_controller_pods_reach_admission_without_name_or_uid(kind: str, owner_kind: str) -> None:
    spec = PodSpec(name="web-3", workload="web", kind=kind, arrival=0.0, images=(IMAGE,))
    admitted = admission_object(spec)
    metadata = admitted["metadata"]
    assert "name" not in metadata and "uid" not in metadata
    assert metadata["generateName"].endswith("-")
    [ref] = metadata["ownerReferences"]
    assert ref["kind"] == owner_kind and ref["controller"] is True
    assert ref["uid"] == owner_uid(spec)
    assert metadata["generateName"] == f"{ref['name']}-"
    validate_pod(admitted)

    created = created_object(admitted, spec)
    assert "name" not in admitted["metadata"]  # the admitted object is left as it was
    name = created["metadata"]["name"]
    assert name.startswith(metadata["generateName"])
    assert len(name) == len(metadata["generateName"]) + 5
    assert created["metadata"]["uid"] == pod_uid(spec) != ref["uid"]
    validate_pod(created)
    view = PodView.of(created)
    assert view.name == name and view.owner == ref["uid"]


def test_pods_of_one_owner_share_the_owner_uid_and_get_distinct_names_and_uids() -> None:
    specs = deployment("web", 5, 0.0)
    created = [created_object(admission_object(s), s) for s in specs]
    assert len({c["metadata"]["ownerReferences"][0]["uid"] for c in created}) == 1
    assert len({c["metadata"]["name"] for c in created}) == 5
    assert len({c["metadata"]["uid"] for c in created}) == 5
    other = PodSpec(name="api-0", workload="api", arrival=0.0, images=(IMAGE,))
    assert owner_uid(other) != owner_uid(specs[0])


def test_bare_pods_keep_their_name_and_have_no_owner() -> None:
    spec = PodSpec(name="debug", workload="debug", kind="Pod", arrival=0.0, images=(IMAGE,))
    admitted = admission_object(spec)
    assert admitted["metadata"]["name"] == "debug"
    assert "ownerReferences" not in admitted["metadata"] and owner_uid(spec) is None
    assert created_object(admitted, spec)["metadata"]["name"] == "debug"
