"""What one evaluation run measured (webhook/evaluation/measure.py): heat, the metrics of a
hand-built record, and the record as the trace the simulator replays."""

from __future__ import annotations

import pytest

from webhook.evaluation.kubelet import PodStart
from webhook.evaluation.measure import OPEN_END, heat, measure, observed_trace
from webhook.evaluation.pulls import ImagePull
from webhook.evaluation.run import PodSeen, RunRecord
from webhook.evaluation.scenario import Scenario
from webhook.sim.workload import NodeSpec, load_trace, trace_document

MiB = 1 << 20
IMAGE = "docker.io/library/python:3.11"


@pytest.mark.parametrize(("intervals", "expected"), [
    ([], 0),
    ([("a", "n1", 0, 10)], 1),
    ([("a", "n1", 0, 10), ("a", "n1", 5, 15), ("a", "n2", 0, 10), ("b", "n1", 0, 10)], 2),
    # one ends when the next starts: never together
    ([("a", "n1", 0, 5), ("a", "n1", 5, 10), ("a", "n1", 10, 15)], 1),
    ([("a", "n1", 0, 100), ("a", "n1", 10, 20), ("a", "n1", 15, 30), ("a", "n1", 25, 40)], 3),
    # other owners and nodes do not add up
    ([("a", "n1", 0, 9), ("b", "n1", 0, 9), ("a", "n2", 0, 9), ("a", "n1", 1, 2)], 2),
])
def test_heat(intervals: list[tuple[str, str, float, float]], expected: int) -> None:
    assert heat(intervals) == expected


def pull(nbytes: int, start: float, end: float) -> ImagePull:
    return ImagePull(IMAGE, nbytes == 0, nbytes, 1 if nbytes else 0, start, start, end)


def record() -> tuple[RunRecord, Scenario]:
    nodes = (NodeSpec("n1", "zone-a", cpu_milli=1000), NodeSpec("n2", "zone-b", cpu_milli=1000))
    scenario = Scenario("bursts", 4, nodes, (), ())
    rs = "ReplicaSet/web-5d8f"
    rec = RunRecord("webhook", "bursts", 4, 1, 20.0)
    rec.pods = {
        "u1": PodSeen("u1", "web-5d8f-a", rs, 1.0004, 250, 256 * MiB, (IMAGE,),
                      {"terms": [{"weight": 5}]}),
        "u2": PodSeen("u2", "web-5d8f-b", rs, 2.0, 500, 512 * MiB, (IMAGE,), None),
        "u3": PodSeen("u3", "web-5d8f-c", rs, 0.5, 100, 128 * MiB, (IMAGE,), {"terms": []},
                      gone=30.0),
        "u4": PodSeen("u4", "lonely", None, 3.0, 100, 64 * MiB, (IMAGE,), None),
    }
    rec.starts = [
        PodStart("evaluation", "web-5d8f-c", "u3", "n1", rs, 1.0, 11.0, (pull(100 * MiB, 1, 11),)),
        PodStart("evaluation", "web-5d8f-a", "u1", "n1", rs, 2.0, 4.0, (pull(20 * MiB, 2, 4),)),
        PodStart("evaluation", "web-5d8f-b", "u2", "n2", rs, 3.0, 3.0, (pull(0, 3, 3),)),
    ]
    rec.ends = {"u3": 30.0, "u4": 50.0}
    rec.unscheduled = 1
    return rec, scenario


def test_measure_a_hand_built_record() -> None:
    rec, scenario = record()
    m = measure(rec, scenario)
    assert m.pods == 3
    assert m.bytes_pulled == 120 * MiB
    assert m.no_pull == 1
    assert m.pull_mean == pytest.approx((10 + 2 + 0) / 3)
    assert (m.pull_p50, m.pull_p95) == (2.0, 10.0)
    assert m.heat == 2  # u3 and u1 on n1 from 2 to 30
    # at the end n1 holds u1 (25 % of its cpu), n2 u2 (50 %): population stdev 12.5 points
    assert m.balance == pytest.approx(12.5)
    assert m.unscheduled == 1
    assert m.patched == 1  # u3's decision has no terms


def test_observed_trace_replays_the_record() -> None:
    rec, scenario = record()
    trace = observed_trace(rec, scenario)
    assert trace.nodes == scenario.nodes
    assert [p.name for p in trace.pods] == ["web-5d8f-c", "web-5d8f-a", "web-5d8f-b", "lonely"]
    by_name = {p.name: p for p in trace.pods}
    c, a, lonely = by_name["web-5d8f-c"], by_name["web-5d8f-a"], by_name["lonely"]
    assert (c.workload, c.kind, c.arrival, c.duration) == ("web-5d8f", "Deployment", 0.5, 29.5)
    assert (a.arrival, a.duration) == (1.0, OPEN_END)  # still running when the run settled
    assert (a.cpu_milli, a.memory, a.images) == (250, 256 * MiB, (IMAGE,))
    assert (lonely.workload, lonely.kind, lonely.duration) == ("lonely", "Pod", 47.0)
    # and through the simulator's trace format
    assert load_trace(trace_document(trace)) == trace
