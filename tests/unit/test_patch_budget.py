"""The patch byte budget (`max_patch_bytes`): what a patch adds to a pod stays within it for
any hostnames up to the label value limit (63 characters), the nodes left out are the least
valuable ones, and the annotation counts them."""

from __future__ import annotations

import copy
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import AMD64, apply_patch, image, inventory, node_object, pod, validate_pod
from webhook.cli.explain import as_json, as_table, node_rows
from webhook.core.admission import Review
from webhook.core.decide import Siblings, decide
from webhook.core.patchsize import TERM_BYTES, TOP_ENTRY_BYTES, added_bytes, patch_reserve
from webhook.core.pods import DECISION_ANNOTATION, PREFERRED
from webhook.core.scoring import MIN_PATCH_BYTES, MiB, ScoringPolicy
from webhook.registry.catalog import StaticCatalog
from webhook.serving.mutate import Mutator

APP = image("registry.example.com/team/app:v1",
            {AMD64: [("base", 50 * MiB), ("deps", 30 * MiB), ("code", 20 * MiB)]})
BASE = image("registry.example.com/team/base:v1", {AMD64: [("base", 50 * MiB)]})
DEPS = image("registry.example.com/team/deps:v1",
             {AMD64: [("base", 50 * MiB), ("deps", 30 * MiB)]})
CATALOG = StaticCatalog([APP, BASE, DEPS])
LABEL_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789-."


def stored(obj: dict[str, Any]) -> int:
    return len(orjson.dumps(obj))


def grown_by(obj: dict[str, Any], patch: list[Any]) -> int:
    """Bytes the patch adds to the pod as stored (compact JSON), measured by applying it."""
    return stored(apply_patch(obj, patch)) - stored(obj)


# Hostnames as label values allow: up to 63 characters, alphanumeric at both ends.
HOSTNAME = st.builds(lambda a, mid, b: a + mid + b, st.sampled_from("abcxyz0189"),
                     st.text(LABEL_CHARS, max_size=61), st.sampled_from("abcxyz0189"))
POD_SHAPES = st.sampled_from(["bare", "annotated", "null_annotations", "empty_annotations",
                              "affinity", "preferred", "empty_preferred"])


