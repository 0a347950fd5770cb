"""How the API server reaches the webhook, in both rendered overlays: the
MutatingWebhookConfiguration (its two webhooks, the holdout-exempt one the same but for its
name, path and namespace selector; failurePolicy, timeouts, rules, matchConditions whose CEL is
checked for syntax and what it refers to, not evaluated), its selectors against the example
namespace and pods (opt-in namespaces, opt-out pods, kube-system and the webhook's own
namespace excluded) and the Service that routes 443 to the serving port."""

from __future__ import annotations

import re

from tests.integration.manifests_fixture import (
    ENABLED_LABEL,
    EXAMPLES,
    EXEMPT_PATH,
    HOLDOUT_LABEL,
    METRICS_PORT,
    NAMESPACE,
    NODE_NAME_CONDITION,
    SERVICE,
    SERVICE_PORT,
    SERVING_PORT,
    SKIP_LABEL,
    WEBHOOK_PATH,
    Obj,
    load_yaml_docs,
    only,
    selector_matches,
)


def namespace_labels(namespace: Obj) -> dict[str, str]:
    """The labels the API server sees: it always adds kubernetes.io/metadata.name."""
    labels = dict(namespace["metadata"].get("labels") or {})
    labels["kubernetes.io/metadata.name"] = namespace["metadata"]["name"]
    return labels


def cel_looks_valid(expression: str) -> bool:
    """A light syntax check (no CEL library is a dependency): balanced brackets outside string
    literals, no unterminated string, only the admission variables as roots."""
    stack: list[str] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    quote: str | None = None
    for ch in expression:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            stack.append(ch)
        elif ch in pairs and (not stack or stack.pop() != pairs[ch]):
            return False
    if quote or stack:
        return False
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "''", expression)
    roots = set(re.findall(r"(?<![.\w])([A-Za-z_]\w*)\s*\.", unquoted))
    return roots <= {"object", "oldObject", "request", "authorizer", "r"}

def test_webhook_configuration(objects: list[Obj]) -> None:
    mwc = only(objects, "MutatingWebhookConfiguration")
    hook, exempt = mwc["webhooks"]
    # The holdout-exempt webhook is the same but for its name, path and namespace selector.
    assert exempt["clientConfig"]["service"]["path"] == EXEMPT_PATH
    assert exempt["name"] != hook["name"]
    same = ("name", "clientConfig", "namespaceSelector")
    assert {k: v for k, v in exempt.items() if k not in same} == {
        k: v for k, v in hook.items() if k not in same}
    assert {k: v for k, v in exempt["clientConfig"]["service"].items() if k != "path"} == {
        k: v for k, v in hook["clientConfig"]["service"].items() if k != "path"}
    assert hook["clientConfig"]["service"] == {
        "name": SERVICE,
        "namespace": NAMESPACE,
        "path": WEBHOOK_PATH,
        "port": SERVICE_PORT,
    }
    assert "url" not in hook["clientConfig"]
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"  # server-side dry-run calls only such webhooks
    assert hook["failurePolicy"] == "Ignore"
    assert 1 <= hook["timeoutSeconds"] <= 5
    assert hook["matchPolicy"] == "Equivalent"
    assert hook["reinvocationPolicy"] == "Never"
    assert hook["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    expressions = [c["expression"] for c in hook["matchConditions"]]
    assert NODE_NAME_CONDITION in expressions
    assert len({c["name"] for c in hook["matchConditions"]}) == len(expressions)
    for expression in expressions:
        assert cel_looks_valid(expression), expression

    service = only(objects, "Service", SERVICE)
    assert service["metadata"]["namespace"] == NAMESPACE


def test_selectors_opt_in_namespaces_and_opt_out_pods(objects: list[Obj]) -> None:
    hook, exempt = only(objects, "MutatingWebhookConfiguration")["webhooks"]
    ns_sel, pod_sel = hook["namespaceSelector"], hook["objectSelector"]
    # Exactly one of the two webhooks calls for an opted-in namespace, exempt or not.
    for labels, path in (({ENABLED_LABEL: "true"}, WEBHOOK_PATH),
                         ({ENABLED_LABEL: "true", HOLDOUT_LABEL: "exempt"}, EXEMPT_PATH),
                         ({ENABLED_LABEL: "true", HOLDOUT_LABEL: "other"}, WEBHOOK_PATH)):
        labels = {**labels, "kubernetes.io/metadata.name": "team"}
        called = [h["clientConfig"]["service"]["path"] for h in (hook, exempt)
                  if selector_matches(h["namespaceSelector"], labels)]
        assert called == [path], labels
    for name in ("kube-system", NAMESPACE):
        labels = {ENABLED_LABEL: "true", HOLDOUT_LABEL: "exempt",
                  "kubernetes.io/metadata.name": name}
        assert not selector_matches(exempt["namespaceSelector"], labels), name

    demo_ns = only(load_yaml_docs(EXAMPLES / "namespace.yaml"), "Namespace")
    assert demo_ns["metadata"]["labels"][ENABLED_LABEL] == "true"
    assert selector_matches(ns_sel, namespace_labels(demo_ns))
    own_ns = only(objects, "Namespace", NAMESPACE)
    assert not selector_matches(ns_sel, namespace_labels(own_ns))
    # Excluded by name even if someone labels them.
    for name in ("kube-system", NAMESPACE):
        labels = {ENABLED_LABEL: "true", "kubernetes.io/metadata.name": name}
        assert not selector_matches(ns_sel, labels), name
    assert not selector_matches(ns_sel, {"kubernetes.io/metadata.name": "default"})

    pod = only(load_yaml_docs(EXAMPLES / "pod.yaml"), "Pod")
    skipped = only(load_yaml_docs(EXAMPLES / "pod-skip.yaml"), "Pod")
    assert pod["metadata"]["namespace"] == demo_ns["metadata"]["name"]
    assert selector_matches(pod_sel, pod["metadata"].get("labels", {}))
    assert selector_matches(pod_sel, {})
    assert skipped["metadata"]["labels"][SKIP_LABEL] == "true"
    assert not selector_matches(pod_sel, skipped["metadata"]["labels"])
    deployment = only(load_yaml_docs(EXAMPLES / "deployment.yaml"), "Deployment")
    assert deployment["metadata"]["namespace"] == demo_ns["metadata"]["name"]
    assert selector_matches(pod_sel, deployment["spec"]["template"]["metadata"]["labels"])


def test_service_routes_443_to_the_serving_port(objects: list[Obj]) -> None:
    service = only(objects, "Service", SERVICE)
    ports = {p["name"]: (p["port"], p["targetPort"], p["protocol"])
             for p in service["spec"]["ports"]}
    assert ports == {"https": (SERVICE_PORT, SERVING_PORT, "TCP"),
                     "metrics": (METRICS_PORT, METRICS_PORT, "TCP")}
    template = only(objects, "Deployment")["spec"]["template"]
    assert selector_matches(
        {"matchLabels": service["spec"]["selector"]}, template["metadata"]["labels"]
    )
