"""The product installed into real nodes as an operator installs it (installed_cluster:
`cluster up --kubelets 3 --install in-cluster`): the image built here, pushed to the cluster's
registry, the chart with its default values (two replicas behind the Service, self-signed
certificates, PDB, NetworkPolicy) and the node agent's DaemonSet. No webhook runs on the host:
every patch below came through the Service from a pod on a real node.

Then the operator's day two: `helm upgrade` that rolls the pods and a webhook pod killed, both
under a stream of pod creations that must all succeed and all be patched; `helm uninstall`
leaving only the kept CRD; and `make deploy OVERLAY=self-signed` rolling out the same image."""

from __future__ import annotations

import json
import os
import subprocess
import time
from typing import Any

import pytest

from tests.integration.incluster_probes import (
    AGENT_NAMESPACE,
    AGENT_WRITES,
    L1,
    NAMESPACE,
    RELEASE,
    STATUS_TIMEOUT,
    STREAMED,
    MiB,
    Stream,
    agent_lease,
    dry_run_decision,
    entering,
    reaches,
)
from tests.integration.realnodes_fixture import (
    RealCluster,
    app_image,
    pod_manifest,
    wait_for,
)
from tests.nodelayers_helpers import spec_layer_pairs
from webhook.core.layerlabels import label_value, layer_label
from webhook.devcluster.install import repo_root
from webhook.devcluster.realnodes import oci
from webhook.devcluster.realnodes.incluster import image_repository, version
from webhook.devcluster.realnodes.network import registry_host
from webhook.inventory.agentlease import DEFAULT_LEASE_SECONDS, parse_micro_time

pytestmark = pytest.mark.realnodes


def test_installed_with_the_charts_defaults(installed_cluster: RealCluster) -> None:
    cluster = installed_cluster
    deployment = cluster.kubectl_json("-n", NAMESPACE, "get", "deployment", RELEASE)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["status"].get("availableReplicas") == 2
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"{image_repository()}:{version()}"
    pods = cluster.kubectl_json("-n", NAMESPACE, "get", "pods", "-l",
                                "app.kubernetes.io/name=layer-locality")["items"]
    for pod in pods:  # the probes passed on a real kubelet
        conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
        assert conditions["Ready"] == "True", pod["metadata"]["name"]
        assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    hooks = cluster.kubectl_json("get", "mutatingwebhookconfiguration", RELEASE)["webhooks"]
    for hook in hooks:
        assert "url" not in hook["clientConfig"]
        assert hook["clientConfig"]["service"]["name"] == RELEASE
    for kind in ("poddisruptionbudget", "networkpolicy", "service"):
        cluster.kubectl("-n", NAMESPACE, "get", kind, RELEASE)

    cluster.hold(STREAMED, "node-1")
    steered = cluster.new_namespace(opted_in=True)
    wait_for(lambda: (dry_run_decision(cluster, steered, STREAMED) or {}).get("top", [{}])[0]
             .get("node") == "node-1", STATUS_TIMEOUT, "the in-cluster webhook preferring node-1")


