"""The telemetry recorder: first binds only, measured against the index as it stands; pull
events deduplicated by (uid, count), matched to their pod (or held until it is seen), the
first list of each resource remembered but not counted; memory released with the pod."""

from __future__ import annotations

from typing import Any

import orjson

from tests.helpers import AMD64, Clock, apply_patch, image, inventory, node_object, pod
from webhook.core.decide import decide
from webhook.core.holdout import Group, cohort, workload_hash
from webhook.core.images import try_parse
from webhook.core.index import LayerIndex
from webhook.core.layers import ImageLayers
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.registry.catalog import StaticCatalog
from webhook.telemetry.recorder import Telemetry, TelemetrySettings

BASE = image("registry.example.com/base:1", {AMD64: [("base", 200 * MiB)]})
APP = image("registry.example.com/app:1", {AMD64: [("base", 200 * MiB), ("app", 90 * MiB)]})
CATALOG = StaticCatalog([BASE, APP])
PRESENT = 'Container image "registry.example.com/app:1" already present on machine'
PULLED = ('Successfully pulled image "registry.example.com/app:1" in 1.5s '
          '(2.5s including waiting). Image size: 94371840 bytes.')


class Sink:
    def __init__(self) -> None:
        self.binds: list[tuple[str, float | None, int | None]] = []
        self.pulls: list[tuple[bool, str, float, int]] = []
        self.groups: list[str] = []  # the group of each pull
        self.starts: list[tuple[str, int, str, int]] = []
        self.start_pulls: list[tuple[str, int, float, int]] = []
        self.runs: list[tuple[str, int, float]] = []
        self.unparsed_count = 0
        self.unmatched_count = 0

    def bind(self, outcome: str, present_ratio: float | None,
             avoided_bytes: int | None) -> None:
        self.binds.append((outcome, present_ratio, avoided_bytes))

    def pull(self, patched: bool, group: str, result: str, seconds: float,
             times: int) -> None:
        self.pulls.append((patched, result, seconds, times))
        self.groups.append(group)

    def start(self, group: str, cohort: int, workload: str, missing_bytes: int) -> None:
        self.starts.append((group, cohort, workload, missing_bytes))

    def start_pull(self, group: str, cohort: int, seconds: float, times: int) -> None:
        self.start_pulls.append((group, cohort, seconds, times))

    def running(self, group: str, cohort: int, seconds: float) -> None:
        self.runs.append((group, cohort, seconds))

    def unparsed(self, times: int) -> None:
        self.unparsed_count += times

    def unmatched(self, times: int) -> None:
        self.unmatched_count += times




def lookup(text: str) -> ImageLayers | None:
    ref = try_parse(text)
    return CATALOG.cached(ref) if ref is not None else None


def setup(**settings: Any) -> tuple[Telemetry, Sink, Clock, LayerIndex, dict[str, Any]]:
    """Nodes full (APP), part (BASE), empty; a patched APP pod reviewed against them, weighed
    by share (no lack_bytes: part, lacking the 90 MiB app layer, is still preferred)."""
    _, index = inventory([node_object("full", [APP]), node_object("part", [BASE]),
                          node_object("empty")], CATALOG)
    sink, clock = Sink(), Clock()
    telemetry = Telemetry(sink, index, lookup, clock, TelemetrySettings(**settings))
    decision = decide(pod([APP.ref]), [APP], index, ScoringPolicy(lack_bytes=0), salt="s",
                      token="t")
    return telemetry, sink, clock, index, apply_patch(pod([APP.ref]), list(decision.patch))


MEAN = (290 + 200 + 0) * MiB // 3  # the candidates' mean bytes at review


def event(uid: str, pod_uid: str, message: str, count: int = 1) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "default"},
            "reason": "Pulled", "message": message, "count": count,
            "involvedObject": {"kind": "Pod", "uid": pod_uid}}


