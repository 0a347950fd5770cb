"""NodeLayers on the real API server: the CRD schema as shipped, the node agent's
ValidatingAdmissionPolicy with real pod-bound ServiceAccount tokens, and what an agent writes
reaching the webhook's decisions.

The tokens are what the agent's pod gets: TokenRequest bound to a Pod that has `nodeName`
(`kubectl create token --bound-object-kind Pod`), so the API server itself puts the node's name
in the user info (`authentication.kubernetes.io/node-name`). No impersonation."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cluster_fixture import (
    catalog_entries,
    new_namespace,
    top_node,
    wait_for,
)
from tests.nodelayers_helpers import nodelayers_object
from webhook.core.layers import ImageLayers, Layer, Platform, PlatformLayers
from webhook.devcluster.cluster import LocalCluster
from webhook.devcluster.controlplane import write_kubeconfig

pytestmark = pytest.mark.controlplane
AGENT_NAMESPACE = "layer-locality-agent"
AGENT_ACCOUNT = "layer-locality-agent"
AMD64 = Platform.of("linux", "amd64")
# An image no node holds in its status: only a NodeLayers object can say where it is.
IMAGE = "docker.io/library/php:8.2-cli"
OWN_NODE = "cold-c1"
OTHER_NODE = "cold-c2"
GROUP, VERSION, PLURAL = "layer-locality.io", "v1alpha1", "nodelayers"


def image_layers(ref: str) -> ImageLayers:
    entry = catalog_entries()[ref]
    platform = entry["platforms"]["linux/amd64"]
    return ImageLayers(ref=ref, digest=entry["digest"], platforms={AMD64: PlatformLayers(
        digest=platform["digest"],
        layers=tuple(Layer(x["digest"], x["size"]) for x in platform["layers"]))})


def agent_kubeconfig(cluster: LocalCluster, node: str) -> tuple[Path, str]:
    """A kubeconfig with the token an agent pod on `node` would hold, and that pod's name
    (the token is valid while the pod exists)."""
    from kubernetes import client

    pod_name = f"agent-{node}-{uuid.uuid4().hex[:6]}"
    with cluster.api_client() as api:
        core: Any = client.CoreV1Api(api)
        core.create_namespaced_pod(AGENT_NAMESPACE, {
            "metadata": {"name": pod_name},
            "spec": {"serviceAccountName": AGENT_ACCOUNT, "nodeName": node,
                     "containers": [{"name": "agent", "image": "busybox:1.36"}]}})
    token = cluster.kubectl_run(["-n", AGENT_NAMESPACE, "create", "token", AGENT_ACCOUNT,
                                 "--bound-object-kind=Pod", f"--bound-object-name={pod_name}",
                                 "--duration=1h"]).strip()
    path = cluster.root / f"agent-{pod_name}.kubeconfig"
    write_kubeconfig(path, cluster.plane.server, cluster.plane.pki.ca_cert,
                     user={"token": token}, name="agent")
    return path, pod_name


def agent_api_client(cluster: LocalCluster, node: str) -> Any:
    """A kubernetes ApiClient with the token an agent pod on `node` would hold."""
    from kubernetes import config

    path, _ = agent_kubeconfig(cluster, node)
    return config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(path))


def agent_client(cluster: LocalCluster, node: str) -> Any:
    """A CustomObjectsApi with the token an agent pod on `node` would hold."""
    from kubernetes import client

    return client.CustomObjectsApi(agent_api_client(cluster, node))


def admin_objects(cluster: LocalCluster) -> Any:
    from kubernetes import client

    return client.CustomObjectsApi(cluster.api_client())


def test_the_crd_schema_rejects_bad_objects(local_cluster: LocalCluster) -> None:
    from kubernetes.client import ApiException

    good = nodelayers_object("schema-probe", [image_layers(IMAGE)], AMD64, time.time())
    bad_size: dict[str, Any] = json.loads(json.dumps(good))
    bad_size["spec"]["layers"][0]["size"] = "large"
    bad_digest = json.loads(json.dumps(good))
    bad_digest["spec"]["layers"][0]["digest"] = "md5:nothex"
    missing = json.loads(json.dumps(good))
    del missing["spec"]["layers"]
    packed = nodelayers_object("schema-probe", [image_layers(IMAGE)], AMD64, time.time(),
                               packed=True)
    both = json.loads(json.dumps(packed))
    both["spec"]["layers"] = good["spec"]["layers"]
    not_a_string = json.loads(json.dumps(packed))
    not_a_string["spec"]["packedLayers"] = 7
    objects = admin_objects(local_cluster)
    objects.create_cluster_custom_object(GROUP, VERSION, PLURAL, packed)  # the agent's form
    objects.delete_cluster_custom_object(GROUP, VERSION, PLURAL, "schema-probe")
    for broken in (bad_size, bad_digest, missing, both, not_a_string):
        with pytest.raises(ApiException) as raised:
            objects.create_cluster_custom_object(GROUP, VERSION, PLURAL, broken)
        assert raised.value.status == 422, raised.value.body


def test_an_agent_writes_only_its_own_node(local_cluster: LocalCluster) -> None:
    from kubernetes.client import ApiException

    objects = agent_client(local_cluster, OWN_NODE)
    own = nodelayers_object(OWN_NODE, [image_layers(IMAGE)], AMD64, time.time())
    objects.create_cluster_custom_object(GROUP, VERSION, PLURAL, own)
    try:
        for target in (OTHER_NODE, "no-such-node"):
            other = nodelayers_object(target, [image_layers(IMAGE)], AMD64, time.time())
            with pytest.raises(ApiException) as raised:
                objects.create_cluster_custom_object(GROUP, VERSION, PLURAL, other)
            assert raised.value.status == 403, raised.value.body
            assert f"may write only NodeLayers {OWN_NODE}" in str(raised.value.body)

        # What the agent wrote reaches the webhook's inventory and its decisions: php:8.2-cli is
        # in no node's status, so only the NodeLayers object can put OWN_NODE on top.
        namespace = new_namespace(local_cluster, opted_in=True)

        wait_for(lambda: top_node(local_cluster, namespace, IMAGE) == OWN_NODE, 30,
                 f"the webhook to prefer {OWN_NODE} from its NodeLayers")
    finally:
        admin_objects(local_cluster).delete_cluster_custom_object(GROUP, VERSION, PLURAL,
                                                                  OWN_NODE)
