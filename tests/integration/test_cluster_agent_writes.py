"""The node agent's Node labels and Lease on the real API server, with real pod-bound
ServiceAccount tokens (test_cluster_nodelayers.agent_kubeconfig: TokenRequest bound to a Pod
that has `nodeName`, so the API server itself names the node in the user info) and the
shipped RBAC and ValidatingAdmissionPolicies.

The successes go through the agent's own code (KubeApi, NodeLabeler, LeaseRenewer, the
`--remove-labels` command) and are read back as cluster-admin; the refusals are the API
server's 403s with the policies' messages, and nothing of a refused request lands. The Nodes
are this module's own (tainted, so no other test's pod lands on them), deleted at the end."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.integration.cluster_fixture import wait_for
from tests.integration.test_cluster_nodelayers import (
    AGENT_ACCOUNT,
    AGENT_NAMESPACE,
    agent_kubeconfig,
)
from webhook.agent.kube import FIELD_MANAGER, ApiError, KubeApi
from webhook.agent.labels import NodeLabeler
from webhook.agent.lease import LeaseRenewer, LeaseSettings
from webhook.agent.nodelayers import NodeRef
from webhook.core.layerlabels import LAYER_LABEL_PREFIX, LabelRule, layer_label
from webhook.devcluster.cluster import LocalCluster
from webhook.devcluster.install import repo_root
from webhook.inventory.agentlease import parse_micro_time

pytestmark = pytest.mark.controlplane
MiB = 1 << 20
TAINT = {"key": "layer-locality.test/agent-writes", "effect": "NoSchedule"}
WEBHOOK_ACCOUNT = "system:serviceaccount:layer-locality:layer-locality"
CROWDED = 3000  # labels: a Node near the API server's request size limit holds about 4,000
POLICIES = ("layer-locality-agent-own-node", "layer-locality-agent-own-node-labels",
            "layer-locality-agent-own-lease")


def digest(seed: str) -> str:
    """A layer digest no image of the cluster has (the labels must not steer anything)."""
    return "sha256:" + (uuid.uuid5(uuid.NAMESPACE_URL, seed).hex * 2)


class Agent:
    """What an agent pod on `node` can do with its token."""

    def __init__(self, cluster: LocalCluster, node: str) -> None:
        from kubernetes import client, config

        self.node = node
        self.kubeconfig, self.pod = agent_kubeconfig(cluster, node)
        self.client = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig))
        self.kube = KubeApi(self.client)
        self.core: Any = client.CoreV1Api(self.client)

    def merge_patch(self, node: str, body: dict[str, Any]) -> None:
        self.core.patch_node(node, body, _content_type="application/merge-patch+json")


@pytest.fixture(scope="module")
def nodes(local_cluster: LocalCluster) -> Iterator[dict[str, dict[str, Any]]]:
    """Nodes of this module's own: two with labels and an annotation, one bare (no labels or
    annotations map at all), one crowded (CROWDED labels)."""
    from kubernetes import client

    suffix = uuid.uuid4().hex[:6]
    made: dict[str, dict[str, Any]] = {}
    with local_cluster.api_client() as api:
        core: Any = client.CoreV1Api(api)
        for role in ("a", "b", "bare", "crowded"):
            name = f"agent-{role}-{suffix}"
            metadata: dict[str, Any] = {"name": name}
            if role in ("a", "b"):
                metadata["labels"] = {"kubernetes.io/hostname": name, "team": "blue"}
                metadata["annotations"] = {"example.com/owner": "ops"}
            if role == "crowded":
                metadata["labels"] = {f"example.com/label-{n:05d}": "v" * 63
                                      for n in range(CROWDED)}
            node = core.create_node({"metadata": metadata, "spec": {"taints": [TAINT]}})
            made[role] = api.sanitize_for_serialization(node)
    try:
        yield made
    finally:
        with local_cluster.api_client() as api:
            core = client.CoreV1Api(api)
            for node in made.values():
                core.delete_node(node["metadata"]["name"])
            for pod in core.list_namespaced_pod(AGENT_NAMESPACE).items:
                if pod.spec.node_name in {n["metadata"]["name"] for n in made.values()}:
                    core.delete_namespaced_pod(pod.metadata.name, AGENT_NAMESPACE)


def admin_node(cluster: LocalCluster, name: str) -> dict[str, Any]:
    from kubernetes import client

    with cluster.api_client() as api:
        found: dict[str, Any] = api.sanitize_for_serialization(
            client.CoreV1Api(api).read_node(name))
    return found


def admin_lease(cluster: LocalCluster, name: str) -> dict[str, Any] | None:
    from kubernetes import client

    with cluster.api_client() as api:
        objects: Any = client.CustomObjectsApi(api)
        try:
            found: dict[str, Any] = objects.get_namespaced_custom_object(
                "coordination.k8s.io", "v1", AGENT_NAMESPACE, "leases", name)
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
    return found


def refused(call: Any, message: str) -> None:
    from kubernetes.client import ApiException

    with pytest.raises((ApiError, ApiException)) as raised:
        call()
    assert getattr(raised.value, "status", None) == 403, raised.value
    text = str(raised.value) + str(getattr(raised.value, "body", ""))
    assert message in text, text


def test_an_agent_labels_only_its_own_node_and_only_layer_labels(
        local_cluster: LocalCluster, nodes: dict[str, dict[str, Any]]) -> None:
    own, other = nodes["a"]["metadata"]["name"], nodes["b"]["metadata"]["name"]
    agent = Agent(local_cluster, own)
    layers = {digest("big"): 40 * MiB, digest("mid"): 17 * MiB, digest("small"): 3 * MiB}
    labeler = NodeLabeler(agent.kube, own, LabelRule(), labels=None)
    assert labeler.reconcile(layers)
    big, mid, small = (layer_label(digest(s)) for s in ("big", "mid", "small"))
    assert big and mid and small
    labels = admin_node(local_cluster, own)["metadata"]["labels"]
    assert labels == {"kubernetes.io/hostname": own, "team": "blue", big: "40", mid: "17"}
    assert not labeler.reconcile(layers)  # nothing changed: no request at all
    # Its fields are the agent's, by name (the API server keeps who set each field).
    owned = [m for m in admin_node(local_cluster, own)["metadata"]["managedFields"]
             if m["manager"] == FIELD_MANAGER]
    assert owned and all(m["operation"] == "Update" for m in owned)
    assert {f"f:{big}", f"f:{mid}"} <= set(owned[0]["fieldsV1"]["f:metadata"]["f:labels"])

    # The agent's token may not touch anything else of its Node, nor another Node.
    only_node = f"an agent on node {own} may change only Node {own}"
    only_layer = "an agent may change only labels under layer-locality.io/ on its Node"
    nothing_else = "an agent may change nothing on its Node but labels under layer-locality.io/"
    refused(lambda: agent.kube.patch_node_labels(other, {big: "40"}), only_node)
    refused(lambda: agent.kube.patch_node_labels(own, {"team": "red"}), only_layer)
    refused(lambda: agent.kube.patch_node_labels(own, {"team": None}), only_layer)
    refused(lambda: agent.kube.patch_node_labels(own, {"example.com/new": "x"}), only_layer)
    refused(lambda: agent.kube.patch_node_labels(own, {small: "3", "team": "red"}), only_layer)
    refused(lambda: agent.merge_patch(own, {"spec": {"taints": None}}), nothing_else)
    refused(lambda: agent.merge_patch(own, {"spec": {"unschedulable": True}}), nothing_else)
    refused(lambda: agent.merge_patch(own, {"metadata": {"annotations": {"x.io/y": "z"}}}),
            nothing_else)
    refused(lambda: agent.merge_patch(own, {"metadata": {"annotations": None}}), nothing_else)
    refused(lambda: agent.merge_patch(own, {"metadata": {"finalizers": ["x.io/keep"]}}),
            nothing_else)
    after = admin_node(local_cluster, own)
    assert after["metadata"]["labels"] == labels
    # (The controller-manager's TTL controller adds node.alpha.kubernetes.io/ttl.)
    annotations = after["metadata"]["annotations"]
    assert annotations["example.com/owner"] == "ops" and "x.io/y" not in annotations
    assert after["spec"]["taints"] == [TAINT] and not after["spec"].get("unschedulable")
    assert "finalizers" not in after["metadata"]
    assert not any(k.startswith("layer-locality.io/")
                   for k in admin_node(local_cluster, other)["metadata"]["labels"])

    # A layer gone: its label goes, in one patch.
    assert labeler.reconcile({digest("big"): 40 * MiB})
    assert admin_node(local_cluster, own)["metadata"]["labels"] == {
        "kubernetes.io/hostname": own, "team": "blue", big: "40"}


def test_a_bare_node_gets_layer_labels_and_loses_them(
        local_cluster: LocalCluster, nodes: dict[str, dict[str, Any]]) -> None:
    """No labels map at all before, and none after the last label goes: the policy's absent
    maps count as empty."""
    bare = nodes["bare"]["metadata"]["name"]
    assert "labels" not in nodes["bare"]["metadata"]
    agent = Agent(local_cluster, bare)
    labeler = NodeLabeler(agent.kube, bare, LabelRule(), labels=None)
    assert labeler.reconcile({digest("bare"): 20 * MiB})
    key = layer_label(digest("bare"))
    assert admin_node(local_cluster, bare)["metadata"]["labels"] == {key: "20"}
    refused(lambda: agent.kube.patch_node_labels(bare, {"team": "red"}),
            "may change only labels under layer-locality.io/")
    assert labeler.reconcile({})
    assert not admin_node(local_cluster, bare)["metadata"].get("labels")
    refused(lambda: agent.merge_patch(bare, {"metadata": {"annotations": {"a.io/b": "c"}}}),
            "may change nothing on its Node")


def test_the_label_policy_stays_within_its_cel_cost_on_a_crowded_node(
        local_cluster: LocalCluster, nodes: dict[str, dict[str, Any]]) -> None:
    """Both `all()` walks over 3,000 labels: within the per-expression runtime cost limit
    (an evaluation past it fails, and failurePolicy Fail would refuse the patch)."""
    crowded = nodes["crowded"]["metadata"]["name"]
    agent = Agent(local_cluster, crowded)
    labeler = NodeLabeler(agent.kube, crowded, LabelRule(), labels=None)
    assert labeler.reconcile({digest("crowded"): 20 * MiB})
    labels = admin_node(local_cluster, crowded)["metadata"]["labels"]
    assert len(labels) == CROWDED + 1 and labels[layer_label(digest("crowded"))] == "20"
    refused(lambda: agent.kube.patch_node_labels(crowded, {"example.com/label-00000": "w"}),
            "may change only labels under layer-locality.io/")


def test_remove_labels_command_removes_the_nodes_layer_labels(
        local_cluster: LocalCluster, nodes: dict[str, dict[str, Any]]) -> None:
    """`layer-locality agent --remove-labels` with the agent's own token (uninstalling)."""
    own = nodes["b"]["metadata"]["name"]
    agent = Agent(local_cluster, own)
    keys = [layer_label(digest(f"rm-{n}")) for n in range(3)]
    agent.kube.patch_node_labels(own, {k: "20" for k in keys if k})
    done = subprocess.run(
        [sys.executable, "-m", "webhook", "agent", "--node-name", own, "--remove-labels",
         "--kubeconfig", str(agent.kubeconfig)],
        capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "3 layer labels removed" in done.stderr
    assert admin_node(local_cluster, own)["metadata"]["labels"] == {
        "kubernetes.io/hostname": own, "team": "blue"}


def test_the_documented_cleanup_loop_removes_only_layer_labels(
        local_cluster: LocalCluster, nodes: dict[str, dict[str, Any]]) -> None:
    """docs/agent.md's loop for after an uninstall, run as written by bash and the pinned
    kubectl as cluster-admin, on this module's Nodes only (the session's other Nodes are other
    tests')."""
    doc = (repo_root() / "docs" / "agent.md").read_text()
    (loop,) = [b for b in re.findall(r"```sh\n(.*?)```", doc, flags=re.S) if "go-template" in b]
    assert loop.count("kubectl get nodes ") == 1
    mine = "layer-locality.test/cleanup=yes"
    loop = loop.replace("kubectl get nodes ", f"kubectl get nodes -l {mine} ")
    names = [nodes[r]["metadata"]["name"] for r in ("b", "crowded", "bare")]
    keys = [layer_label(digest(f"cleanup-{n}")) for n in range(3)]
    before = {}
    for name in names:  # the bare Node: no layer label to remove
        added = [f"{k}=20" for k in keys] if name != names[-1] else []
        local_cluster.kubectl_run(["label", "node", name, mine, *added])
        before[name] = admin_node(local_cluster, name)["metadata"]["labels"]
    script = (f'kubectl() {{ "{local_cluster.kubectl}" '
              f'--kubeconfig="{local_cluster.kubeconfig}" "$@"; }}\n{loop}')
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    for name in names:
        assert admin_node(local_cluster, name)["metadata"]["labels"] == {
            k: v for k, v in before[name].items() if not k.startswith(LAYER_LABEL_PREFIX)}


def test_an_agent_renews_only_its_own_lease(
        local_cluster: LocalCluster, nodes: dict[str, dict[str, Any]]) -> None:
    own_node, other = nodes["a"], nodes["b"]["metadata"]["name"]
    own = own_node["metadata"]["name"]
    agent = Agent(local_cluster, own)
    lease = LeaseRenewer(agent.kube, NodeRef(own, own_node["metadata"]["uid"]),
                         LeaseSettings(AGENT_NAMESPACE, 45))
    lease.renew()
    first = admin_lease(local_cluster, own)
    assert first is not None
    assert first["spec"]["holderIdentity"] == own
    assert first["spec"]["leaseDurationSeconds"] == 45
    assert first["metadata"]["ownerReferences"] == [{
        "apiVersion": "v1", "kind": "Node", "name": own, "uid": own_node["metadata"]["uid"]}]
    lease.renew()
    second = admin_lease(local_cluster, own)
    assert second is not None
    assert int(second["metadata"]["resourceVersion"]) > int(
        first["metadata"]["resourceVersion"])
    first_renewal = parse_micro_time(first["spec"]["renewTime"])
    second_renewal = parse_micro_time(second["spec"]["renewTime"])
    assert first_renewal is not None and second_renewal is not None
    assert second_renewal > first_renewal
    assert second["spec"]["acquireTime"] == first["spec"]["acquireTime"]

    now = datetime.now(UTC)
    from webhook.inventory.agentlease import lease_body

    only_own = f"an agent on node {own} may write only Lease {own}, held by {own}"
    refused(lambda: agent.kube.create_lease(AGENT_NAMESPACE, lease_body(
        other, AGENT_NAMESPACE, 45, now)), only_own)
    stolen = lease_body(own, AGENT_NAMESPACE, 45, now,
                        resource_version=second["metadata"]["resourceVersion"])
    stolen["spec"]["holderIdentity"] = other
    refused(lambda: agent.kube.replace_lease(AGENT_NAMESPACE, own, stolen), only_own)
    # Outside its namespace RBAC refuses it before any policy.
    refused(lambda: agent.kube.create_lease("default", lease_body(own, "default", 45, now)),
            'cannot create resource "leases"')
    assert admin_lease(local_cluster, other) is None
    assert admin_lease(local_cluster, own) == second

    # The Lease goes with its Node (the ownerReference; the garbage collector).
    from kubernetes import client

    with local_cluster.api_client() as api:
        core: Any = client.CoreV1Api(api)
        core.delete_node(own)
        wait_for(lambda: admin_lease(local_cluster, own) is None, 60, "the Lease collected")
        core.create_node({"metadata": {"name": own}, "spec": {"taints": [TAINT]}})  # for the
        # fixture, which deletes it


def test_the_webhook_may_read_the_leases_and_the_agent_only_its_verbs(
        local_cluster: LocalCluster) -> None:
    def allowed(user: str, verb: str, namespace: str = AGENT_NAMESPACE,
                resource: str = "leases", group: str = "coordination.k8s.io") -> bool:
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {"user": user, "groups": ["system:serviceaccounts"],
                           "resourceAttributes": {"namespace": namespace, "verb": verb,
                                                  "group": group, "resource": resource}}}
        out = local_cluster.kubectl_run(["create", "-o", "json", "-f", "-"],
                                        stdin=json.dumps(review))
        return bool(json.loads(out)["status"].get("allowed"))

    agent = f"system:serviceaccount:{AGENT_NAMESPACE}:{AGENT_ACCOUNT}"
    for verb in ("get", "list", "watch"):
        assert allowed(WEBHOOK_ACCOUNT, verb)
    for verb in ("create", "update", "patch", "delete"):
        assert not allowed(WEBHOOK_ACCOUNT, verb)
    assert not allowed(WEBHOOK_ACCOUNT, "list", "kube-node-lease")
    for verb in ("get", "create", "update"):
        assert allowed(agent, verb)
    for verb in ("list", "watch", "delete", "patch"):
        assert not allowed(agent, verb)
    assert not allowed(agent, "update", "kube-node-lease")
    assert allowed(agent, "patch", "", "nodes", "")
    for verb in ("update", "delete", "create"):
        assert not allowed(agent, verb, "", "nodes", "")


def test_the_policies_type_check_clean(local_cluster: LocalCluster) -> None:
    """The API server type-checks each policy's CEL against the kinds it matches: no
    warning (a misspelt field, a type mismatch in the absent-map defaults)."""
    from kubernetes import client

    def policy(name: str) -> dict[str, Any]:
        with local_cluster.api_client() as api:
            found: dict[str, Any] = api.sanitize_for_serialization(
                client.AdmissionregistrationV1Api(api).read_validating_admission_policy(name))
        return found

    def checked(name: str) -> bool:
        found = policy(name)
        return bool((found.get("status") or {}).get("observedGeneration")
                    == found["metadata"]["generation"])

    for name in POLICIES:
        wait_for(lambda: checked(name), 30, f"{name} type-checked")  # noqa: B023
        status = policy(name)["status"]
        assert not (status.get("typeChecking") or {}).get("expressionWarnings"), status
