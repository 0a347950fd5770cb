from __future__ import annotations

import pytest

from webhook.core.nodes import Taint
from webhook.core.tolerations import tolerates

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
