"""Reviews with the holdout on: a held-out pod gets the decision annotation alone (what it
would have preferred, its group and workload) and holds no place for the spread guard; a
steered pod is patched as before, its annotation naming its group; an exempt namespace's
pods and pods outside the experiment carry no group; a pod of the experiment the webhook
would not steer gets the annotation with its group and why, and no terms."""

from __future__ import annotations

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
from webhook.core.annotation import DECISION_VERSION
from webhook.core.holdout import Group, HoldoutPolicy, workload_hash, workload_key
from webhook.core.pods import DECISION_ANNOTATION
from webhook.core.reasons import Reason, Result
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.inventory.siblings import SiblingTracker
from webhook.registry.catalog import StaticCatalog
from webhook.serving.mutate import Mutator, Outcome

APP = image("registry.example.com/shop/app:1", {AMD64: [("base", 200 * MiB), ("app", 90 * MiB)]})
TINY = image("registry.example.com/shop/tiny:1", {AMD64: [("t", 1 * MiB)]})
CATALOG = StaticCatalog([APP, TINY])


def mutator(policy: HoldoutPolicy, tracker: SiblingTracker | None = None) -> Mutator:
    inv, _ = inventory([node_object("warm", [APP]), node_object("cold-1"),
                        node_object("cold-2")], CATALOG)
    return Mutator([CATALOG], inv, ScoringPolicy(), siblings=tracker, holdout=policy)


def replica(deployment: str, images: list[str] | None = None) -> dict[str, Any]:
    obj = pod(images or [APP.ref])
    obj["metadata"] = {"generateName": f"{deployment}-7d4b9c-", "namespace": "shop",
                       "labels": {"pod-template-hash": "7d4b9c"},
                       "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                            "name": f"{deployment}-7d4b9c",
                                            "uid": f"rs-{deployment}", "controller": True}]}
    return obj


def deployments(policy: HoldoutPolicy, group: Group) -> str:
    """A Deployment name the policy puts in `group`."""
    return next(name for name in (f"svc-{i}" for i in range(1000))
                if policy.group(f"shop/Deployment/{name}") is group)


async def run(m: Mutator, obj: dict[str, Any], exempt: bool = False, **kw: Any) -> Outcome:
    return await m.review(parse_review(orjson.dumps(review(obj, **kw))), exempt)


def decision(obj: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = orjson.loads(obj["metadata"]["annotations"][DECISION_ANNOTATION])
    return loaded


POLICY = HoldoutPolicy(0.5, "test")


async def test_a_held_out_pod_gets_the_annotation_alone_and_holds_no_place() -> None:
    tracker = SiblingTracker(clock=lambda: 0.0)
    name = deployments(POLICY, Group.HOLDOUT)
    outcome = await run(mutator(POLICY, tracker), replica(name))
    assert (outcome.result, outcome.reason, outcome.group) == (
        Result.SKIPPED, Reason.HOLDOUT, Group.HOLDOUT)
    patched = apply_patch(replica(name), list(outcome.patch))
    validate_pod(patched)
    assert "affinity" not in patched["spec"]
    doc = decision(patched)
    assert doc["v"] == DECISION_VERSION and doc["group"] == "holdout"
    assert doc["workload"] == workload_hash(workload_key(replica(name)))
    assert doc["podBytes"] == 290 * MiB and doc["top"][0]["node"] == "warm"  # would prefer
    assert "terms" not in doc  # it carries none of the webhook's terms
    assert dict(tracker.counts("rs-" + name)) == {}


async def test_a_steered_pod_is_patched_and_names_its_group() -> None:
    tracker = SiblingTracker(clock=lambda: 0.0)
    name = deployments(POLICY, Group.STEERED)
    outcome = await run(mutator(POLICY, tracker), replica(name))
    assert (outcome.result, outcome.group) == (Result.PATCHED, Group.STEERED)
    patched = apply_patch(replica(name), list(outcome.patch))
    validate_pod(patched)
    doc = decision(patched)
    assert doc["group"] == "steered" and doc["terms"] >= 1
    assert doc["workload"] == workload_hash(f"shop/Deployment/{name}")
    assert dict(tracker.counts("rs-" + name)) == {"warm": 1}


async def test_exempt_namespaces_and_the_holdout_off_carry_no_group() -> None:
    name = deployments(POLICY, Group.HOLDOUT)
    exempt = await run(mutator(POLICY), replica(name), exempt=True)
    off = await run(mutator(HoldoutPolicy()), replica(name))
    for outcome in (exempt, off):
        assert (outcome.result, outcome.group) == (Result.PATCHED, Group.NONE)
        doc = decision(apply_patch(replica(name), list(outcome.patch)))
        assert "group" not in doc and "workload" not in doc


async def test_a_pod_not_worth_steering_still_says_its_group() -> None:
    """Which pods the webhook would steer depends on where earlier pods went (which steering
    changes): every reviewed pod of the experiment carries its group, steered or not."""
    for group in (Group.HOLDOUT, Group.STEERED):
        name = deployments(POLICY, group)
        outcome = await run(mutator(POLICY), replica(name, [TINY.ref]))
        assert (outcome.result, outcome.reason, outcome.group) == (
            Result.SKIPPED, Reason.BELOW_THRESHOLD, group)
        patched = apply_patch(replica(name, [TINY.ref]), list(outcome.patch))
        validate_pod(patched)
        assert "affinity" not in patched["spec"]
        doc = decision(patched)
        assert (doc["group"], doc["skipped"], doc["podBytes"]) == (
            group.value, "below_threshold", 1 * MiB)
        assert doc["workload"] == workload_hash(f"shop/Deployment/{name}")
    # Outside the experiment such a pod is left untouched, as before.
    off = await run(mutator(HoldoutPolicy()), replica("svc-0", [TINY.ref]))
    assert (off.reason, off.patch) == (Reason.BELOW_THRESHOLD, ())


async def test_every_replica_of_the_webhook_agrees() -> None:
    names = [f"svc-{i}" for i in range(40)]
    first = [(await run(mutator(POLICY), replica(n))).group for n in names]
    second = [(await run(mutator(HoldoutPolicy(0.5, "test")), replica(n))).group for n in names]
    assert first == second and {Group.HOLDOUT, Group.STEERED} <= set(first)


async def test_a_dry_run_shows_the_group_too() -> None:
    name = deployments(POLICY, Group.HOLDOUT)
    dry = await run(mutator(POLICY), replica(name), dry_run=True)
    assert dry.reason is Reason.HOLDOUT and decision(
        apply_patch(replica(name), list(dry.patch)))["group"] == "holdout"