def test_binds_are_measured_once_and_only_after_the_first_list() -> None:
    telemetry, sink, _, _, patched = setup()
    telemetry.pod("listed", patched, "full")  # in the first list: bound before we watched
    telemetry.pods_listed()
    assert sink.binds == []
    telemetry.pod("a", patched, "full")
    telemetry.pod("a", patched, "full")  # a status update of the same pod
    telemetry.pod("b", patched, "part")
    telemetry.pod("c", patched, "empty")
    telemetry.pod("d", pod([APP.ref]), "empty")  # no decision: not a bind outcome
    assert sink.binds == [
        ("top", 1.0, 290 * MiB - MEAN),
        ("preferred", 200 / 290, 200 * MiB - MEAN),
        ("other", 0.0, -MEAN),
    ]


def test_the_index_at_bind_time_counts() -> None:
    telemetry, sink, _, index, patched = setup()
    telemetry.pods_listed()
    # The empty node gained the base since the review (a sibling's layers in flight).
    node = index.node("empty")
    assert node is not None
    index.upsert(node, {layer.digest for layer in BASE.platforms[AMD64].layers})
    telemetry.pod("a", patched, "empty")
    assert sink.binds == [("other", 200 / 290, 200 * MiB - MEAN)]
    # A node the index does not know yet: the outcome by name, nothing to measure.
    telemetry.pod("b", patched, "new-node")
    assert sink.binds[-1] == ("other", None, None)


def test_pull_events_deduplicated_by_uid_and_count() -> None:
    telemetry, sink, _, _, patched = setup()
    telemetry.pod("p", patched, "full")
    telemetry.pod("q", pod([APP.ref]), "empty")
    telemetry.event("ADDED", "old", event("old", "p", PRESENT))  # the first list: the past
    telemetry.events_listed()
    telemetry.event("MODIFIED", "old", event("old", "p", PRESENT))  # same count: nothing new
    telemetry.event("ADDED", "e1", event("e1", "p", PRESENT))
    telemetry.event("ADDED", "e2", event("e2", "q", PULLED))
    telemetry.event("MODIFIED", "e1", event("e1", "p", PRESENT))  # relist: same (uid, count)
    telemetry.event("MODIFIED", "e1", event("e1", "p", PRESENT, count=3))  # two more starts
    telemetry.event("ADDED", "e3", event("e3", "q", "Pulling image \"x\""))
    assert sink.pulls == [(True, "present", 0.0, 1), (False, "pulled", 2.5, 1),
                          (True, "present", 0.0, 2)]
    assert sink.unparsed_count == 1
    # A deleted Event is forgotten; an Event about something else is ignored.
    telemetry.event("DELETED", "e1", event("e1", "p", PRESENT, count=3))
    assert telemetry.tracked[1] == 3  # old, e2, e3
    telemetry.event("ADDED", "n", {**event("n", "p", PRESENT), "reason": "Created"})
    assert len(sink.pulls) == 3


def test_one_event_update_adds_at_most_max_repeats_occurrences() -> None:
    """A count that jumps (an Event aggregated over a long time, or a bogus one) adds at most
    `max_repeats`; a jump up to the cap counts whole. Unparsed and held events too."""
    telemetry, sink, clock, _, patched = setup(max_repeats=5, orphan_seconds=60)
    telemetry.pod("p", patched, "full")
    telemetry.pods_listed()
    telemetry.events_listed()
    telemetry.event("ADDED", "e", event("e", "p", PRESENT, count=4))  # 4: under the cap
    telemetry.event("MODIFIED", "e", event("e", "p", PRESENT, count=9))  # 5 more: the cap
    telemetry.event("MODIFIED", "e", event("e", "p", PRESENT, count=1000))  # 991 more
    assert [times for *_, times in sink.pulls] == [4, 5, 5]
    telemetry.event("ADDED", "u", event("u", "p", "Pulling image \"x\"", count=50))
    assert sink.unparsed_count == 5
    telemetry.event("ADDED", "h", event("h", "unseen", PULLED, count=50))  # held for its pod
    clock.now = 61
    telemetry.expire()
    assert sink.unmatched_count == 5


