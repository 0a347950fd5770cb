"""Test helpers: building reviews, nodes and catalogs; decoding and checking patches."""

from __future__ import annotations

import base64
import copy
import importlib
import importlib.util
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

import jsonpatch
import kubernetes_validate
import orjson
from kubernetes_validate.utils import latest_version

from webhook.core.images import ImageRef
from webhook.core.index import LayerIndex
from webhook.core.layers import ImageLayers, Layer, Platform, PlatformLayers
from webhook.core.nodes import NodeInfo, node_from_object
from webhook.core.scoring import ScoringPolicy
from webhook.inventory.memory import StaticInventory
from webhook.inventory.static import build_index
from webhook.registry.catalog import StaticCatalog

AMD64 = Platform.of("linux", "amd64")
ARM64 = Platform.of("linux", "arm64")
K8S_VERSION = latest_version()


class Clock:
    """A clock the test moves by hand (`now`), for code that takes a `clock` callable."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def digest(label: str) -> str:
    """A deterministic, valid sha256 digest for a readable label."""
    import hashlib

    return "sha256:" + hashlib.sha256(label.encode()).hexdigest()


def image(ref: str, layers: Mapping[Platform, Sequence[tuple[str, int]]]) -> ImageLayers:
    """An image whose platforms hold the named layers (label, size)."""
    return ImageLayers(
        ref=ref,
        digest=digest(f"index {ref}"),
        platforms={
            platform: PlatformLayers(
                digest=digest(f"manifest {ref} {platform}"),
                layers=tuple(Layer(digest(label), size) for label, size in items),
            )
            for platform, items in layers.items()
        },
    )


def node_object(
    name: str,
    images: Iterable[ImageLayers] = (),
    platform: Platform = AMD64,
    hostname: str | None = None,
    unschedulable: bool = False,
    taints: Sequence[Mapping[str, str]] = (),
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A Node as the API server returns it; images reported as containerd does; `labels`
    besides the hostname label."""
    status_images = [
        {"names": [f"{i.ref.rsplit(':', 1)[0]}@{i.digest}", i.ref], "sizeBytes": 1} for i in images
    ]
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if taints:
        spec["taints"] = [dict(t) for t in taints]
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name,
                     "labels": {"kubernetes.io/hostname": hostname or name, **(labels or {})}},
        "spec": spec,
        "status": {
            "nodeInfo": {"operatingSystem": platform.os, "architecture": platform.architecture},
            "images": status_images,
        },
    }


def inventory(
    nodes: Iterable[Mapping[str, Any]], catalog: StaticCatalog
) -> tuple[StaticInventory, LayerIndex]:
    index, _ = build_index([node_from_object(n) for n in nodes], catalog)
    return StaticInventory(index), index


def nodes_of(objects: Iterable[Mapping[str, Any]]) -> list[NodeInfo]:
    return [node_from_object(o) for o in objects]


