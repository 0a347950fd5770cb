"""The NodeLayers CRD (base) and the optional node-agent component, rendered with a real
kustomize into an overlay (the self-signed one plus `components: [node-agent]`, as a user adds
it) and validated with kubernetes-validate (strict). No cluster runs here: the admission policy's
CEL is checked for what it refers to, not evaluated; the CRD's OpenAPI schema is checked against
objects built as the contract says (jsonschema) and against the bounds the webhook enforces."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]  # kubernetes-validate depends on it
import pytest
import yaml

from tests.helpers import AMD64, image
from tests.integration.manifests_fixture import (
    NAMESPACE,
    Obj,
    only,
    selector_matches,
    validate,
)
from tests.nodelayers_helpers import nodelayers_object
from webhook.agent.options import FLAGS
from webhook.core.layerlabels import LabelRule, MiB
from webhook.core.packedlayers import RECORD
from webhook.inventory import nodelayers
from webhook.inventory.agentlease import DEFAULT_LEASE_SECONDS, LEASE_GROUP

AGENT_NAMESPACE = "layer-locality-agent"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"  # k8s.io/apiserver serviceaccount


@pytest.fixture(scope="module")
def with_agent(kubectl: str, manifests_copy: Path) -> list[Obj]:
    overlay = manifests_copy / "overlays" / "with-agent"
    overlay.mkdir(exist_ok=True)
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": ["../self-signed"], "components": ["../../components/node-agent"]}))
    result = subprocess.run([kubectl, "kustomize", str(overlay)], check=False,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def crd_schema(objects: list[Obj]) -> Any:
    crd = only(objects, "CustomResourceDefinition")
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]


def test_every_object_validates_and_the_agent_lives_apart(with_agent: list[Obj]) -> None:
    kinds = set()
    for obj in with_agent:
        validate(obj)
        kinds.add(obj["kind"])
    assert kinds >= {"DaemonSet", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                     "CustomResourceDefinition"}
    daemonset = only(with_agent, "DaemonSet")
    assert daemonset["metadata"]["namespace"] == AGENT_NAMESPACE != NAMESPACE
    # hostPath is refused below "privileged"; the webhook's namespace stays "restricted".
    labels = {ns["metadata"]["name"]: ns["metadata"]["labels"]
              for ns in with_agent if ns["kind"] == "Namespace"}
    assert labels[AGENT_NAMESPACE]["pod-security.kubernetes.io/enforce"] == "privileged"
    assert labels[NAMESPACE]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels[AGENT_NAMESPACE]["layer-locality.io/enabled"] == "false"


def test_crd_names_and_scope_are_the_contract(with_agent: list[Obj]) -> None:
    crd = only(with_agent, "CustomResourceDefinition")
    spec = crd["spec"]
    assert crd["metadata"]["name"] == f"{nodelayers.PLURAL}.{nodelayers.GROUP}"
    assert (spec["group"], spec["scope"]) == (nodelayers.GROUP, "Cluster")
    assert spec["names"] == {"kind": nodelayers.KIND, "listKind": "NodeLayersList",
                             "plural": nodelayers.PLURAL, "singular": "nodelayer",
                             "shortNames": ["nl"]}
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == (
        nodelayers.VERSION, True, True)


def test_crd_schema_accepts_contract_objects_and_matches_the_webhook_bounds(
        with_agent: list[Obj]) -> None:
    schema = crd_schema(with_agent)
    app = image("registry.example.com/app:1", {AMD64: [("a", 10), ("b", 20)]})
    good = nodelayers_object("node-1", [app], AMD64, 1_800_000_000.0)
    jsonschema.validate(good, schema)
    nodelayers.parse_node_layers(good)  # the webhook accepts it too

    packed = nodelayers_object("node-1", [app], AMD64, 1_800_000_000.0, packed=True)
    jsonschema.validate(packed, schema)
    nodelayers.parse_node_layers(packed)

    spec = schema["properties"]["spec"]["properties"]
    assert spec["layers"]["maxItems"] == nodelayers.MAX_LAYERS
    # The packed table's bound is the same count of 40-byte records, in base64.
    assert spec["packedLayers"]["maxLength"] == 4 * -(-nodelayers.MAX_LAYERS * RECORD // 3)
    assert spec["images"]["maxItems"] == nodelayers.MAX_IMAGES
    image_props = spec["images"]["items"]["properties"]
    assert image_props["names"]["maxItems"] == nodelayers.MAX_NAMES_PER_IMAGE
    assert image_props["names"]["items"]["maxLength"] == nodelayers.MAX_NAME_LENGTH
    assert image_props["layers"]["maxItems"] == nodelayers.MAX_LAYERS_PER_IMAGE
    assert image_props["layers"]["items"]["maximum"] == nodelayers.MAX_LAYERS - 1
    assert spec["resyncSeconds"]["maximum"] == nodelayers.MAX_RESYNC_SECONDS
    assert sorted(spec["runtime"]["enum"]) == sorted(nodelayers.RUNTIMES)

    for path, value in ((("spec", "layers", 0, "digest"), "sha256:short"),
                        (("spec", "runtime"), "docker"),
                        (("spec", "platform"), "amd64"),
                        (("spec", "images", 0, "layers", 0), -1)):
        bad = nodelayers_object("node-1", [app], AMD64, 1_800_000_000.0)
        target: Any = bad
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)
    # The rule the API server evaluates (CEL): an object is named after its node.
    assert [v["rule"] for v in schema["x-kubernetes-validations"]] == [
        "self.spec.nodeName == self.metadata.name"]


def test_agent_rbac_writes_its_objects_and_the_webhook_reads_the_leases(
        with_agent: list[Obj]) -> None:
    role = only(with_agent, "ClusterRole", "layer-locality-agent")
    assert role["rules"] == [
        {"apiGroups": [nodelayers.GROUP], "resources": [nodelayers.PLURAL],
         "verbs": ["get", "create", "update"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
    ]
    binding = only(with_agent, "ClusterRoleBinding", "layer-locality-agent")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    account = only(with_agent, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
    agent_subject = {"kind": "ServiceAccount", "name": account, "namespace": AGENT_NAMESPACE}
    assert binding["subjects"] == [agent_subject]
    webhook_role = only(with_agent, "ClusterRole", "layer-locality")
    assert {"apiGroups": [nodelayers.GROUP], "resources": [nodelayers.PLURAL],
            "verbs": ["list", "watch"]} in webhook_role["rules"]

    # Leases, in the agent's namespace only: the agent keeps its own, the webhook reads them.
    webhook_account = only(with_agent, "Deployment")["spec"]["template"]["spec"][
        "serviceAccountName"]
    webhook_subject = {"kind": "ServiceAccount", "name": webhook_account,
                       "namespace": NAMESPACE}
    only(with_agent, "ServiceAccount", webhook_account)
    grants = {}
    for rolebinding in (o for o in with_agent if o["kind"] == "RoleBinding"):
        assert rolebinding["metadata"]["namespace"] == AGENT_NAMESPACE
        assert rolebinding["roleRef"]["kind"] == "Role"
        (subject,) = rolebinding["subjects"]
        granted = only(with_agent, "Role", rolebinding["roleRef"]["name"])
        assert granted["metadata"]["namespace"] == AGENT_NAMESPACE
        grants[subject["name"]] = (subject, granted["rules"])
    assert grants == {
        account: (agent_subject, [{"apiGroups": [LEASE_GROUP], "resources": ["leases"],
                                   "verbs": ["get", "create", "update"]}]),
        webhook_account: (webhook_subject, [{"apiGroups": [LEASE_GROUP],
                                             "resources": ["leases"],
                                             "verbs": ["get", "list", "watch"]}]),
    }
    assert only(with_agent, "Role", "layer-locality-lease-reader")  # the name the docs give


def policy_parts(with_agent: list[Obj], name: str) -> tuple[Obj, str, str]:
    """A policy's spec, its variables' and its validations' CEL (whitespace folded)."""
    spec = only(with_agent, "ValidatingAdmissionPolicy", name)["spec"]
    account = only(with_agent, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
    (condition,) = spec["matchConditions"]
    assert (f"request.userInfo.username == 'system:serviceaccount:{AGENT_NAMESPACE}:{account}'"
            == " ".join(condition["expression"].split()))
    assert spec["failurePolicy"] == "Fail"
    binding = only(with_agent, "ValidatingAdmissionPolicyBinding", name)
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}
    variables = " ".join(" ".join(v["expression"].split()) for v in spec["variables"])
    assert f"request.userInfo.extra['{NODE_NAME_KEY}'][0]" in variables
    checks = " ".join(" ".join(v["expression"].split()) for v in spec["validations"])
    assert "variables.node != ''" in checks
    return spec, variables, checks


