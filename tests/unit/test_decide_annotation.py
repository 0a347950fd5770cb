"""What a decision under the spread guard says in its annotation: the caller's token, stand-ins,
group and workload, each named node's siblings, an unpatched or held-out decision's findings,
meanBytes, leftOut, the deciding replica. (Split from test_decide.py: the cluster and replicas
are in replica_cluster.py.)"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import orjson

from tests.helpers import (
    apply_patch,
    image,
    inventory,
    node_object,
    pod,
    validate_pod,
)
from tests.unit.replica_cluster import (
    APP,
    CATALOG,
    DEFAULTS,
    EMPTY,
    HOLDERS,
    OWNER,
    annotation,
    replica,
)
from webhook.core.decide import Siblings, decide
from webhook.core.layers import Platform
from webhook.core.pods import DECISION_ANNOTATION
from webhook.core.scoring import MiB


def test_a_pod_of_the_experiment_given_no_preference_still_says_its_group() -> None:
    """in_experiment: an unsteered decision of a pod in the holdout experiment gets the
    annotation alone (its group, workload, bytes and why), and no affinity; a steered one
    or one outside the experiment is returned as it is."""
    from webhook.core.annotation import DECISION_VERSION
    from webhook.core.decide import in_experiment
    from webhook.core.holdout import Group
    from webhook.core.reasons import Reason

    _, cold = inventory([node_object(n) for n in EMPTY], CATALOG)
    obj = pod([APP.ref])
    unsteered = decide(obj, [APP], cold, DEFAULTS, salt="s")
    assert unsteered.reason is Reason.BELOW_THRESHOLD and not unsteered.patch
    for group in (Group.STEERED, Group.HOLDOUT):
        marked = in_experiment(obj, unsteered, group, "0123456789abcdef", "tok")
        assert marked.reason is Reason.BELOW_THRESHOLD and not marked.patched
        patched = apply_patch(obj, list(marked.patch))
        validate_pod(patched)
        assert "affinity" not in patched["spec"]
        assert orjson.loads(patched["metadata"]["annotations"][DECISION_ANNOTATION]) == {
            "v": DECISION_VERSION, "id": "tok", "group": group.value,
            "workload": "0123456789abcdef", "podBytes": unsteered.pod_bytes,
            "skipped": "below_threshold"}
    assert in_experiment(obj, unsteered, Group.NONE, "0123456789abcdef", "tok") is unsteered
    _, warm = inventory([node_object(n, [APP]) for n in HOLDERS]
                        + [node_object(n) for n in EMPTY], CATALOG)
    steered = decide(obj, [APP], warm, DEFAULTS, salt="s")
    assert steered.patched
    assert in_experiment(obj, steered, Group.STEERED, "0123456789abcdef", "tok") is steered
    # Held out: not patched, but it carries its own annotation (what it would have preferred).
    held = decide(obj, [APP], warm, DEFAULTS, salt="s", group=Group.HOLDOUT,
                  workload="0123456789abcdef")
    assert held.reason is Reason.HOLDOUT and held.patch
    assert in_experiment(obj, held, Group.HOLDOUT, "0123456789abcdef", "tok") is held


def test_the_annotation_carries_what_the_caller_gave() -> None:
    """decide passes its token, stand-ins, group and workload to the annotation; without
    them the annotation has none of those fields."""
    from webhook.core.holdout import Group

    _, index = inventory([node_object(n, [APP]) for n in HOLDERS]
                         + [node_object(n) for n in EMPTY], CATALOG)
    obj = pod([APP.ref])

    def annotation(decision: Any) -> dict[str, Any]:
        assert decision.patched
        patched = apply_patch(obj, list(decision.patch))
        doc: dict[str, Any] = orjson.loads(
            patched["metadata"]["annotations"][DECISION_ANNOTATION])
        return doc

    carried = annotation(decide(obj, [APP], index, DEFAULTS, salt="s", token="tok",
                                stand_ins=2, group=Group.STEERED,
                                workload="0123456789abcdef"))
    assert (carried["id"], carried["standIns"], carried["group"], carried["workload"]) == (
        "tok", 2, "steered", "0123456789abcdef")
    bare = annotation(decide(obj, [APP], index, DEFAULTS, salt="s"))
    assert not {"id", "standIns", "group", "workload"} & set(bare)


def test_each_node_named_says_how_many_siblings_it_holds() -> None:
    """With the spread guard on, the annotation's top nodes and Decision.preferred carry each
    node's sibling count, 0 for a node holding none; without it, no count at all."""
    _, index = inventory([node_object(n, [APP]) for n in HOLDERS]
                         + [node_object(n) for n in EMPTY], CATALOG)
    obj = replica(0)
    counts = {"holder-0": 1, "holder-1": 1, "holder-2": 2}
    decision = decide(obj, [APP], index, DEFAULTS, salt="s",
                      siblings=Siblings(OWNER, counts, 5))
    assert decision.patched
    preferred = [(score.node.name, score.siblings) for score in decision.preferred]
    assert preferred[0] == ("holder-3", 0)  # no sibling: the best
    assert sorted(preferred) == sorted((name, counts.get(name, 0)) for name in HOLDERS)
    doc = orjson.loads(apply_patch(obj, list(decision.patch))["metadata"]["annotations"][
        DECISION_ANNOTATION])
    assert [(entry["node"], entry["siblings"]) for entry in doc["top"]] == preferred[:3]
    unguarded = decide(obj, [APP], index, DEFAULTS, salt="s")
    doc = orjson.loads(apply_patch(obj, list(unguarded.patch))["metadata"]["annotations"][
        DECISION_ANNOTATION])
    assert doc["top"] and not any("siblings" in entry for entry in doc["top"])


