"""The cluster the spread-guard tests of decide run on (test_decide_*.py, and the tests of the
burst guard, co-location, replica blindness and dry runs): one app image, four nodes holding it
and four empty, a ReplicaSet's pods and their reviews through the Mutator with a sibling
tracker, and the decision annotation a patch writes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

from tests.helpers import (
    AMD64,
    apply_patch,
    image,
    inventory,
    node_object,
    pod,
    review,
    validate_pod,
)
from webhook.core.admission import parse_review
from webhook.core.pods import DECISION_ANNOTATION
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.inventory.siblings import SiblingTracker
from webhook.registry.catalog import StaticCatalog
from webhook.serving.mutate import Mutator, Outcome

APP = image("registry.example.com/team/app:v1", {AMD64: [("base", 80 * MiB), ("code", 20 * MiB)]})
CATALOG = StaticCatalog([APP])
HOLDERS = [f"holder-{i}" for i in range(4)]
EMPTY = [f"empty-{i}" for i in range(4)]
OWNER = "3b0e3c58-5f7e-4c2e-9a57-rs0000000001"


def replica(index: int, **extra: Any) -> dict[str, Any]:
    """A ReplicaSet's pod as it reaches admission: generateName, no name, no uid."""
    obj = pod([APP.ref], **extra)
    metadata = obj["metadata"]
    del metadata["name"]
    metadata.update(generateName="web-7d4b9c-", ownerReferences=[
        {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-7d4b9c", "uid": OWNER,
         "controller": True, "blockOwnerDeletion": True}])
    return obj


DEFAULTS = ScoringPolicy()


def cluster(policy: ScoringPolicy = DEFAULTS, tracker: SiblingTracker | None = None,
            holders: Sequence[str] = HOLDERS) -> tuple[Mutator, SiblingTracker]:
    inv, _ = inventory([node_object(n, [APP]) for n in holders]
                       + [node_object(n) for n in EMPTY], CATALOG)
    tracker = tracker or SiblingTracker()
    return Mutator([CATALOG], inv, policy, siblings=tracker), tracker


async def run(mutator: Mutator, obj: dict[str, Any], n: int, dry_run: bool = False) -> Outcome:
    uid = f"0f8c5a2e-1111-4b3c-9d7e-{n:012d}"
    return await mutator.review(parse_review(orjson.dumps(review(obj, uid=uid,
                                                                 dry_run=dry_run))))


def decision_of(obj: dict[str, Any], outcome: Outcome) -> dict[str, Any]:
    return annotation(obj, outcome.patch)


def annotation(obj: dict[str, Any], patch: Any) -> dict[str, Any]:
    """The decision annotation of `obj` once `patch` is applied (the pod validated)."""
    patched = apply_patch(obj, list(patch))
    validate_pod(patched)
    result: dict[str, Any] = orjson.loads(patched["metadata"]["annotations"][DECISION_ANNOTATION])
    return result
