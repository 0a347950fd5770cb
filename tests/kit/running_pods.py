"""Running pods as the API server returns them, deterministic and cheap to generate again.

Pod `k` of a cluster with `nodes` nodes runs on node `k % nodes` (30 pods per node at
30 x nodes pods) and belongs to ReplicaSet `k // REPLICAS` (a Deployment's, in one of 40
namespaces). Each carries what real pods carry, so the watch decodes real sizes (4-8 KB of
JSON): generateName names, a controller ownerReference, labels with the pod-template-hash,
annotations (one in three with the webhook's decision and its preferred terms), 1-3
containers with images of the world, resources, env, volumeMounts, default tolerations,
status Running with conditions, containerStatuses (imageID, containerID, state), podIPs and
managedFields. `generation` replaces pod `k` by a new one (new name and uid) after a delete.

The per-ReplicaSet parts (spec, managedFields) are built once and shared between its pods:
the stand-in API server (tests/kit/apiserver_process.py) serves 600,000 pods by regenerating pages.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from typing import Any

import orjson

from tests.kit.workload import World, node_name, short_ref
from webhook.core.layers import ImageLayers

REPLICAS = 10  # pods per ReplicaSet
NAMESPACES = 40
CREATED = "2025-01-01T00:00:00Z"
STARTED = "2025-01-01T00:00:07Z"
_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # what the API server's generateName suffixes use


def _suffix(n: int, length: int = 5) -> str:
    out = []
    for _ in range(length):
        n, r = divmod(n, len(_ALPHABET))
        out.append(_ALPHABET[r])
    return "".join(out)


def _hex(label: str, length: int) -> str:
    return hashlib.sha256(label.encode()).hexdigest()[:length]


def _uid(kind: int, k: int, generation: int) -> str:
    """A UUID-shaped uid (36 characters, as the API server's), unique per (kind, k, generation)."""
    h = f"{kind:04x}{k:012x}{generation:08x}{(k * 2654435761) & 0xFFFFFFFF:08x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"


def _fields(*paths: str) -> dict[str, Any]:
    """A managedFields fieldsV1 tree: `f:` keys down each dotted path."""
    tree: dict[str, Any] = {}
    for path in paths:
        node = tree
        for part in path.split("."):
            node = node.setdefault(part, {})
    return tree


_CONTROLLER_FIELDS = _fields(
    "f:metadata.f:generateName", "f:metadata.f:labels.f:app", "f:metadata.f:labels.f:team",
    "f:metadata.f:labels.f:pod-template-hash",
    "f:metadata.f:annotations.f:kubectl.kubernetes.io/restartedAt",
    "f:metadata.f:ownerReferences.k:{\"uid\":\"*\"}",
    "f:spec.f:containers.k:{\"name\":\"app\"}.f:env.k:{\"name\":\"LOG_LEVEL\"}.f:value",
    "f:spec.f:containers.k:{\"name\":\"app\"}.f:image",
    "f:spec.f:containers.k:{\"name\":\"app\"}.f:imagePullPolicy",
    "f:spec.f:containers.k:{\"name\":\"app\"}.f:ports.k:{\"containerPort\":8080,\"protocol\":\"TCP\"}.f:name",
    "f:spec.f:containers.k:{\"name\":\"app\"}.f:resources.f:limits.f:memory",
    "f:spec.f:containers.k:{\"name\":\"app\"}.f:resources.f:requests.f:cpu",
    "f:spec.f:containers.k:{\"name\":\"app\"}.f:resources.f:requests.f:memory",
    "f:spec.f:containers.k:{\"name\":\"app\"}.f:terminationMessagePath",
    "f:spec.f:containers.k:{\"name\":\"app\"}.f:volumeMounts.k:{\"mountPath\":\"/etc/app\"}.f:name",
    "f:spec.f:dnsPolicy", "f:spec.f:enableServiceLinks", "f:spec.f:restartPolicy",
    "f:spec.f:schedulerName", "f:spec.f:securityContext", "f:spec.f:terminationGracePeriodSeconds",
    "f:spec.f:volumes.k:{\"name\":\"config\"}.f:configMap.f:name",
)
_KUBELET_FIELDS = _fields(
    "f:status.f:conditions.k:{\"type\":\"ContainersReady\"}.f:lastTransitionTime",
    "f:status.f:conditions.k:{\"type\":\"ContainersReady\"}.f:status",
    "f:status.f:conditions.k:{\"type\":\"Initialized\"}.f:lastTransitionTime",
    "f:status.f:conditions.k:{\"type\":\"PodReadyToStartContainers\"}.f:status",
    "f:status.f:conditions.k:{\"type\":\"Ready\"}.f:lastTransitionTime",
    "f:status.f:conditions.k:{\"type\":\"Ready\"}.f:status",
    "f:status.f:containerStatuses", "f:status.f:hostIP", "f:status.f:hostIPs",
    "f:status.f:phase", "f:status.f:podIP", "f:status.f:podIPs.k:{\"ip\":\"*\"}.f:ip",
    "f:status.f:startTime",
)


_SHARED: dict[tuple[int, int], dict[str, Any]] = {}


def _replicaset(world: World, rs: int) -> dict[str, Any]:
    """What every pod of ReplicaSet `rs` shares: names, images, the pod template (cached:
    a World hashes slowly, so by its id)."""
    shared = _SHARED.get((id(world), rs))
    if shared is None:
        if len(_SHARED) > 100_000:
            _SHARED.clear()
        shared = _SHARED[(id(world), rs)] = _build_replicaset(world, rs)
    return shared


def images_of(world: World, k: int) -> list[ImageLayers]:
    """The images of pod `k`'s containers (its ReplicaSet's): an application image, and in
    two pods of three a sidecar from the real bases, in one of six a second one."""
    rs = k // REPLICAS
    images = [world.apps[rs % len(world.apps)]]
    if rs % 3 != 0:
        images.append(world.bases[rs % len(world.bases)])
    if rs % 6 == 1:
        images.append(world.bases[(rs * 7 + 3) % len(world.bases)])
    return images


def _build_replicaset(world: World, rs: int) -> dict[str, Any]:
    """What every pod of ReplicaSet `rs` shares: names, images, the pod template."""
    namespace = f"team-{rs % NAMESPACES}"
    app = f"svc-{rs}"
    template_hash = _hex(f"template {rs}", 10)
    found = images_of(world, rs * REPLICAS)
    images = [found[0].ref, *(short_ref(image.ref) for image in found[1:])]
    containers = [{
        "name": "app" if c == 0 else f"sidecar-{c}", "image": image,
        "imagePullPolicy": "IfNotPresent",
        "ports": [{"name": "http", "containerPort": 8080 + c, "protocol": "TCP"}],
        "env": [{"name": "LOG_LEVEL", "value": "info"},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1",
                                                                "fieldPath": "metadata.name"}}}],
        "resources": {"limits": {"memory": "512Mi"},
                      "requests": {"cpu": "250m", "memory": "256Mi"}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/app", "readOnly": True},
                         {"name": "kube-api-access", "readOnly": True,
                          "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount"}],
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    } for c, image in enumerate(images)]
    spec = {
        "volumes": [{"name": "config", "configMap": {"name": f"{app}-config",
                                                     "defaultMode": 420}},
                    {"name": "kube-api-access", "projected": {"defaultMode": 420, "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt",
                                       "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}}],
        "containers": containers, "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 30, "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default", "serviceAccount": "default",
        "securityContext": {}, "schedulerName": "default-scheduler",
        "tolerations": [{"key": f"node.kubernetes.io/{t}", "operator": "Exists",
                         "effect": "NoExecute", "tolerationSeconds": 300}
                        for t in ("not-ready", "unreachable")],
        "priority": 0, "enableServiceLinks": True, "preemptionPolicy": "PreemptLowerPriority",
    }
    managed = [
        {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
         "time": CREATED, "fieldsType": "FieldsV1", "fieldsV1": _CONTROLLER_FIELDS},
        {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "time": STARTED,
         "fieldsType": "FieldsV1", "fieldsV1": _KUBELET_FIELDS, "subresource": "status"},
    ]
    return {"namespace": namespace, "app": app, "hash": template_hash,
            "owner_uid": _uid(1, rs, 0), "images": images, "spec": spec, "managed": managed}


@lru_cache(maxsize=4096)
def _image_id(image: str) -> str:
    return f"{image.rsplit(':', 1)[0]}@sha256:{_hex(image, 64)}"


def decision_annotation(k: int, nodes: int) -> str:
    """What the webhook writes on a pod it patched (webhook/core/decide.py's format)."""
    top = [{"node": node_name((k + j) % nodes), "bytes": 300_000_000 - j * 1_000_000}
           for j in range(3)]
    return orjson.dumps({"v": 1, "id": f"d-{k:x}", "podBytes": 320_000_000,
                         "meanBytes": 120_000_000, "preferredNodes": 8, "top": top,
                         "terms": 2}).decode()


def running_pod(world: World, k: int, nodes: int, generation: int = 0,
                phase: str = "Running") -> dict[str, Any]:
    """Pod `k` (its `generation`-th incarnation), bound to node `k % nodes`, Running."""
    rs_index = k // REPLICAS
    rs = _replicaset(world, rs_index)
    node = node_name(k % nodes)
    name = f"{rs['app']}-{rs['hash']}-{_suffix(k * 131 + generation * 7919)}"
    uid = _uid(0, k, generation)
    annotations = {"kubectl.kubernetes.io/restartedAt": CREATED}
    spec = dict(rs["spec"], nodeName=node)
    if k % 3 == 0:
        annotations["layer-locality.io/decision"] = decision_annotation(k, nodes)
        spec["affinity"] = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": w, "preference": {"matchExpressions": [{
                "key": "kubernetes.io/hostname", "operator": "In",
                "values": [node_name((k + j) % nodes) for j in range(n)]}]}}
            for w, n in ((100, 2), (40, 6))]}}
    ip = f"10.{(k >> 16) & 255}.{(k >> 8) & 255}.{k & 255}"
    host = f"10.16.{(k % nodes) >> 8 & 255}.{k % nodes & 255}"
    statuses = [{
        "name": c["name"], "image": c["image"],
        "imageID": _image_id(c["image"]),
        "containerID": f"containerd://{k:024x}{generation:016x}{n:08x}{k * 2654435761:016x}"[
            :77],
        "ready": phase == "Running", "started": phase == "Running", "restartCount": 0,
        "state": ({"running": {"startedAt": STARTED}} if phase == "Running"
                  else {"waiting": {"reason": "ContainerCreating"}}),
    } for n, c in enumerate(rs["spec"]["containers"])]
    ready = "True" if phase == "Running" else "False"
    return {
        "kind": "Pod", "apiVersion": "v1",
        "metadata": {
            "name": name, "generateName": f"{rs['app']}-{rs['hash']}-",
            "namespace": rs["namespace"], "uid": uid, "resourceVersion": "1",
            "creationTimestamp": CREATED,
            "labels": {"app": rs["app"], "team": rs["namespace"],
                       "pod-template-hash": rs["hash"]},
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                 "name": f"{rs['app']}-{rs['hash']}", "uid": rs["owner_uid"],
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": rs["managed"],
        },
        "spec": spec,
        "status": {
            "phase": phase,
            "conditions": [{"type": t, "status": ready if t in ("Ready", "ContainersReady")
                            else "True", "lastProbeTime": None, "lastTransitionTime": STARTED}
                           for t in ("PodReadyToStartContainers", "Initialized", "Ready",
                                     "ContainersReady", "PodScheduled")],
            "hostIP": host, "hostIPs": [{"ip": host}], "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": CREATED, "containerStatuses": statuses, "qosClass": "Burstable",
        },
    }
