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
from tests.integration.test_manifests import (  # noqa: F401 (fixtures)
    NAMESPACE,
    Obj,
    cert_dir,
    kubectl,
    manifests_copy,
    only,
    selector_matches,
    validate,
)
from tests.nodelayers_helpers import nodelayers_object
from webhook.inventory import nodelayers

AGENT_NAMESPACE = "layer-locality-agent"
NODE_NAME_KEY = "authentication.kubernetes.io/node-name"  # k8s.io/apiserver serviceaccount


@pytest.fixture(scope="module")
def with_agent(kubectl: str, manifests_copy: Path) -> list[Obj]:  # noqa: F811
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

    spec = schema["properties"]["spec"]["properties"]
    assert spec["layers"]["maxItems"] == nodelayers.MAX_LAYERS
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


def test_agent_rbac_writes_nodelayers_and_reads_nodes_only(with_agent: list[Obj]) -> None:
    role = only(with_agent, "ClusterRole", "layer-locality-agent")
    assert role["rules"] == [
        {"apiGroups": [nodelayers.GROUP], "resources": [nodelayers.PLURAL],
         "verbs": ["get", "create", "update"]},
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]},
    ]
    binding = only(with_agent, "ClusterRoleBinding", "layer-locality-agent")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    account = only(with_agent, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": AGENT_NAMESPACE}]
    assert not [o for o in with_agent if o["kind"] in ("Role", "RoleBinding")]
    webhook_role = only(with_agent, "ClusterRole", "layer-locality")
    assert {"apiGroups": [nodelayers.GROUP], "resources": [nodelayers.PLURAL],
            "verbs": ["list", "watch"]} in webhook_role["rules"]


def test_admission_policy_binds_writes_to_the_agents_own_node(with_agent: list[Obj]) -> None:
    policy = only(with_agent, "ValidatingAdmissionPolicy")
    spec = policy["spec"]
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert rule["apiGroups"] == [nodelayers.GROUP]
    assert rule["resources"] == [nodelayers.PLURAL]
    assert sorted(rule["operations"]) == ["CREATE", "UPDATE"]
    account = only(with_agent, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"]
    (condition,) = spec["matchConditions"]
    assert (f"request.userInfo.username == 'system:serviceaccount:{AGENT_NAMESPACE}:{account}'"
            == " ".join(condition["expression"].split()))
    variables = " ".join(v["expression"] for v in spec["variables"])
    assert f"request.userInfo.extra['{NODE_NAME_KEY}'][0]" in variables
    checks = " ".join(v["expression"] for v in spec["validations"])
    assert "variables.node == object.metadata.name" in checks
    assert "object.spec.nodeName == object.metadata.name" in checks
    assert spec["failurePolicy"] == "Fail"
    binding = only(with_agent, "ValidatingAdmissionPolicyBinding")
    assert binding["spec"] == {"policyName": policy["metadata"]["name"],
                               "validationActions": ["Deny"]}


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
    (env,) = [e for e in container["env"] if e["name"] == "NODE_NAME"]
    assert env["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] is True
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert spec["tolerations"] == [{"operator": "Exists"}]


def test_documented_pre_130_overlay_leaves_only_the_policy_out(
        kubectl: str, manifests_copy: Path, with_agent: list[Obj]) -> None:  # noqa: F811
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
