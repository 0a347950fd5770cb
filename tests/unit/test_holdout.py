"""The holdout's split: which workload a pod belongs to, and which group that workload is in.
Deterministic across processes and replicas, stable across a rollout and a scale, close to
the fraction, and unrelated to the cohort the report's bootstrap resamples by."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from webhook.core.holdout import (
    COHORTS,
    NO_HOLDOUT,
    Group,
    HoldoutPolicy,
    cohort,
    workload_hash,
    workload_key,
)


def replica(deployment: str, template_hash: str, suffix: str,
            namespace: str = "shop") -> dict[str, Any]:
    """A pod as the ReplicaSet controller creates it (no name yet at CREATE)."""
    rs = f"{deployment}-{template_hash}"
    return {"metadata": {
        "generateName": f"{rs}-", "namespace": namespace,
        "labels": {"app": deployment, "pod-template-hash": template_hash},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs,
                             "uid": f"uid-{rs}-{suffix}", "controller": True}]}}


def test_a_deployments_pods_share_a_key_across_a_rollout_and_a_scale() -> None:
    before = {workload_key(replica("web", "5d9f7c6b8", str(i))) for i in range(3)}
    after = {workload_key(replica("web", "7b4c9d2f1", str(i))) for i in range(10)}
    assert before == after == {"shop/Deployment/web"}
    # Deployment names with dashes keep them; only the template hash goes.
    assert workload_key(replica("web-api-v2", "6f8d", "0")) == "shop/Deployment/web-api-v2"
    assert workload_key(replica("web", "5d9f7c6b8", "0", namespace="other")) != before.pop()


def test_other_owners_and_bare_pods() -> None:
    bare_rs = {"metadata": {"namespace": "ns", "labels": {"app": "x"}, "ownerReferences": [
        {"kind": "ReplicaSet", "name": "cache-abc12", "uid": "u", "controller": True}]}}
    assert workload_key(bare_rs) == "ns/ReplicaSet/cache-abc12"  # no template hash: its own
    stateful = {"metadata": {"name": "db-0", "namespace": "ns", "ownerReferences": [
        {"kind": "StatefulSet", "name": "db", "uid": "u", "controller": True}]}}
    assert workload_key(stateful) == "ns/StatefulSet/db"
    not_controller = {"metadata": {"name": "p", "namespace": "ns", "ownerReferences": [
        {"kind": "StatefulSet", "name": "db", "uid": "u"}]}}
    assert workload_key(not_controller) == "ns/Pod/p"
    # The controller counts wherever it is listed; only a ReplicaSet's suffix is dropped.
    second = {"metadata": {"name": "p", "namespace": "ns", "ownerReferences": [
        {"kind": "ConfigMap", "name": "c", "uid": "u1"},
        {"kind": "StatefulSet", "name": "db", "uid": "u2", "controller": True}]}}
    assert workload_key(second) == "ns/StatefulSet/db"
    other_kind = {"metadata": {"namespace": "ns", "labels": {"pod-template-hash": "7d4b9c"},
                               "ownerReferences": [{"kind": "CloneSet", "name": "web-7d4b9c",
                                                    "uid": "u", "controller": True}]}}
    assert workload_key(other_kind) == "ns/CloneSet/web-7d4b9c"
    assert workload_key({"metadata": {"generateName": "job-", "namespace": "ns"}}) == "ns/Pod/job-"
    assert workload_key({}) == "/Pod/"


def test_the_split_is_the_same_in_another_process() -> None:
    keys = [f"ns/Deployment/app-{i}" for i in range(300)]
    policy = HoldoutPolicy(0.3, "cluster-a")
    here = "".join("h" if policy.group(k) is Group.HOLDOUT else "s" for k in keys)
    program = ("from webhook.core.holdout import HoldoutPolicy, Group\n"
               "p = HoldoutPolicy(0.3, 'cluster-a')\n"
               "keys = [f'ns/Deployment/app-{i}' for i in range(300)]\n"
               "print(''.join('h' if p.group(k) is Group.HOLDOUT else 's' for k in keys))\n")
    for hash_seed in ("1", "2"):  # str hashing differs between these processes
        there = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                               check=True, env={"PYTHONHASHSEED": hash_seed}).stdout.strip()
        assert there == here
    assert "h" in here and "s" in here


@pytest.mark.parametrize("fraction", [0.05, 0.3, 0.5, 0.9])
def test_the_share_held_out_is_within_two_points_of_the_fraction(fraction: float) -> None:
    policy = HoldoutPolicy(fraction, "seed")
    keys = [f"team-{i % 37}/Deployment/service-{i}" for i in range(10_000)]
    held = sum(policy.group(k) is Group.HOLDOUT for k in keys)
    assert abs(held / len(keys) - fraction) <= 0.02


def test_the_seed_draws_new_groups_and_a_larger_fraction_only_adds() -> None:
    keys = [f"ns/Deployment/app-{i}" for i in range(2_000)]
    a = {k for k in keys if HoldoutPolicy(0.3, "a").group(k) is Group.HOLDOUT}
    b = {k for k in keys if HoldoutPolicy(0.3, "b").group(k) is Group.HOLDOUT}
    wider = {k for k in keys if HoldoutPolicy(0.5, "a").group(k) is Group.HOLDOUT}
    assert len(a & b) < 0.5 * len(a)  # about 0.3 of it when independent
    assert a < wider  # raising the fraction moves workloads into the holdout, never out


def test_off_and_exempt_mean_no_group() -> None:
    assert NO_HOLDOUT.group("ns/Deployment/web") is Group.NONE
    on = HoldoutPolicy(0.999, "s")
    assert on.group("ns/Deployment/web") is Group.HOLDOUT
    assert on.group("ns/Deployment/web", exempt=True) is Group.NONE
    for bad in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match=r"^holdout must be >= 0 and < 1$"):
            HoldoutPolicy(bad)
    assert not HoldoutPolicy(0.0).on  # 0 is valid: off


def test_cohorts_cover_the_range_and_do_not_follow_the_group() -> None:
    policy = HoldoutPolicy(0.3, "seed")
    keys = [f"ns/Deployment/app-{i}" for i in range(12_800)]
    held: dict[int, list[bool]] = {}
    for key in keys:
        found = cohort(workload_hash(key))
        assert found is not None
        held.setdefault(found, []).append(policy.group(key) is Group.HOLDOUT)
    assert sorted(held) == list(range(COHORTS))
    # Each cohort holds about 200 workloads, about 30 % of them held out.
    for flags in held.values():
        assert 120 <= len(flags) <= 280
        assert 0.15 <= sum(flags) / len(flags) <= 0.45
    assert cohort("not-a-hash") is None and cohort("zz" * 8) is None
    # Only 16 hex digits are a workload hash; their value modulo COHORTS is the cohort.
    assert cohort("3f") is None and cohort("0" * 17) is None
    assert cohort("000000000000003f") == 63 and cohort("0000000000000040") == 0
    assert cohort("ffffffffffffffff") == COHORTS - 1
