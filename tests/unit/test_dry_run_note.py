"""`kubectl apply --dry-run=server` explains itself: a dry run's pod the webhook leaves alone
carries the reason in an annotation; a real CREATE of the same pod carries nothing."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.helpers import apply_patch, inventory, node_object, pod, review, validate_pod
from tests.unit.replica_cluster import APP, CATALOG
from webhook.core.admission import parse_review
from webhook.core.dryrun import NOT_STEERED_ANNOTATION, dry_run_patch, not_steered_note
from webhook.core.reasons import EXPLANATIONS, Reason
from webhook.core.scoring import ScoringPolicy
from webhook.registry.catalog import StaticCatalog
from webhook.serving.mutate import Mutator, Outcome

UNKNOWN = "docker.io/library/nginx:1.27"


async def reviewed(obj: dict[str, Any] | None, dry_run: bool,
                   catalog: StaticCatalog = CATALOG) -> Outcome:
    inv, _ = inventory([node_object("n1", [APP]), node_object("n2")], catalog)
    mutator = Mutator([catalog], inv, ScoringPolicy(), budget_seconds=0.01)
    try:
        return await mutator.review(parse_review(orjson.dumps(review(obj, dry_run=dry_run))))
    finally:
        await mutator.close()


def note_of(obj: dict[str, Any], outcome: Outcome) -> str | None:
    patched = apply_patch(obj, list(outcome.patch))
    validate_pod(patched)
    annotations = patched["metadata"].get("annotations") or {}
    note = annotations.get(NOT_STEERED_ANNOTATION)
    return note if isinstance(note, str) else None


@pytest.mark.parametrize(("extra", "images", "reason"), [
    ({"labels": {"layer-locality.io/skip": "true"}}, [APP.ref], Reason.SKIP_LABEL),
    ({}, [UNKNOWN], Reason.UNRESOLVED),
    ({"annotations": {"team": "a"}}, [UNKNOWN], Reason.UNRESOLVED),
])
async def test_a_dry_run_left_alone_says_why_and_a_create_carries_nothing(
        extra: dict[str, Any], images: list[str], reason: Reason) -> None:
    obj = pod(images)
    obj["metadata"].update(extra)
    dry = await reviewed(obj, dry_run=True)
    assert dry.reason is reason and (dry.decision is None or not dry.decision.patched)
    note = note_of(obj, dry)
    assert note is not None and note.startswith(f"{reason.value}: {EXPLANATIONS[reason]}")
    if reason is Reason.UNRESOLVED:
        assert UNKNOWN in note and "reachable" in note
    kept = apply_patch(obj, list(dry.patch))["metadata"].get("annotations", {})
    assert {k: v for k, v in kept.items() if k != NOT_STEERED_ANNOTATION} == \
        obj["metadata"].get("annotations", {})
    real = await reviewed(obj, dry_run=False)
    assert real.reason is reason and real.patch == ()


async def test_a_steered_dry_run_carries_the_decision_and_no_note() -> None:
    obj = pod([APP.ref])
    outcome = await reviewed(obj, dry_run=True)
    assert outcome.decision is not None and outcome.decision.patched
    assert note_of(obj, outcome) is None and outcome.patch == outcome.decision.patch


def test_no_note_where_annotations_are_not_an_object_or_there_is_no_pod() -> None:
    obj = pod([UNKNOWN])
    obj["metadata"]["annotations"] = ["not", "an", "object"]
    assert dry_run_patch(obj, Reason.UNRESOLVED) == ()
    assert dry_run_patch(None, Reason.NO_OBJECT) == ()
    assert dry_run_patch(pod([UNKNOWN]), Reason.NOT_CREATE) == ()


def test_the_note_lists_a_few_images_and_counts_the_rest() -> None:
    images = [f"registry.example.com/app{i}:v1" for i in range(5)]
    note = not_steered_note(Reason.UNRESOLVED, images)
    assert all(image in note for image in images[:3]) and images[3] not in note
    assert "and 2 more" in note
    assert not_steered_note(Reason.NO_NODES) == f"no_nodes: {EXPLANATIONS[Reason.NO_NODES]}"
