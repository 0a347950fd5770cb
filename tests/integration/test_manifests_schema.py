"""Every manifest and example validates, strict, against the Kubernetes schema
(`manifests_fixture.validate`: kubernetes-validate, cert-manager's kinds by hand):

* the plain files of `manifests/base`, without kustomize, always;
* every file under examples/ that is a Kubernetes object (the others are listed in
  NOT_OBJECTS with what checks them instead), in every subdirectory;
* every object of both rendered overlays (self-signed, cert-manager), each namespaced one in
  the webhook's namespace, and every kind the webhook needs present.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.integration.manifests_fixture import (
    EXAMPLES,
    MANIFESTS,
    NAMESPACE,
    Obj,
    load_yaml_docs,
    validate,
)


def test_base_files_validate_without_kustomize() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "base" / "kustomization.yaml").read_text())
    count = 0
    for resource in kustomization["resources"]:
        for obj in load_yaml_docs(MANIFESTS / "base" / resource):
            validate(obj)
            count += 1
    assert count >= 9


# Files under examples/ that are not Kubernetes objects, and what checks them instead.
NOT_OBJECTS = {
    "admission-review.json": "an AdmissionReview (no schema): test_server posts it",
    "catalog.json": "the catalog format: test_cli's seed scenario loads it",
    # A NodeList trimmed to what the inventory reads: status.nodeInfo lacks the ids the
    # kubelet fills in (machineID, bootID...), which the schema requires.
    "nodes.json": "explain's --nodes input: test_cli's seed scenario loads it",
}
EXAMPLE_FILES = sorted(path for path in EXAMPLES.rglob("*")
                       if path.suffix in (".yaml", ".json") and path.name not in NOT_OBJECTS)


def test_the_examples_checked_include_every_subdirectory() -> None:
    every = {path.name for path in EXAMPLES.rglob("*") if path.is_file()}
    assert every <= {path.name for path in EXAMPLE_FILES} | set(NOT_OBJECTS), "unchecked"
    assert {EXAMPLES / "pod.yaml", EXAMPLES / "seed" / "pod.yaml"} <= set(EXAMPLE_FILES)


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_examples_validate(path: Path) -> None:
    objects = load_yaml_docs(path)  # JSON is YAML
    assert objects, f"{path} holds no object"
    for obj in objects:
        validate(obj)


def test_every_rendered_object_validates(objects: list[Obj]) -> None:
    kinds = set()
    for obj in objects:
        validate(obj)
        kinds.add(obj["kind"])
        if obj["kind"] not in {
            "Namespace",
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "MutatingWebhookConfiguration",
        }:
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]
    assert kinds >= {
        "Namespace",
        "CustomResourceDefinition",  # NodeLayers: watched by the webhook, written by the agent
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "MutatingWebhookConfiguration",
    }