def pod(
    images: Sequence[str],
    name: str = "web",
    namespace: str = "default",
    init_images: Sequence[str] = (),
    **extra: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": f"c{i}", "image": im} for i, im in enumerate(images)],
    }
    if init_images:
        spec["initContainers"] = [
            {"name": f"i{i}", "image": im} for i, im in enumerate(init_images)
        ]
    spec.update(extra.pop("spec", {}))
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    metadata.update(extra.pop("metadata", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def review(
    obj: Mapping[str, Any] | None,
    uid: str = "0f8c5a2e-1111-4b3c-9d7e-000000000001",
    operation: str = "CREATE",
    dry_run: bool = False,
    kind: str = "Pod",
) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
            "requestKind": {"group": "", "version": "v1", "kind": kind},
            "requestResource": {"group": "", "version": "v1", "resource": kind.lower() + "s"},
            "namespace": (obj or {}).get("metadata", {}).get("namespace", "default"),
            "operation": operation,
            "userInfo": {"username": "tester"},
            "object": obj,
            "oldObject": None,
            "dryRun": dry_run,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def decode_patch(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The JSON Patch of an AdmissionReview response, decoded; [] when there is none."""
    body = response["response"]
    if "patch" not in body:
        assert "patchType" not in body
        return []
    assert body["patchType"] == "JSONPatch"
    ops: list[dict[str, Any]] = orjson.loads(base64.b64decode(body["patch"]))
    return ops


def apply_patch(obj: Mapping[str, Any], ops: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    patched: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(dict(obj)), list(ops))
    return patched


def validate_pod(obj: Mapping[str, Any]) -> None:
    """Schema validation (kubernetes-validate) plus the API server's affinity rules
    (pkg/apis/core/validation: ValidatePreferredSchedulingTerms, validateNodeSelectorTerm)."""
    kubernetes_validate.validate(dict(obj), K8S_VERSION, strict=True)
    node_affinity = (obj.get("spec", {}).get("affinity") or {}).get("nodeAffinity") or {}
    for term in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        assert 1 <= term["weight"] <= 100, term
        assert_selector_term(term["preference"])
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    for selector in required.get("nodeSelectorTerms") or []:
        assert_selector_term(selector)


def assert_selector_term(term: Mapping[str, Any]) -> None:
    for req in term.get("matchExpressions") or []:
        values = req.get("values") or []
        if req["operator"] in ("In", "NotIn"):
            assert values, f"{req['operator']} needs values: {req}"
        elif req["operator"] in ("Exists", "DoesNotExist"):
            assert not values, f"{req['operator']} takes no values: {req}"
        elif req["operator"] in ("Gt", "Lt"):
            assert len(values) == 1 and values[0].lstrip("-").isdigit(), req
        else:
            raise AssertionError(f"unknown operator {req}")
    for field in term.get("matchFields") or []:
        assert field["key"] == "metadata.name", field
        assert field["operator"] in ("In", "NotIn") and len(field.get("values") or []) == 1, field


def preferred_terms(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    affinity = obj.get("spec", {}).get("affinity") or {}
    terms: list[dict[str, Any]] = (affinity.get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution"
    ) or []
    return terms


def weight_by_hostname(obj: Mapping[str, Any], hostnames: Iterable[str]) -> dict[str, int]:
    """Raw NodeAffinity sum per hostname, evaluating the terms as the scheduler does."""
    totals = {}
    for host in hostnames:
        total = 0
        for term in preferred_terms(obj):
            if all(_matches(req, host) for req in term["preference"].get("matchExpressions", [])):
                total += term["weight"]
        totals[host] = total
    return totals


def weight_by_labels(obj: Mapping[str, Any],
                     nodes: Mapping[str, Mapping[str, str]]) -> dict[str, int]:
    """Raw NodeAffinity sum per node (its name -> all its labels, the hostname label
    included), evaluating every term's expressions as the scheduler's nodeaffinity does."""
    return {name: sum(term["weight"] for term in preferred_terms(obj)
                      if all(_label_matches(req, labels)
                             for req in term["preference"].get("matchExpressions", [])))
            for name, labels in nodes.items()}


def _label_matches(req: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    operator, key = req["operator"], req["key"]
    if operator == "Exists":
        return key in labels
    if operator == "DoesNotExist":
        return key not in labels
    if operator == "In":
        return key in labels and labels[key] in req["values"]
    if operator == "NotIn":
        return key not in labels or labels[key] not in req["values"]
    raise AssertionError(f"operator the webhook does not write: {req}")


def _matches(req: Mapping[str, Any], hostname: str) -> bool:
    if req["key"] != "kubernetes.io/hostname":
        return False
    if req["operator"] == "Exists":
        return True
    if req["operator"] == "In":
        return hostname in req["values"]
    if req["operator"] == "NotIn":
        return hostname not in req["values"]
    return False


def normalised_scores(raw: Mapping[str, int]) -> dict[str, float]:
    """NodeAffinity's NormalizeScore: 100 * raw / max(raw) (helper.DefaultNormalizeScore)."""
    top = max(raw.values(), default=0)
    return {k: (100 * v / top if top else 0.0) for k, v in raw.items()}


def lack_weight_of(bytes_present: int, best: int, policy: ScoringPolicy) -> int:
    """The weight of a node holding `bytes_present` of a pod when the best node holds `best`,
    weighed from what it lacks beyond the best (ScoringPolicy.lack_bytes > 0), worked out
    afresh from the rule: max_weight x clamp((present - max(0, best - lack_bytes)) /
    lack_bytes, 0, 1), rounded up (at least 1 when above 0); 0 below the floor."""
    assert policy.lack_bytes > 0
    if bytes_present <= 0 or bytes_present < policy.min_bytes:
        return 0
    above = bytes_present - max(0, best - policy.lack_bytes)
    if above <= 0:
        return 0
    return min(policy.max_weight, -(-policy.max_weight * above // policy.lack_bytes))


def in_ci() -> bool:
    """Whether the tests run in CI: the environment variable CI is set to anything but "",
    "0", "false" or "no" (any case). `.ci/run` sets CI=true. The one place the tests read CI
    (the Makefile's `test` target reads it the same way to decide whether Go must build)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def fail_or_skip(reason: str) -> NoReturn:
    """A real component a test needs is missing: an error in CI (`in_ci()`), a skip with
    the reason elsewhere."""
    import pytest

    if in_ci():
        pytest.fail(f"{reason} (CI is set, so this is an error)")
    pytest.skip(reason)


def require_program(name: str, why: str) -> str:
    """The path of a program on PATH: a missing one fails in CI and skips elsewhere."""
    import shutil

    path = shutil.which(name)
    if path is None:
        fail_or_skip(f"{name} is not installed ({why})")
    return path


def require(module: str, why: str) -> ModuleType:
    """Import a test dependency: a missing one fails in CI (`in_ci()`) and skips elsewhere."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        fail_or_skip(f"{module} is not installed ({why}); `make install` installs the test "
                     f"extra: {exc}")


def hack_module(relative: str) -> ModuleType:
    """A script of hack/ (build tooling, not a package), loaded as a module: the tests use
    the build's own parsers instead of writing them again."""
    path = Path(__file__).resolve().parent.parent / "hack" / relative
    spec = importlib.util.spec_from_file_location("hack_" + path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class FakeSource:
    """A layer source that knows some refs, records what it was asked, and may fail."""

    def __init__(self, known: dict[str, ImageLayers], fail: bool = False) -> None:
        self.known = known
        self.fail = fail
        self.asked: list[str] = []

    def cached(self, ref: ImageRef) -> ImageLayers | None:
        self.asked.append(str(ref))
        return self.known.get(str(ref))

    async def resolve(self, ref: ImageRef) -> ImageLayers | None:
        self.asked.append(str(ref))
        if self.fail:
            raise OSError("registry unreachable")
        return self.known.get(str(ref))
