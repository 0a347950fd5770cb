"""Decisions that pin down two hand-made mutants the rest of the suite let through: the spread
guard counting siblings on nodes that cannot take the pod, and the tie-break term added when
the best group holds a single node."""

from __future__ import annotations

from typing import Any

from tests.helpers import (
    AMD64,
    apply_patch,
    image,
    inventory,
    lack_weight_of,
    node_object,
    pod,
    validate_pod,
    weight_by_hostname,
)
from webhook.core.affinity import PreferredTerm
from webhook.core.decide import Decision, Siblings, decide
from webhook.core.layers import ImageLayers
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.registry.catalog import StaticCatalog

OWNER = "3b0e3c58-5f7e-4c2e-9a57-rs0000000002"
# spread_step 10, share 1.0 and no lack_bytes: weight = 100 * bytes present / pod bytes (a
# baseline term when the best holds less than the pod). Co-location off: these tests pin the
# guard's own arithmetic (test_colocation.py covers co-location).
POLICY = ScoringPolicy(colocate=False, lack_bytes=0)


def decided(target: ImageLayers, catalog: StaticCatalog, nodes: list[dict[str, Any]],
            counts: dict[str, int], policy: ScoringPolicy = POLICY
            ) -> tuple[Decision, dict[str, int]]:
    """The decision for a pod of `target` whose siblings sit per `counts` (maxSkew 3), and the
    raw NodeAffinity sum its validated patch gives every node."""
    _, index = inventory(nodes, catalog)
    obj = pod([target.ref])
    decision = decide(obj, [target], index, policy, salt="s",
                      siblings=Siblings(OWNER, counts, 3))
    assert decision.patched, decision.reason
    patched = apply_patch(obj, list(decision.patch))
    validate_pod(patched)
    return decision, weight_by_hostname(patched, [n["metadata"]["name"] for n in nodes])


def test_siblings_on_nodes_that_cannot_take_the_pod_do_not_raise_the_floor() -> None:
    """Kills "removing the spread guard's candidate filter". The cordoned node and the node
    with an untolerated taint hold a sibling each, but the scheduler cannot place the pod
    there, so they are not in its skew domain: the least-loaded candidate is holder-1 with 0
    siblings (floor 0). holder-0 then holds one sibling more than the floor and weighs
    spread_step below holder-1: 100 - 10 = 90, and holder-1, alone at the top, gets no
    tie-break term. Counting the two outside nodes makes 4 nodes with siblings for 3
    candidates: the floor rises to 1, holder-0's penalty vanishes and the holders tie."""
    app = image("registry.example.com/team/app:v2",
                {AMD64: [("base", 80 * MiB), ("code", 20 * MiB)]})
    taint = {"key": "dedicated", "value": "batch", "effect": "NoSchedule"}
    nodes = [
        node_object("holder-0", [app]),
        node_object("holder-1", [app]),
        node_object("empty-0"),
        node_object("cordoned", [app], unschedulable=True),
        node_object("tainted", [app], taints=[taint]),
    ]
    counts = {"holder-0": 1, "empty-0": 1, "cordoned": 1, "tainted": 1}
    decision, raw = decided(app, StaticCatalog([app]), nodes, counts)
    assert raw == {"holder-0": 90, "holder-1": 100, "empty-0": 0, "cordoned": 0, "tainted": 0}
    assert decision.terms == (PreferredTerm(100, ("holder-1",)), PreferredTerm(90, ("holder-0",)))
    assert decision.spread is not None
    assert (decision.spread.floor, dict(decision.spread.extra)) == (
        0, {"holder-0": 1, "empty-0": 1})


def test_a_single_best_node_gets_no_tie_break_term() -> None:
    """Kills "changing the tie-break's `< 2` to `< 1`". The tie-break term (spread_step on the
    first node named) exists only to choose among several equal nodes of the best group; a
    group never is empty, so under `< 1` every decision with the guard on would get it. Here
    the best group is one node ("best", 80 of the pod's 100 MiB: weight 80), so the terms are
    one per weight level (80, then "part" with 50 of 100 MiB: 50) and the baseline 100 - 80:
    the best node sums to exactly 100, the calibration the baseline exists for, not 110.
    Weighed from what a node lacks (the default), "best" holds more than lack_bytes and
    weighs 100 alone, "part" lacks more than lack_bytes beyond it and is not named: one term
    of 100, not 110."""
    target = image("registry.example.com/team/svc:v1",
                   {AMD64: [("a", 50 * MiB), ("b", 30 * MiB), ("c", 20 * MiB)]})
    ab = image("registry.example.com/team/ab:v1", {AMD64: [("a", 50 * MiB), ("b", 30 * MiB)]})
    a = image("registry.example.com/team/a:v1", {AMD64: [("a", 50 * MiB)]})
    nodes = [node_object("best", [ab]), node_object("part", [a]), node_object("empty")]
    decision, raw = decided(target, StaticCatalog([target, ab, a]), nodes, {"empty": 1})
    assert decision.terms == (
        PreferredTerm(80, ("best",)), PreferredTerm(50, ("part",)), PreferredTerm(20, ()))
    assert raw == {"best": 100, "part": 70, "empty": 20}
    lack = ScoringPolicy(colocate=False)
    assert lack_weight_of(80 * MiB, 80 * MiB, lack) == 100
    assert lack_weight_of(50 * MiB, 80 * MiB, lack) == 0
    decision, raw = decided(target, StaticCatalog([target, ab, a]), nodes, {"empty": 1}, lack)
    assert decision.terms == (PreferredTerm(100, ("best",)),)
    assert raw == {"best": 100, "part": 0, "empty": 0}