def test_an_event_before_its_pod_waits_for_it() -> None:
    telemetry, sink, clock, _, patched = setup(orphan_seconds=60)
    telemetry.pods_listed()
    telemetry.events_listed()
    telemetry.event("ADDED", "e1", event("e1", "late", PULLED))
    telemetry.event("ADDED", "e2", event("e2", "never", PULLED))
    assert sink.pulls == [] and telemetry.tracked[2] == 2
    clock.now = 30
    telemetry.pod("late", patched, "part")
    assert sink.pulls == [(True, "pulled", 2.5, 1)]
    clock.now = 61
    assert telemetry.expire() == 1
    assert sink.unmatched_count == 1 and telemetry.tracked[2] == 0


def test_waiting_events_are_capped() -> None:
    telemetry, sink, _, _, _ = setup(max_orphans=2)
    telemetry.events_listed()
    for i in range(5):
        telemetry.event("ADDED", f"e{i}", event(f"e{i}", f"pod-{i}", PRESENT))
    assert telemetry.tracked[2] == 2 and sink.unmatched_count == 3


def test_memory_ends_with_the_pod_and_the_event() -> None:
    telemetry, _, _, _, patched = setup(max_events=2)
    telemetry.pods_listed()
    telemetry.events_listed()
    telemetry.pod("a", patched, "full")
    telemetry.pod("b", patched, "full")
    assert telemetry.tracked[0] == 2
    telemetry.pod("a", None, None)  # deleted
    telemetry.pod("b", patched, None)  # seen without a node: gone too
    assert telemetry.tracked[0] == 0
    for i in range(4):
        telemetry.event("ADDED", f"e{i}", event(f"e{i}", "a", PRESENT))
    assert telemetry.tracked[1] == 2  # LRU bound


# -- the holdout ---------------------------------------------------------------------------

class Wall:
    now = 1_800_000_000.0  # 2027-01-15T08:00:00Z

    def __call__(self) -> float:
        return self.now


CREATED = "2027-01-15T07:59:50Z"  # 10 s before Wall.now


def trial(group: Group, workload: str = "web",
          listed: bool = True) -> tuple[Telemetry, Sink, Wall, dict[str, Any]]:
    """A pod of `workload` reviewed in the experiment as `group`; telemetry past its first
    lists when `listed`."""
    _, index = inventory([node_object("full", [APP]), node_object("part", [BASE]),
                          node_object("empty")], CATALOG)
    sink, wall = Sink(), Wall()
    telemetry = Telemetry(sink, index, lookup, Clock(), wall=wall)
    if listed:
        telemetry.pods_listed()
        telemetry.events_listed()
    reviewed = pod([APP.ref], metadata={"creationTimestamp": CREATED})
    decision = decide(reviewed, [APP], index, ScoringPolicy(), salt="s", token="t",
                      group=group, workload=workload_hash(workload))
    return telemetry, sink, wall, apply_patch(reviewed, list(decision.patch))


def test_a_held_out_pod_is_a_start_of_its_group_and_never_a_bind() -> None:
    telemetry, sink, _, held = trial(Group.HOLDOUT)
    assert "affinity" not in held["spec"]  # the annotation alone
    telemetry.pod("h", held, "part")
    assert sink.binds == []
    assert sink.starts == [("holdout", cohort(workload_hash("web")), workload_hash("web"),
                            90 * MiB)]  # the node lacked the app layer
    telemetry.event("ADDED", "e", event("e", "h", PULLED))
    assert sink.pulls == [(False, "pulled", 2.5, 1)] and sink.groups == ["holdout"]
    assert sink.start_pulls == [("holdout", cohort(workload_hash("web")), 2.5, 1)]


def test_a_steered_pod_is_a_bind_and_a_start() -> None:
    telemetry, sink, _, steered = trial(Group.STEERED, "api")
    telemetry.pod("s", steered, "full")
    assert [outcome for outcome, _, _ in sink.binds] == ["top"]
    assert sink.starts == [("steered", cohort(workload_hash("api")), workload_hash("api"), 0)]
    telemetry.event("ADDED", "e", event("e", "s", PRESENT))
    assert sink.pulls == [(True, "present", 0.0, 1)] and sink.groups == ["steered"]