def test_the_node_agent_reads_each_nodes_containerd(installed_cluster: RealCluster) -> None:
    """Past the kubelet's 50-image cap: node-3 holds 51 images more (pulled through containerd,
    no pod), the smallest of them unlisted in node status; the agent on node-3 publishes its
    layers, and the webhook prefers node-3 for it: only NodeLayers could have said so."""
    cluster = installed_cluster
    daemonset = cluster.kubectl_json("-n", AGENT_NAMESPACE, "get", "daemonset",
                                     f"{RELEASE}-agent")
    assert daemonset["status"]["numberReady"] == daemonset["status"][
        "desiredNumberScheduled"] == 3
    shared = oci.filler_layer("cap-shared", 26 * MiB)
    decoys = [oci.Image(f"cap/decoy-{i}", "1",
                        (shared, oci.files_layer({f"/decoy/{i}": f"{i}".encode()})),
                        entrypoint=("/bin/true",)) for i in range(51)]
    hidden = app_image("cap/hidden", L1, oci.filler_layer("cap-hidden", 24 * MiB))
    assert hidden.pull_bytes < min(d.pull_bytes for d in decoys)
    for image in [*decoys, hidden]:
        cluster.push(image, mount_from="cap/decoy-0")
    certs = cluster.node("node-3").directory + "/certs.d"
    for image in [*decoys, hidden]:
        cluster.ctr("node-3", "images", "pull", "--hosts-dir", certs, cluster.ref(image))

    def listed() -> list[dict[str, Any]]:
        return cluster.node_images("node-3")
    wait_for(lambda: any(cluster.ref(decoys[-1]) in (e.get("names") or []) for e in listed()),
             STATUS_TIMEOUT, "node-3's status listing the decoys")
    status = listed()
    assert len(status) == 50  # nodeStatusMaxImages: the largest 50
    sizes = [e["sizeBytes"] for e in status]
    assert sizes == sorted(sizes, reverse=True)
    assert not any(cluster.ref(hidden) in (e.get("names") or []) for e in status)

    hidden_layer = hidden.layers[-1].digest

    def published() -> bool:
        spec = cluster.kubectl_json("get", "nodelayers", "node-3")["spec"]
        return hidden_layer in {digest for digest, _ in spec_layer_pairs(spec)}
    wait_for(published, 60, "node-3's NodeLayers listing the hidden image's layer")
    other = cluster.kubectl_json("get", "nodelayers", "node-1")["spec"]
    assert hidden_layer not in {digest for digest, _ in spec_layer_pairs(other)}
    steered = cluster.new_namespace(opted_in=True)
    wait_for(lambda: (dry_run_decision(cluster, steered, hidden) or {}).get("top", [{}])[0]
             .get("node") == "node-3", 60, "a decision preferring node-3 for the hidden image")


def test_an_agents_token_writes_only_its_own_nodes_nodelayers(
        installed_cluster: RealCluster) -> None:
    """The agent's pod-bound token, issued by node-1's kubelet, carries node-1's name; the
    shipped ValidatingAdmissionPolicy lets it write NodeLayers node-1 and refuses node-2
    (read back from the API server's answers, through `kubectl exec` on a real node)."""
    cluster = installed_cluster
    pods = cluster.kubectl_json("-n", AGENT_NAMESPACE, "get", "pods",
                                "--field-selector", "spec.nodeName=node-1")["items"]
    (pod,) = pods
    out = cluster.kubectl("-n", AGENT_NAMESPACE, "exec", pod["metadata"]["name"], "--",
                          "/opt/layer-locality/bin/python3", "-c", AGENT_WRITES)
    answers = json.loads(out.strip().splitlines()[-1])
    assert answers["node-1"] == "200"
    assert answers["node-2"].startswith("403")
    assert "an agent on node node-1 may write only NodeLayers node-1" in answers["node-2"]


def test_the_agent_labels_its_node_by_layer_and_renews_its_lease(
        installed_cluster: RealCluster) -> None:
    """The agent on node-2 (its kubelet-issued token, the shipped policies): a pulled image's
    layer of 16 MiB or more becomes a label on node-2 alone, and goes when the image goes;
    node-2's Lease, owned by the Node, is renewed (read back from the API server)."""
    cluster = installed_cluster
    node = cluster.kubectl_json("get", "node", "node-2")
    lease = agent_lease(cluster, "node-2")
    assert lease["spec"]["holderIdentity"] == "node-2"
    assert lease["spec"]["leaseDurationSeconds"] == DEFAULT_LEASE_SECONDS
    assert lease["metadata"]["ownerReferences"] == [{
        "apiVersion": "v1", "kind": "Node", "name": "node-2",
        "uid": node["metadata"]["uid"]}]
    renewed = parse_micro_time(lease["spec"]["renewTime"])
    assert renewed is not None

    big = oci.filler_layer("labels-big", 17 * MiB)
    labelled = app_image("labels/big", L1, big)
    key = layer_label(big.digest)
    assert key is not None and L1.size < 16 * MiB  # busybox's layer stays unlabelled
    cluster.push(labelled)
    certs = cluster.node("node-2").directory + "/certs.d"
    cluster.ctr("node-2", "images", "pull", "--hosts-dir", certs, cluster.ref(labelled))

    def labels(name: str) -> dict[str, str]:
        found: dict[str, str] = cluster.kubectl_json("get", "node", name)["metadata"]["labels"]
        return found
    wait_for(lambda: labels("node-2").get(key) == label_value(big.size), 30,
             "node-2's label for the layer")
    assert key not in labels("node-1") and key not in labels("node-3")
    assert layer_label(L1.digest) not in labels("node-2")
    # All three references a pull leaves (tag, digest, the CRI's image ID), as `crictl rmi`.
    cluster.ctr("node-2", "images", "rm", cluster.ref(labelled),
                labelled.pinned(registry_host()), labelled.config_digest)
    wait_for(lambda: key not in labels("node-2"), 30, "the label gone with the image")

    wait_for(lambda: (parse_micro_time(agent_lease(cluster, "node-2")["spec"]["renewTime"])
                      or 0) > renewed, DEFAULT_LEASE_SECONDS / 3 + 30, "the Lease renewed")


