"""The fault harness's reading of answers (tests/kit/fault_answers.py) and of when a replica
converged (pure parts)."""

from __future__ import annotations

import base64
import json

from tests.kit.fault_answers import STEADY_SECONDS, canonical, outcome, patched


def body(patch: list[dict[str, object]] | None) -> bytes:
    response: dict[str, object] = {"uid": "u", "allowed": True}
    if patch is not None:
        response.update(patchType="JSONPatch",
                        patch=base64.b64encode(json.dumps(patch).encode()).decode())
    return json.dumps({"response": response}).encode()


def annotated(doc: dict[str, object]) -> list[dict[str, object]]:
    return [{"op": "add", "path": "/metadata/annotations", "value": {
        "layer-locality.io/decision": json.dumps(doc)}}]


def test_answers_compare_on_what_they_decide_not_on_per_review_fields() -> None:
    one = canonical(body(annotated({"id": "a", "by": "r1", "top": [{"node": "n"}]})))
    two = canonical(body(annotated({"id": "b", "by": "r2", "top": [{"node": "n"}]})))
    other = canonical(body(annotated({"id": "a", "top": [{"node": "m"}]})))
    assert one == two != other and patched(one)
    assert not patched(canonical(body(None))) and not patched(None)


def test_converged_is_the_start_of_the_last_run_on_the_truth_long_enough() -> None:
    """Before the fault: ignored. A patch unlike the truth, an unpatched answer and no answer
    are counted up to convergence; a brief match that does not last is not convergence."""
    truth, wrong, unpatched = ("T",), ("W",), ("allowed=True unpatched",)
    rounds = [(0.0, wrong), (1.0, truth), (2.0, (None,)), (3.0, unpatched), (4.0, truth),
              (5.0, wrong), (6.0, truth), (6.0 + STEADY_SECONDS, truth)]
    got = outcome(rounds, truth, start=1.0, end=2.5)
    assert got.converged_after == 6.0 - 2.5
    assert (got.unlike_truth, got.unpatched, got.unanswered) == (1, 1, 1)
    # Never long enough on the truth: not converged, everything after the start counted.
    short = outcome(rounds[:-1], truth, start=1.0, end=2.5)
    assert short.converged_after is None and short.unlike_truth == 1
    # Converged before the fault ended: 0 s after it.
    assert outcome([(1.0, truth), (1.0 + STEADY_SECONDS, truth)], truth, 0.5, 2.0
                   ).converged_after == 0.0