def test_admission_policies_bind_writes_to_the_agents_own_node(with_agent: list[Obj]) -> None:
    names = sorted(o["metadata"]["name"] for o in with_agent
                   if o["kind"] == "ValidatingAdmissionPolicy")
    assert names == ["layer-locality-agent-own-lease", "layer-locality-agent-own-node",
                     "layer-locality-agent-own-node-labels"]

    spec, _, checks = policy_parts(with_agent, "layer-locality-agent-own-node")
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"]) == ([nodelayers.GROUP], [nodelayers.PLURAL])
    assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
    assert "variables.node == object.metadata.name" in checks
    assert "object.spec.nodeName == object.metadata.name" in checks

    # Nodes: UPDATE only (a PATCH is one); the evaluation itself is on the real API server
    # (test_cluster_agent_writes.py).
    spec, variables, checks = policy_parts(with_agent, "layer-locality-agent-own-node-labels")
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"], rule["operations"]) == (
        [""], ["nodes"], ["UPDATE"])
    assert "has(object.metadata.labels)" in variables
    assert "has(oldObject.metadata.labels)" in variables
    assert "variables.node == object.metadata.name" in checks
    assert checks.count("k.startsWith('layer-locality.io/')") == 2
    for kept in ("object.spec == oldObject.spec", "annotations", "ownerReferences",
                 "finalizers"):
        assert kept in checks

    spec, _, checks = policy_parts(with_agent, "layer-locality-agent-own-lease")
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["apiGroups"], rule["resources"]) == ([LEASE_GROUP], ["leases"])
    assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
    assert "object.metadata.name == variables.node" in checks
    assert "object.spec.holderIdentity == variables.node" in checks