def test_helm_upgrade_rolls_the_pods_with_no_failed_or_unpatched_admission(
        installed_cluster: RealCluster) -> None:
    cluster = installed_cluster
    cluster.hold(STREAMED, "node-1")
    namespace = cluster.new_namespace(opted_in=True)
    wait_for(lambda: dry_run_decision(cluster, namespace, STREAMED) is not None,
             STATUS_TIMEOUT, "decisions for the streamed image")
    def webhook_pods() -> set[str]:
        return {p["metadata"]["name"] for p in cluster.kubectl_json(
            "-n", NAMESPACE, "get", "pods", "-l",
            "app.kubernetes.io/name=layer-locality")["items"]}
    before = webhook_pods()
    with Stream(cluster, namespace) as stream:
        time.sleep(2)
        cluster.helm_run("upgrade", RELEASE, str(repo_root() / "charts" / "layer-locality"),
                         "--namespace", NAMESPACE, "--reuse-values",
                         "--set", "settings.log_level=debug", "--wait", "--timeout", "180s")
        cluster.kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{RELEASE}",
                        "--timeout=180s")
        # The old pods drain (serving with Connection: close) before they go.
        wait_for(lambda: not before & webhook_pods(), 90, "the old webhook pods gone")
        time.sleep(3)  # the stream goes on against the new pods only
    assert stream.outcomes["patched"] > 50, stream.outcomes
    assert stream.outcomes["failed"] == 0, stream.errors[:5]
    assert stream.outcomes["unpatched"] == 0, stream.outcomes
    print(f"helm upgrade under a stream: {dict(stream.outcomes)}")
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def test_a_killed_webhook_pod_leaves_the_other_serving(installed_cluster: RealCluster) -> None:
    cluster = installed_cluster
    cluster.hold(STREAMED, "node-1")
    namespace = cluster.new_namespace(opted_in=True)
    wait_for(lambda: dry_run_decision(cluster, namespace, STREAMED) is not None,
             STATUS_TIMEOUT, "decisions for the streamed image")
    victim = cluster.kubectl_json("-n", NAMESPACE, "get", "pods", "-l",
                                  "app.kubernetes.io/name=layer-locality")["items"][0]
    with Stream(cluster, namespace) as stream:
        time.sleep(2)
        cluster.kubectl("-n", NAMESPACE, "delete", "pod", victim["metadata"]["name"],
                        "--grace-period=0", "--force", "--wait=false")
        time.sleep(15)
    assert stream.outcomes["failed"] == 0, stream.errors[:5]
    assert stream.outcomes["patched"] > 50, stream.outcomes
    # A force-killed pod's in-flight calls fail open (failurePolicy Ignore): counted, shown.
    assert stream.outcomes["unpatched"] <= 2, stream.outcomes
    print(f"webhook pod killed under a stream: {dict(stream.outcomes)}")
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def test_the_network_policy_admits_the_api_server_and_prometheus_only(
        installed_cluster: RealCluster) -> None:
    """The chart's NetworkPolicy narrowed to no pod on 8443 and the monitoring namespace on
    8081, enforced by kube-network-policies (realnodes/netpol.py): the API server's calls
    (not a pod) still reach the webhook, a pod of the monitoring namespace reaches the
    metrics port, and another pod reaches neither port. Before the enforcer runs, the same
    policy holds nothing: the other pod gets through."""
    from tests.helpers import fail_or_skip
    from webhook.devcluster.binaries import netpol_bin_dir
    from webhook.devcluster.processes import ClusterError
    from webhook.devcluster.realnodes import netpol
    from webhook.devcluster.realnodes.network import POD_CIDR

    try:
        enforcer = netpol_bin_dir()
    except ClusterError as exc:
        fail_or_skip(str(exc))
    cluster = installed_cluster
    client = app_image("netpol/client", L1)
    cluster.push(client)
    monitoring = cluster.new_namespace(opted_in=False, prefix="mon")
    other = cluster.new_namespace(opted_in=False, prefix="other")
    for namespace, name in ((monitoring, "prometheus"), (other, "intruder")):
        cluster.kubectl("-n", namespace, "apply", "-f", "-",
                        stdin=json.dumps(pod_manifest(name, cluster.ref(client))))
        cluster.wait_running(namespace, name)
    cluster.helm_run(
        "upgrade", RELEASE, str(repo_root() / "charts" / "layer-locality"), "--namespace",
        NAMESPACE, "--reuse-values",
        "--set", "networkPolicy.admissionFrom[0].ipBlock.cidr=0.0.0.0/0",
        "--set", f"networkPolicy.admissionFrom[0].ipBlock.except[0]={POD_CIDR}",
        "--set", "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels"
                 f".kubernetes\\.io/metadata\\.name={monitoring}",
        "--wait", "--timeout", "180s")
    policy = cluster.kubectl_json("-n", NAMESPACE, "get", "networkpolicy", RELEASE)
    assert policy["spec"]["ingress"][1]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": monitoring}
    ips = [p["status"]["podIP"] for p in cluster.kubectl_json(
        "-n", NAMESPACE, "get", "pods", "-l", "app.kubernetes.io/name=layer-locality")["items"]
        if p["status"].get("podIP")]
    assert ips
    # The policy alone holds nothing: no enforcer yet.
    assert reaches(cluster, other, "intruder", ips[0], 8443)
    netpol.start_enforcer(cluster.plane, enforcer)
    try:
        for ip in ips:
            assert reaches(cluster, monitoring, "prometheus", ip, 8081), ip
            assert not reaches(cluster, other, "intruder", ip, 8081), ip
            assert not reaches(cluster, other, "intruder", ip, 8443), ip
            assert not reaches(cluster, monitoring, "prometheus", ip, 8443), ip  # no pod
        # The API server is not a pod: its calls still come through the Service.
        cluster.hold(STREAMED, "node-1")
        namespace = cluster.new_namespace(opted_in=True)
        wait_for(lambda: dry_run_decision(cluster, namespace, STREAMED) is not None,
                 STATUS_TIMEOUT, "a decision with the policy enforced")
        log = cluster.plane.log(netpol.NETPOL).read_text(errors="replace")
        assert 'verdict="drop"' in log and 'verdict="accept"' in log
    finally:
        netpol.stop_enforcer(cluster.plane)
    assert reaches(cluster, other, "intruder", ips[0], 8443)  # the rule is gone with it
    for namespace in (monitoring, other):
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def test_client_certificates_turned_on_under_a_stream(installed_cluster: RealCluster) -> None:
    """`clientAuth` on, by `helm upgrade` under a stream of pod creations, and the serving
    certificate renewed by the same upgrade (renewDays past its remaining days; the CA
    stays): the real API server presents its webhook client certificate (the local control
    plane's AdmissionConfiguration) to the in-cluster Service, the new pods require it and
    serve the new certificate, and no creation fails or goes unpatched while the pods roll
    (a refused call would be unpatched)."""
    cluster = installed_cluster
    cluster.hold(STREAMED, "node-1")
    namespace = cluster.new_namespace(opted_in=True)
    wait_for(lambda: dry_run_decision(cluster, namespace, STREAMED) is not None,
             STATUS_TIMEOUT, "decisions for the streamed image")
    def serving() -> tuple[str, str]:
        secret = cluster.kubectl_json("-n", NAMESPACE, "get", "secret", f"{RELEASE}-tls")
        return secret["data"]["tls.crt"], secret["data"]["ca.crt"]

    before = serving()
    with Stream(cluster, namespace) as stream:
        time.sleep(2)
        cluster.helm_run("upgrade", RELEASE, str(repo_root() / "charts" / "layer-locality"),
                         "--namespace", NAMESPACE, "--reuse-values",
                         "--set", "clientAuth.enabled=true",
                         "--set-file", f"clientAuth.caBundle={cluster.plane.pki.ca_cert}",
                         "--set", "certificates.selfSigned.renewDays=400",
                         "--wait", "--timeout", "180s")
        cluster.kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{RELEASE}",
                        "--timeout=180s")
        time.sleep(8)  # old pods drained: the stream goes on against the new ones only
    args = cluster.kubectl_json("-n", NAMESPACE, "get", "deployment", RELEASE)[
        "spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--client-ca=/etc/layer-locality/client-ca/ca.crt" in args
    after = serving()
    assert after[0] != before[0] and after[1] == before[1], "a new certificate, the same CA"
    assert stream.outcomes["failed"] == 0, stream.errors[:5]
    assert stream.outcomes["unpatched"] == 0, stream.outcomes
    assert stream.outcomes["patched"] > 50, stream.outcomes
    print(f"client certificates turned on under a stream: {dict(stream.outcomes)}")
    cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def test_helm_uninstall_leaves_only_the_kept_crd(installed_cluster: RealCluster) -> None:
    cluster = installed_cluster
    cluster.helm_run("uninstall", RELEASE, "--namespace", NAMESPACE, "--wait",
                     "--timeout", "120s")
    selector = f"app.kubernetes.io/instance={RELEASE}"
    kinds = ("deployments,daemonsets,services,serviceaccounts,configmaps,secrets,roles,"
             "rolebindings,poddisruptionbudgets,networkpolicies")
    left = cluster.kubectl_json("get", kinds, "-A", "-l", selector)["items"]
    assert left == []
    cluster_wide = cluster.kubectl_json(
        "get", "mutatingwebhookconfigurations,clusterroles,clusterrolebindings,"
        "validatingadmissionpolicies,validatingadmissionpolicybindings,"
        "customresourcedefinitions", "-l", selector)["items"]
    assert [(o["kind"], o["metadata"]["name"]) for o in cluster_wide] == [
        ("CustomResourceDefinition", "nodelayers.layer-locality.io")]
    wait_for(lambda: not cluster.kubectl_json("get", "pods", "-A", "-l", selector)["items"],
             120, "the release's pods gone")


def test_make_deploy_self_signed_rolls_out(installed_cluster: RealCluster) -> None:
    """After the uninstall above: the kustomize path, `make deploy`, with the same image."""
    cluster = installed_cluster
    kubectl = f"{cluster.kube_bin / 'kubectl'} --kubeconfig {cluster.plane.kubeconfig}"
    image = f"{image_repository()}:{version()}"
    env = {**os.environ, "KUBECTL": kubectl}
    done = subprocess.run(
        # -o: the virtualenv is made already (and the namespace has no way to an index).
        [*entering(cluster), "make", "--no-print-directory", "-o", ".venv/.installed",
         "deploy", "OVERLAY=self-signed",
         f"IMG={image}", f"KUBECTL={kubectl}"], capture_output=True, text=True,
        cwd=repo_root(), env=env, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "successfully rolled out" in done.stdout
    subprocess.run([*entering(cluster), "make", "--no-print-directory", "-o", ".venv/.installed",
                    "undeploy",
                    "OVERLAY=self-signed", f"IMG={image}", f"KUBECTL={kubectl}"],
                   capture_output=True, text=True, cwd=repo_root(), env=env, timeout=300,
                   check=False)