def test_time_to_running_from_creation_until_first_seen_running() -> None:
    telemetry, sink, wall, held = trial(Group.HOLDOUT)
    telemetry.pod("h", held, "empty")
    assert sink.runs == []
    wall.now += 5
    telemetry.pod("h", {**held, "status": {"phase": "Pending"}}, "empty")
    assert sink.runs == []
    telemetry.pod("h", {**held, "status": {"phase": "Running"}}, "empty")
    telemetry.pod("h", {**held, "status": {"phase": "Running"}}, "empty")  # once
    assert sink.runs == [("holdout", cohort(workload_hash("web")), 15.0)]


def test_a_pod_first_seen_running_counts_at_once() -> None:
    telemetry, sink, _, steered = trial(Group.STEERED)
    telemetry.pod("s", {**steered, "status": {"phase": "Running"}}, "full")
    assert [seconds for _, _, seconds in sink.runs] == [10.0]


def test_what_is_not_a_start() -> None:
    telemetry, sink, _, held = trial(Group.HOLDOUT)
    telemetry.pod("unknown-node", held, "new-node")  # its bytes cannot be measured
    telemetry.pod("plain", pod([APP.ref]), "empty")  # not in the experiment
    outside, other_sink, _, steered_off = trial(Group.NONE)
    outside.pod("off", steered_off, "full")  # the holdout is off: a bind, no start
    assert sink.starts == [] and other_sink.starts == []
    assert [outcome for outcome, _, _ in other_sink.binds] == ["top"]
    early, early_sink, _, before = trial(Group.STEERED, listed=False)
    early.pod("listed", before, "full")  # in the first list: it started before we watched
    assert early_sink.starts == []


def test_a_start_is_forgotten_with_its_pod() -> None:
    telemetry, sink, _, held = trial(Group.HOLDOUT)
    telemetry.pod("h", held, "part")
    telemetry.pod("h", None, None)
    telemetry.pod("h2", held, "part")
    telemetry.pod("h2", {**held, "status": {"phase": "Running"}}, "part")
    assert len(sink.runs) == 1 and telemetry.tracked[0] == 1


def test_malformed_holdout_fields_never_raise() -> None:
    """Any pod in any namespace reaches the telemetry: a bad value is "not in the experiment",
    never an exception in the watch's callback."""
    telemetry, sink, _, _ = trial(Group.NONE)
    for i, (group, workload) in enumerate([(["x"], "a" * 16), ({"a": 1}, 5), (5, None),
                                           ("holdout", ["w"]), ("steered", "zz")]):
        doc = {"v": 3, "podBytes": 1, "group": group, "workload": workload}
        bad = pod([APP.ref], metadata={"annotations": {
            "layer-locality.io/decision": orjson.dumps(doc).decode()},
            "creationTimestamp": ["not", "a", "time"]})
        telemetry.pod(f"bad-{i}", bad, "full")
        telemetry.pod(f"bad-{i}", {**bad, "status": {"phase": "Running"}}, "full")
    assert sink.starts == []


def test_an_unsteered_pod_of_the_experiment_is_a_start_and_not_a_bind() -> None:
    _, index = inventory([node_object("full", [APP]), node_object("empty")], CATALOG)
    sink = Sink()
    telemetry = Telemetry(sink, index, lookup, Clock(), wall=Wall())
    telemetry.pods_listed()
    telemetry.events_listed()
    doc = {"v": 3, "id": "t", "group": "steered", "workload": workload_hash("x"),
           "podBytes": 290 * MiB, "skipped": "no_preference"}
    unsteered = pod([APP.ref], metadata={"annotations": {
        "layer-locality.io/decision": orjson.dumps(doc).decode()}})
    telemetry.pod("u", unsteered, "empty")
    assert sink.binds == []
    assert sink.starts == [("steered", cohort(workload_hash("x")), workload_hash("x"),
                            290 * MiB)]
    telemetry.event("ADDED", "e", event("e", "u", PULLED))
    assert sink.pulls == [(False, "pulled", 2.5, 1)] and sink.groups == ["steered"]