def test_an_unpatched_decision_still_says_what_it_found() -> None:
    """`explain` and the holdout's annotation read an unpatched decision: the pod's bytes,
    the candidates, the groups and the spread state are there."""
    from webhook.core.reasons import Reason

    _, cold = inventory([node_object(n) for n in EMPTY], CATALOG)
    decision = decide(replica(0), [APP], cold, replace(DEFAULTS, colocate=False), salt="s",
                      siblings=Siblings(OWNER, {"empty-1": 1}, 3))
    assert decision.reason is Reason.BELOW_THRESHOLD
    assert decision.pod_bytes == 100 * MiB and decision.candidates.bit_count() == len(EMPTY)
    assert [(g.bytes_present, g.mask.bit_count()) for g in decision.groups] == [(0, 3), (0, 1)]
    assert decision.spread is not None and dict(decision.spread.counts) == {"empty-1": 1}


def test_left_out_is_0_when_the_guard_excludes_nothing() -> None:
    _, index = inventory([node_object(n, [APP]) for n in HOLDERS]
                         + [node_object(n) for n in EMPTY], CATALOG)
    obj = replica(0)
    decision = decide(obj, [APP], index, DEFAULTS, salt="s", siblings=Siblings(OWNER, {}, 3))
    assert decision.patched and decision.left_out == 0
    assert [(g.bytes_present, g.extra_siblings) for g in decision.groups] == [
        (100 * MiB, 0), (0, 0)]
    doc = orjson.loads(apply_patch(obj, list(decision.patch))["metadata"]["annotations"][
        DECISION_ANNOTATION])
    assert doc["spread"]["leftOut"] == 0


def test_a_held_out_pod_is_annotated_with_what_it_would_have_been_given() -> None:
    """Group HOLDOUT: no affinity, and the annotation the steered pod would carry (same
    nodes, bytes, siblings, spread, cut, id, stand-ins, workload), less the count of terms,
    and with its group."""
    from webhook.core.holdout import Group
    from webhook.core.reasons import Reason

    many = [f"holder-{i:02d}-" + "n" * 50 for i in range(60)]
    _, index = inventory([node_object(n, [APP]) for n in many]
                         + [node_object(n) for n in EMPTY], CATALOG)
    obj = replica(0)
    common: dict[str, Any] = {
        "salt": "s", "token": "tok", "stand_ins": 1, "workload": "0123456789abcdef",
        "siblings": Siblings(OWNER, {many[0]: 9, many[1]: 1}, 3)}
    steered = decide(obj, [APP], index, DEFAULTS, group=Group.STEERED, **common)
    held = decide(obj, [APP], index, DEFAULTS, group=Group.HOLDOUT, **common)
    assert steered.patched and held.reason is Reason.HOLDOUT and not held.patched
    assert held.named == steered.named and held.cut == steered.cut > 0
    assert held.preferred == steered.preferred and held.pod_bytes == steered.pod_bytes
    assert held.terms == () and steered.terms
    assert (held.candidates, held.groups, held.spread) == (
        steered.candidates, steered.groups, steered.spread)
    assert held.left_out == steered.left_out == 1
    patched = apply_patch(obj, list(held.patch))
    assert "affinity" not in patched["spec"]
    validate_pod(patched)

    def annotation(of: dict[str, Any]) -> dict[str, Any]:
        doc: dict[str, Any] = orjson.loads(of["metadata"]["annotations"][DECISION_ANNOTATION])
        return doc

    would = annotation(apply_patch(obj, list(steered.patch)))
    assert would.pop("terms") > 0
    assert annotation(patched) == {**would, "group": "holdout"}
    assert {"id", "standIns", "spread", "cut", "top", "podBytes", "meanBytes"} <= set(would)


def test_the_annotation_gives_the_candidates_mean_bytes_and_no_platform_is_a_reason() -> None:
    """meanBytes: the bytes a node picked blind to layers holds on average, floored (two
    holders of 100 MiB and an empty node: 200 MiB / 3)."""
    from webhook.core.reasons import Reason

    _, index = inventory([node_object("a", [APP]), node_object("b", [APP]),
                          node_object("c")], CATALOG)
    obj = pod([APP.ref])
    decision = decide(obj, [APP], index, DEFAULTS, salt="s")
    doc = orjson.loads(apply_patch(obj, list(decision.patch))["metadata"]["annotations"][
        DECISION_ANNOTATION])
    assert doc["meanBytes"] == 200 * MiB // 3 and isinstance(doc["meanBytes"], int)
    arm = image("registry.example.com/team/arm-only:v1",
                {Platform("linux", "arm64"): [("a", 50 * MiB)]})
    assert decide(pod([arm.ref]), [arm], index, DEFAULTS, salt="s").reason is Reason.NO_PLATFORM


def test_the_deciding_replica_is_named_in_live_mode_only() -> None:
    """`by`: the replica whose decision the pod carries, read by the other replicas from their
    pod watch; a steered pod and a held-out one name it, a static inventory (no siblings)
    writes no `by` at all."""
    from webhook.core.holdout import Group

    _, index = inventory([node_object(n, [APP]) for n in HOLDERS]
                         + [node_object(n) for n in EMPTY], CATALOG)
    obj = replica(0)
    live = Siblings(OWNER, {}, 3, replica="a1b2c3d4")
    for group in (Group.NONE, Group.STEERED, Group.HOLDOUT):
        decision = decide(obj, [APP], index, DEFAULTS, salt="s", token="tok", siblings=live,
                          group=group, workload="0123456789abcdef")
        assert annotation(obj, decision.patch)["by"] == "a1b2c3d4", group
    static = decide(obj, [APP], index, DEFAULTS, salt="s", token="tok")
    assert "by" not in annotation(obj, static.patch)