def shaped(shape: str) -> dict[str, Any]:
    obj = pod([APP.ref])
    if shape == "annotated":
        obj["metadata"]["annotations"] = {"team": "x" * 40}
    elif shape == "null_annotations":
        obj["metadata"]["annotations"] = None
    elif shape == "empty_annotations":
        obj["metadata"]["annotations"] = {}
    elif shape == "empty_preferred":
        obj["spec"]["affinity"] = {"nodeAffinity": {PREFERRED: []}}
    elif shape == "affinity":
        obj["spec"]["affinity"] = {"podAffinity": {}}
    elif shape == "preferred":
        obj["spec"]["affinity"] = {"nodeAffinity": {PREFERRED: [{"weight": 1, "preference": {
            "matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}]}}
    return obj


@settings(max_examples=60, deadline=None)
@given(names=st.lists(HOSTNAME, min_size=20, max_size=160, unique=True),
       holds=st.lists(st.sampled_from([APP, BASE, DEPS]), min_size=160, max_size=160),
       budget=st.sampled_from([1024, 2048, 4096, 6000]), shape=POD_SHAPES,
       with_siblings=st.booleans(), salt=st.text(max_size=8))
def test_a_patch_never_adds_more_than_the_budget(
    names: list[str], holds: list[Any], budget: int, shape: str, with_siblings: bool, salt: str
) -> None:
    objects = [node_object(name, [held]) for name, held in zip(names, holds, strict=False)]
    objects.append(node_object("z" * 63))  # holds nothing: a weight level below the others
    _, index = inventory(objects, CATALOG)
    obj = shaped(shape)
    siblings = Siblings("owner", {names[0]: 1}, 3) if with_siblings else None
    policy = ScoringPolicy(max_patch_bytes=budget)
    decision = decide(obj, [APP], index, policy, salt=salt, siblings=siblings,
                      token="0123456789abcdef")
    # Always patched: the node holding nothing gets a lower weight than the holders, and at
    # least MIN_PATCH_BYTES (1024) hold one hostname of up to 63 characters with the rest.
    assert decision.patched, decision.reason
    patch = list(decision.patch)
    assert added_bytes(obj, patch) == grown_by(obj, patch) <= budget
    patched = apply_patch(obj, patch)
    validate_pod(patched)
    # The nodes left out are the least valuable: what is named is the start of what an
    # unbounded budget names, best first, and the annotation counts the rest.
    full = decide(obj, [APP], index, ScoringPolicy(max_patch_bytes=10**7), salt=salt,
                  siblings=siblings, token="0123456789abcdef")
    assert decision.named == full.named[:len(decision.named)]
    assert decision.cut == len(full.named) - len(decision.named)
    doc = orjson.loads(patched["metadata"]["annotations"][DECISION_ANNOTATION])
    assert doc.get("cut", 0) == decision.cut
    assert doc["preferredNodes"] == len(decision.named)


@settings(max_examples=40, deadline=None)
@given(count=st.integers(70, 120), budget=st.sampled_from([2048, 4096]),
       token_bytes=st.integers(100, 600), salt=st.text(max_size=8))
def test_a_patch_the_estimate_undercounts_is_cut_back_to_the_budget(
    count: int, budget: int, token_bytes: int, salt: str
) -> None:
    """The estimates reserve 16 characters for the decision's token; a longer one makes the
    first patch too large, and hostnames are dropped from the least valuable end until the
    exact size fits: the bound holds whatever the inputs, and the annotation counts the cut.
    (70 holders with 63-character hostnames: more than 4 KiB of names, so some are cut.)"""
    names = [f"{k:03d}-" + "n" * 59 for k in range(count)]
    objects = [node_object(name, [APP]) for name in names] + [node_object("z" * 63)]
    _, index = inventory(objects, CATALOG)
    obj = pod([APP.ref])
    token = "t" * token_bytes
    decision = decide(obj, [APP], index, ScoringPolicy(max_patch_bytes=budget), salt=salt,
                      token=token)
    full = decide(obj, [APP], index, ScoringPolicy(max_patch_bytes=10**7), salt=salt,
                  token=token)
    assert decision.patched, decision.reason
    patch = list(decision.patch)
    assert added_bytes(obj, patch) == grown_by(obj, patch) <= budget
    patched = apply_patch(obj, patch)
    validate_pod(patched)
    assert decision.named == full.named[:len(decision.named)]
    assert decision.cut == len(full.named) - len(decision.named) > 0
    assert sum(count for count, _, _ in decision.runs) == len(decision.named)
    doc = orjson.loads(patched["metadata"]["annotations"][DECISION_ANNOTATION])
    assert doc["cut"] == decision.cut and doc["preferredNodes"] == len(decision.named)
    named = {name for term in preferred_hostnames(patched) for name in term}
    assert named == {node.hostname for node in decision.named}


def preferred_hostnames(patched: dict[str, Any]) -> list[list[str]]:
    terms = patched["spec"]["affinity"]["nodeAffinity"][PREFERRED]
    return [expr["values"] for term in terms for expr in term["preference"]["matchExpressions"]
            if expr["operator"] == "In"]


def test_defaults_hold_100_long_hostnames_to_4_kib() -> None:
    """100 holders with 63-character hostnames (6.6 KB of names alone): the default budget
    names fewer, the best first, and says how many it left out."""
    names = [f"{k:03d}-" + "n" * 59 for k in range(100)]
    objects = [node_object(name, [APP if k < 40 else DEPS]) for k, name in enumerate(names)]
    _, index = inventory([*objects, node_object("empty")], CATALOG)
    obj = pod([APP.ref])
    decision = decide(obj, [APP], index, ScoringPolicy(), salt="s")
    patch = list(decision.patch)
    assert grown_by(obj, patch) <= 4096
    named = {node.name for node in decision.named}
    assert set(names[:40]) <= named  # the full holders outrank the partial ones
    assert decision.cut == 100 - len(named) > 0


def test_a_budget_too_small_for_one_hostname_leaves_the_pod_alone() -> None:
    """Node names (DNS subdomains) can be 253 characters, and the annotation names the top
    nodes: with the smallest budget nothing fits here, and the pod is left unpatched; with
    the reserve and what one node costs at most (its term, hostname and `top` entry), one
    is named."""
    long = "n" * 249
    objects = [node_object(f"{long}-{k}", [APP], hostname=f"h{k}-" + "n" * 59)
               for k in range(3)]
    _, index = inventory([*objects, node_object("empty")], CATALOG)
    obj = pod([APP.ref])
    one = (patch_reserve(True) + TERM_BYTES + len("h0-" + "n" * 59) + 3
           + len(f"{long}-0") + TOP_ENTRY_BYTES)
    assert MIN_PATCH_BYTES < one < 2000
    outcomes = {}
    for budget in (MIN_PATCH_BYTES, one, 2000):
        decision = decide(obj, [APP], index, ScoringPolicy(max_patch_bytes=budget), salt="s",
                          token="t" * 16, siblings=Siblings("o", {}, 3))
        outcomes[budget] = (decision.reason, len(decision.named), decision.cut)
        assert grown_by(obj, list(decision.patch)) <= budget
        if budget == MIN_PATCH_BYTES:  # unpatched, the decision still says what it found (explain)
            assert decision.pod_bytes == 100 * MiB and decision.candidates.bit_count() == 4
            assert [g.bytes_present for g in decision.groups] == [100 * MiB, 0]
            assert decision.spread is not None and decision.left_out == 0
    assert outcomes[MIN_PATCH_BYTES] == ("patch_budget", 0, 3)
    assert outcomes[one][1] >= 1 and outcomes[2000] == ("", 3, 0)


@given(shape=POD_SHAPES, values=st.lists(st.text(max_size=30), max_size=5))
def test_added_bytes_is_exact(shape: str, values: list[str]) -> None:
    """Any strings (escapes, non-ASCII) in the added values: the count matches the stored
    pod's growth."""
    obj = shaped(shape)
    spec = copy.deepcopy(obj)["spec"]
    affinity = spec.get("affinity") or {}
    ops: list[Any] = []
    if "nodeAffinity" in affinity:
        ops += [{"op": "add", "path": f"/spec/affinity/nodeAffinity/{PREFERRED}/-",
                 "value": {"v": v}} for v in values]
    elif affinity:
        ops.append({"op": "add", "path": "/spec/affinity/nodeAffinity", "value": values})
    else:
        ops.append({"op": "add", "path": "/spec/affinity", "value": {"x": values}})
    ops.append({"op": "add", "path": "/metadata/annotations/a~1b", "value": "".join(values)}
               if isinstance(obj["metadata"].get("annotations"), dict) else
               {"op": "add", "path": "/metadata/annotations", "value": {"a/b": values}})
    assert added_bytes(obj, ops) == grown_by(obj, ops)


async def test_explain_says_how_many_nodes_the_byte_budget_left_out() -> None:
    names = [f"{k:03d}-" + "n" * 59 for k in range(100)]
    inv, index = inventory([node_object(name, [APP]) for name in names]
                           + [node_object("empty")], CATALOG)
    policy = ScoringPolicy()
    mutator = Mutator([CATALOG], inv, policy)
    obj = pod([APP.ref])
    outcome = await mutator.review(Review.for_pod(obj, uid="explain", dry_run=True))
    assert outcome.decision is not None and outcome.decision.cut > 0
    rows = node_rows(outcome.decision, index, [APP])
    doc = orjson.loads(as_json(outcome, rows, policy))
    assert doc["calibration"]["maxPatchBytes"] == 4096
    assert doc["calibration"]["leftOutForPatchBytes"] == outcome.decision.cut
    assert f"patch bytes: {outcome.decision.cut} more node(s)" in as_table(outcome, rows, policy)


def test_an_unpatched_decision_counts_the_nodes_the_guard_left_out() -> None:
    """Nothing fits in the smallest budget, and the guard excluded a holder: the decision
    (what `explain` shows) still counts it."""
    long = "n" * 249
    objects = [node_object(f"{long}-{k}", [APP], hostname=f"h{k}-" + "n" * 59)
               for k in range(3)]
    _, index = inventory([*objects, node_object("empty")], CATALOG)
    decision = decide(pod([APP.ref]), [APP], index, ScoringPolicy(max_patch_bytes=1024),
                      salt="s", token="t" * 16, siblings=Siblings("o", {f"{long}-0": 5}, 3))
    assert decision.reason == "patch_budget" and decision.left_out == 1


def test_a_patch_that_fits_exactly_is_kept_and_one_byte_more_is_cut() -> None:
    """Each character more of the token adds one byte to the first patch: lengthen it until
    a hostname has to go. The last patch kept fills the budget to the byte, and no patch on
    the way passes it (the exact check, not the estimate, decides)."""
    names = [f"{k:03d}-" + "n" * 59 for k in range(70)]
    _, index = inventory([node_object(name, [APP]) for name in names]
                         + [node_object("z" * 63)], CATALOG)
    obj = pod([APP.ref])
    budget = 2048
    kept: tuple[int, int] | None = None  # (hostnames named, patch bytes) at the last length
    for length in range(16, 2048):
        decision = decide(obj, [APP], index, ScoringPolicy(max_patch_bytes=budget),
                          salt="s", token="t" * length)
        size = grown_by(obj, list(decision.patch))
        assert size <= budget
        if kept is not None and len(decision.named) < kept[0]:
            assert kept[1] == budget
            return
        kept = (len(decision.named), size)
    raise AssertionError("no hostname was ever cut")
