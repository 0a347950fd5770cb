"""The decision annotation's fields, decoded: which are always there, which only when they say
something, and what the holdout's unsteered pods carry."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from webhook.core.annotation import (
    DECISION_VERSION,
    TOP_NODES_IN_DECISION,
    decision_annotation,
    top_entry,
    unsteered_annotation,
)
from webhook.core.spread import SpreadState


@dataclass(frozen=True)
class Named:
    name: str


@dataclass(frozen=True)
class Score:
    node: Named
    bytes_present: int
    siblings: int
    weight: int


def scores(count: int) -> list[Score]:
    return [Score(Named(f"node-{i}"), 100 - i, i, 50 - 2 * i) for i in range(count)]


def test_the_optional_fields_are_left_out_unless_given() -> None:
    """Called with only what every decision has: no id, no group, no spread, and none of
    terms, standIns, cut, by; meanBytes 0 and as many preferred nodes as named."""
    doc = orjson.loads(decision_annotation(300, scores(2), None, 0, ""))
    assert doc == {
        "v": DECISION_VERSION, "podBytes": 300, "meanBytes": 0, "preferredNodes": 2,
        "top": [{"node": "node-0", "bytes": 100}, {"node": "node-1", "bytes": 99}],
    }


def test_every_field_given_is_carried() -> None:
    spread = SpreadState(2, 0, {}, frozenset(), {})
    doc = orjson.loads(decision_annotation(
        300, scores(5), spread, 4, "tok", stand_ins=1, mean_bytes=120, terms=3, cut=6,
        preferred_nodes=11, group="steered", workload="w-1", by="replica-a"))
    assert doc == {
        "v": DECISION_VERSION, "id": "tok", "by": "replica-a", "group": "steered",
        "workload": "w-1", "podBytes": 300, "meanBytes": 120, "preferredNodes": 11,
        "top": [{"node": f"node-{i}", "bytes": 100 - i, "siblings": i, "weight": 50 - 2 * i}
                for i in range(TOP_NODES_IN_DECISION)],
        "terms": 3, "spread": {"maxSkew": 2, "leftOut": 4}, "standIns": 1, "cut": 6,
    }


def test_a_group_without_a_workload_names_none() -> None:
    doc = orjson.loads(decision_annotation(300, [], None, 0, "tok", group="steered"))
    assert (doc["group"], doc["workload"], doc["preferredNodes"], doc["top"]) == (
        "steered", "", 0, [])


def test_a_top_entry_has_siblings_and_weight_only_when_counted() -> None:
    assert top_entry("n", 5, None) == {"node": "n", "bytes": 5}
    assert top_entry("n", 5, 0) == {"node": "n", "bytes": 5, "siblings": 0}
    assert top_entry("n", 5, 0, 0) == {"node": "n", "bytes": 5, "siblings": 0, "weight": 0}
    assert top_entry("n", 5, 1, 40) == {"node": "n", "bytes": 5, "siblings": 1, "weight": 40}


def test_an_unsteered_pod_carries_its_group_and_why() -> None:
    assert orjson.loads(unsteered_annotation("tok", "holdout", "w-1", 300, "holdout")) == {
        "v": DECISION_VERSION, "id": "tok", "group": "holdout", "workload": "w-1",
        "podBytes": 300, "skipped": "holdout"}
    assert "id" not in orjson.loads(unsteered_annotation("", "steered", "w", 0, "no_nodes"))
