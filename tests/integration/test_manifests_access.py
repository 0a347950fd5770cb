"""What the webhook may do and what may reach it, in both rendered overlays: its
ClusterRoles (read nodes and pods, list and watch events and NodeLayers; create TokenReviews
and SubjectAccessReviews for the metrics port; the metrics reader left for the operator to
bind) and their bindings to the Deployment's ServiceAccount, no namespaced Role; the
NetworkPolicy that admits only the webhook and metrics ports."""

from __future__ import annotations

from tests.integration.manifests_fixture import (
    METRICS_PORT,
    NAMESPACE,
    SERVICE,
    SERVING_PORT,
    Obj,
    only,
    selector_matches,
)


def test_rbac_reads_nodes_pods_and_watches_events_and_nodelayers_only(
        objects: list[Obj]) -> None:
    role = only(objects, "ClusterRole", SERVICE)
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["nodes", "pods"],
            "verbs": ["get", "list", "watch"],
        },
        {  # the outcome telemetry's kubelet Pulled events: list and watch, no get
            "apiGroups": [""],
            "resources": ["events"],
            "verbs": ["list", "watch"],
        },
        {  # the node agent's NodeLayers objects (a reflector: list and watch, no get)
            "apiGroups": ["layer-locality.io"],
            "resources": ["nodelayers"],
            "verbs": ["list", "watch"],
        },
    ]
    binding = only(objects, "ClusterRoleBinding", SERVICE)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    sa_name = only(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa_name, "namespace": NAMESPACE}
    ]
    assert not [o for o in objects if o["kind"] in ("Role", "RoleBinding")]
    # The metrics port's token checks: create TokenReviews and SubjectAccessReviews, no more.
    auth = only(objects, "ClusterRole", f"{SERVICE}-metrics-auth")
    assert auth["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
         "verbs": ["create"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
         "verbs": ["create"]},
    ]
    auth_binding = only(objects, "ClusterRoleBinding", f"{SERVICE}-metrics-auth")
    assert auth_binding["roleRef"]["name"] == auth["metadata"]["name"]
    assert auth_binding["subjects"] == binding["subjects"]
    reader = only(objects, "ClusterRole", f"{SERVICE}-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "ClusterRoleBinding"} == {
        SERVICE, f"{SERVICE}-metrics-auth"}  # the reader is bound by the operator


def test_network_policy_admits_only_the_webhook_and_metrics_ports(objects: list[Obj]) -> None:
    policy = only(objects, "NetworkPolicy")
    template = only(objects, "Deployment")["spec"]["template"]
    assert selector_matches(policy["spec"]["podSelector"], template["metadata"]["labels"])
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": SERVING_PORT},
                                                    {"protocol": "TCP", "port": METRICS_PORT}]}]
