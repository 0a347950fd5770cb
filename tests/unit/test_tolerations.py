from __future__ import annotations

import pytest

from webhook.core.nodes import Taint
from webhook.core.tolerations import tolerates, tolerates_all

TAINT = Taint("dedicated", "gpu", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "expected"),
    [
        ({"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}, True),
        ({"key": "dedicated", "value": "gpu"}, True),  # operator defaults to Equal
        ({"key": "dedicated", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),
        ({"key": "dedicated", "operator": "Equal", "value": "cpu"}, False),
        ({"key": "dedicated", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
        ({"key": "dedicated", "operator": "Bogus"}, False),
    ],
)
def test_tolerates(toleration: dict[str, str], expected: bool) -> None:
    assert tolerates(toleration, TAINT) is expected


def test_a_taint_without_value_is_tolerated_by_equal_without_value() -> None:
    bare = Taint("dedicated", "", "NoSchedule")
    assert tolerates({"key": "dedicated", "operator": "Equal"}, bare)
    assert tolerates({"key": "dedicated", "value": ""}, bare)
    assert not tolerates({"key": "dedicated", "value": "gpu"}, bare)
    assert not tolerates({"key": "dedicated"}, TAINT)  # no value: only the empty one


def test_every_taint_needs_a_toleration() -> None:
    other = Taint("spot", "true", "NoExecute")
    gpu = {"key": "dedicated", "value": "gpu"}
    assert tolerates_all([], [])
    assert tolerates_all([gpu], [])
    assert tolerates_all([gpu], [TAINT])
    assert not tolerates_all([gpu], [TAINT, other])
    assert tolerates_all([gpu, {"key": "spot", "operator": "Exists"}], [TAINT, other])
    assert tolerates_all(iter([gpu, {"operator": "Exists"}]), [other, TAINT])  # any iterable
    assert not tolerates_all([], [TAINT])