def test_daemonset_mounts_only_the_socket_and_is_locked_down(with_agent: list[Obj]) -> None:
    daemonset = only(with_agent, "DaemonSet")
    pod = daemonset["spec"]["template"]
    assert selector_matches(daemonset["spec"]["selector"], pod["metadata"]["labels"])
    spec = pod["spec"]
    (volume,) = spec["volumes"]
    assert volume["hostPath"]["type"] == "Socket"
    (container,) = spec["containers"]
    (mount,) = container["volumeMounts"]
    assert mount["name"] == volume["name"] and mount["readOnly"] is True
    assert mount["mountPath"] == volume["hostPath"]["path"]
    assert container["command"] == ["layer-locality", "agent"]
    flags = dict(arg[2:].split("=", 1) for arg in container["args"])
    assert flags["containerd-socket"] == mount["mountPath"]
    assert flags["containerd-namespace"] == "k8s.io"
    assert flags["node-name"] == "$(NODE_NAME)"
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
    assert env["NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    # The new settings through the environment, at the code's defaults.
    rule = LabelRule()
    assert {k: v for k, v in env.items() if k.startswith("LAYER_LOCALITY_")} == {
        "LAYER_LOCALITY_LEASE_SECONDS": str(DEFAULT_LEASE_SECONDS),
        "LAYER_LOCALITY_LABEL_MIN_MIB": str(rule.min_bytes // MiB),
        "LAYER_LOCALITY_MAX_LABELS": str(rule.max_labels)}
    assert {f[2:].split("=")[0] for f in container["args"]} <= {f.flag[2:] for f in FLAGS}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert spec["tolerations"] == [{"operator": "Exists"}]


def test_documented_pre_130_overlay_leaves_only_the_policy_out(
        kubectl: str, manifests_copy: Path, with_agent: list[Obj]) -> None:
    """docs/deploy.md's kustomization for clusters < 1.30, rendered as written."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    section = doc.split("## Node agent", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    (snippet,) = [b for b in blocks if "$patch: delete" in b]
    overlay = manifests_copy / "overlays" / "agent-pre-130"
    overlay.mkdir(exist_ok=True)
    kustomization = yaml.safe_load(snippet)
    kustomization["resources"] = ["../self-signed"]
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    result = subprocess.run([kubectl, "kustomize", str(overlay)], check=False,
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    objects = [d for d in yaml.safe_load_all(result.stdout) if d]
    policy_kinds = {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
    assert not [o for o in objects if o["kind"] in policy_kinds]
    kept = sorted((o["kind"], o["metadata"]["name"]) for o in with_agent
                  if o["kind"] not in policy_kinds)
    assert sorted((o["kind"], o["metadata"]["name"]) for o in objects) == kept
    # Without the policies no Node may be patched (labels, taints: any node's), and the
    # agent writes no labels.
    role = only(objects, "ClusterRole", "layer-locality-agent")
    assert not [r for r in role["rules"] if "nodes" in r["resources"] and r["verbs"] != ["get"]]
    (container,) = only(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["LAYER_LOCALITY_MAX_LABELS"] == "0"
