"""Where a placement's lost bytes go (webhook/core/causes.py): one constructed placement per
cause, the bytes against the best node in the same state, the table summed over placements;
the same words for a bound pod's own record (explain_bind); and the simulator's probe naming
the cause of a placement it watched (webhook/sim/lossprobe.py)."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from webhook.core.causes import (
    Cause,
    LossTable,
    NodeView,
    Placement,
    attribute,
    explain_bind,
)
from webhook.core.layers import Platform

MiB = 1 << 20
EVEN = {"NodeAffinity": 0, "PodTopologySpread": 100, "NodeResourcesFit": 90,
        "NodeResourcesBalancedAllocation": 95, "ImageLocality": 0, "TaintToleration": 300}


def node(name: str, held: int, weight: int = 0, believed: int | None = None,
         closed_by: str = "", excess: int = 0, sampled: bool = True,
         scores: Mapping[str, int] | None = None, **named: int) -> NodeView:
    """A feasible node holding `held` MiB of the pod; scores as the scheduler weighs them
    (NodeAffinity from the weight unless given)."""
    merged: Mapping[str, int] = {**EVEN, "NodeAffinity": 2 * weight, **(scores or {}),
                                 **named}
    return NodeView(name, held * MiB, (held if believed is None else believed) * MiB, weight,
                    excess, sampled, closed_by, merged)


def placement(chosen: str, *nodes: NodeView, patched: bool = True) -> Placement:
    return Placement("web-1", 300 * MiB, chosen, nodes, patched)


def test_the_chosen_node_as_good_as_the_best_loses_nothing() -> None:
    loss = attribute(placement("a", node("a", 300, 100), node("b", 300, 100)))
    assert (loss.cause, loss.lost) == (Cause.NONE, 0)


@pytest.mark.parametrize(("closed_by", "cause"), [("counts", Cause.GUARD_COUNTS),
                                                  ("headroom", Cause.GUARD_HEADROOM),
                                                  ("replicas", Cause.GUARD_REPLICAS)])
def test_a_holder_the_guard_closed_loses_to_the_guard_with_its_reason(
        closed_by: str, cause: Cause) -> None:
    loss = attribute(placement("empty", node("holder", 300, 0, closed_by=closed_by),
                               node("empty", 0, 100)))
    assert (loss.cause, loss.lost) == (cause, 300 * MiB)
    assert loss.best is not None and loss.best.name == "holder"


def test_bytes_the_webhook_did_not_know_of_are_unseen() -> None:
    """The best node pulled the layers for a sibling a moment ago; the webhook's view (its
    node status) still showed nothing there."""
    loss = attribute(placement("b", node("a", 300, 0, believed=0), node("b", 100, 100)))
    assert (loss.cause, loss.lost) == (Cause.UNSEEN, 200 * MiB)


def test_known_bytes_weighed_no_higher_are_the_decisions() -> None:
    loss = attribute(placement("b", node("a", 300, 50), node("b", 100, 50,
                                                         PodTopologySpread=150)))
    assert (loss.cause, loss.lost) == (Cause.WEIGHED_LOWER, 200 * MiB)


@pytest.mark.parametrize(("plugin", "cause"), [
    ("PodTopologySpread", Cause.SPREAD_SCORE), ("NodeResourcesFit", Cause.RESOURCES),
    ("NodeResourcesBalancedAllocation", Cause.RESOURCES),
    ("ImageLocality", Cause.IMAGE_LOCALITY), ("TaintToleration", Cause.TAINTS)])
def test_a_preference_the_scheduler_overrode_names_the_plugin_that_outweighed_it(
        plugin: str, cause: Cause) -> None:
    best = node("a", 300, 100)
    chosen = node("b", 0, 0, scores={plugin: EVEN[plugin] + 250})
    assert chosen.total > best.total
    loss = attribute(placement("b", best, chosen))
    assert (loss.cause, loss.lost) == (cause, 300 * MiB)


def test_equal_totals_are_the_schedulers_tie_break() -> None:
    best = node("a", 300, 100)
    chosen = node("b", 0, 0, PodTopologySpread=EVEN["PodTopologySpread"] + 200)
    assert chosen.total == best.total
    assert attribute(placement("b", best, chosen)).cause is Cause.TIE_BREAK


def test_a_best_node_outside_the_sample_and_an_unpatched_pod() -> None:
    assert attribute(placement("b", node("a", 300, 100, sampled=False),
                               node("b", 0, 0))).cause is Cause.SAMPLE
    assert attribute(placement("b", node("a", 300), node("b", 0),
                               patched=False)).cause is Cause.UNPATCHED


def test_past_the_spreading_limit_is_over_skew_and_only_legal_nodes_are_the_best() -> None:
    """The best legal node holds 100 MiB; the chosen one holds 300 but is past maxSkew: its
    bytes are no loss (negative) and the cause says why."""
    loss = attribute(placement("full", node("full", 300, 100, excess=1000),
                               node("open", 100, 50)))
    assert (loss.cause, loss.lost) == (Cause.OVER_SKEW, -200 * MiB)
    # A holder past the limit is not the best the chosen node is judged against.
    loss = attribute(placement("open", node("full", 300, 100, excess=1000),
                               node("open", 100, 50)))
    assert (loss.cause, loss.lost) == (Cause.NONE, 0)


def test_the_table_sums_bytes_and_placements_by_cause_most_first() -> None:
    table = LossTable()
    table.add([
        attribute(placement("b", node("a", 300, 0, closed_by="counts"), node("b", 0, 100))),
        attribute(placement("b", node("a", 100, 0, closed_by="counts"), node("b", 0, 100))),
        attribute(placement("b", node("a", 200, 0, believed=0), node("b", 0, 100))),
        attribute(placement("a", node("a", 300, 100), node("b", 0, 0))),
    ])
    other = LossTable()
    other.add([attribute(placement("full", node("full", 300, 100, excess=1000),
                                   node("open", 0, 50)))])
    table.merge(other)
    assert table.placements == 5
    assert table.ranked() == [(Cause.GUARD_COUNTS, 400 * MiB, 2), (Cause.UNSEEN, 200 * MiB, 1),
                              (Cause.OVER_SKEW, -300 * MiB, 1)]
    assert table.lost == 600 * MiB  # over-skew's gain is no loss


TOP = [("a", 300 * MiB, 2), ("b", 300 * MiB, 2), ("c", 100 * MiB, 0)]


def test_a_bound_pod_on_a_top_weight_node_lost_nothing() -> None:
    assert explain_bind("b", 100, TOP, 100, 2, 6).cause is Cause.NONE


def test_a_bound_pod_on_an_emptier_node_lost_to_the_spreading_score() -> None:
    explanation = explain_bind("c", 30, TOP, 100, 0, 6)
    assert (explanation.cause, explanation.best) == (Cause.SPREAD_SCORE, "a")
    assert "a held 2" in explanation.detail and "c 0" in explanation.detail


def test_a_bound_pod_spreading_does_not_explain_is_put_down_to_the_other_scores() -> None:
    assert explain_bind("c", 30, TOP, 100, 3, 6).cause is Cause.RESOURCES
    assert explain_bind("c", 30, TOP, 100, None, 6).cause is Cause.RESOURCES


def test_a_bound_pod_on_an_unweighed_node_of_a_large_cluster_may_be_the_sample() -> None:
    assert explain_bind("z", 0, TOP, 100, 0, 5000).cause is Cause.SAMPLE
    assert explain_bind("z", 0, [], 100, 0, 5000).cause is Cause.UNPATCHED


def test_the_probe_records_a_cause_for_every_placement_the_run_makes() -> None:
    """Simulated: one node holds the image, four replicas arrive at once, maxSkew 3. Stock
    spreads them (its PodTopologySpread score) over nodes holding nothing while the holder
    was within the limit: each such placement lost the image, its cause no preference. The
    webhook sends three to the holder; the fourth, with the holder past the limit, goes
    elsewhere and loses nothing against the best legal node."""
    from webhook.serving.wiring import demo_catalog
    from webhook.sim.creation import CreationConfig
    from webhook.sim.engine import SimConfig, book_for, run
    from webhook.sim.view import ViewConfig
    from webhook.sim.workload import NodeSpec, PodSpec, Trace

    catalog = demo_catalog()
    ref = "docker.io/library/python:3.11"
    trace = Trace(nodes=(NodeSpec("holder", images=(ref,)), NodeSpec("empty"),
                         NodeSpec("other")),
                  pods=tuple(PodSpec(f"web-{k}", "web", 0.0, (ref,)) for k in range(4)))
    config = SimConfig(seed=1, explain=True, creation=CreationConfig(bursts=True),
                       view=ViewConfig(watch_delay=0.05, registry_delay=0.0, replicas=1))
    book = book_for(trace, catalog)
    image = book.get(ref, Platform.parse("linux/amd64"))
    assert image is not None
    size = image.size
    stock = run(trace, "stock", catalog, config, book)
    webhook = run(trace, "webhook", catalog, config, book)
    assert len(stock.losses) == len(webhook.losses) == 4
    lost = [loss for loss in stock.losses if loss.cause is not Cause.NONE]
    assert lost and all(loss.cause is Cause.UNPATCHED for loss in lost)
    # The first pulls on the empty node lose the whole image; later ones on a node already
    # pulling it lose nothing more.
    assert lost[0].lost == size
    assert [loss.cause for loss in webhook.losses] == [Cause.NONE] * 4
    assert list(webhook.placements.values()).count("holder") == 3
