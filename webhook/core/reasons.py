"""Why a review did what it did: the `result` and `reason` metric labels. Pure.

One enum for every reason the pipeline produces, so metric labels, logs, `explain` and the
docs cannot drift apart. Values are the metric label values (a contract for dashboards).
"""

from __future__ import annotations

from enum import StrEnum


class Result(StrEnum):
    PATCHED = "patched"
    SKIPPED = "skipped"
    ERROR = "error"


class Reason(StrEnum):
    # The request is out of scope.
    NOT_CREATE = "not_create"
    NOT_POD = "not_pod"
    NO_OBJECT = "no_object"
    # The pod must be left alone.
    NODE_NAME_SET = "node_name_set"
    DAEMONSET = "daemonset"
    MIRROR_POD = "mirror_pod"
    SKIP_LABEL = "skip_label"
    ALREADY_DECIDED = "already_decided"
    UNEXPECTED_TYPE = "unexpected_type"  # a field we would extend is not an object/list
    # The inventory is not a complete, current picture (syncing, relisting, watch down).
    NOT_SYNCED = "not_synced"
    # Nothing to express.
    NO_IMAGES = "no_images"
    UNRESOLVED = "unresolved"
    NO_PLATFORM = "no_platform"
    NO_NODES = "no_nodes"
    BELOW_THRESHOLD = "below_threshold"
    NO_PREFERENCE = "no_preference"
    PATCH_BUDGET = "patch_budget"  # not even one hostname fits in max_patch_bytes
    # In the holdout: annotated with what would have been preferred, not steered.
    HOLDOUT = "holdout"
    # A patched pod has no reason: the label is empty rather than repeating the result.
    NONE = ""


EXPLANATIONS: dict[Reason, str] = {
    Reason.NOT_CREATE: "not a CREATE request",
    Reason.NOT_POD: "not a v1 Pod",
    Reason.NO_OBJECT: "the request carries no object",
    Reason.NODE_NAME_SET: "spec.nodeName is set: the scheduler does not place this pod",
    Reason.DAEMONSET: "owned by a DaemonSet: it runs on a fixed node",
    Reason.MIRROR_POD: "a static (mirror) pod",
    Reason.SKIP_LABEL: "labelled layer-locality.io/skip=true",
    Reason.ALREADY_DECIDED: "already carries the decision annotation (reinvocation)",
    Reason.UNEXPECTED_TYPE: "a field the patch would extend has an unexpected type; "
                            "left as the user wrote it",
    Reason.NOT_SYNCED: "the webhook's inventory is not a complete, current picture yet "
                       "(listing nodes, pods, NodeLayers or Leases, again after a lost "
                       "watch, or its watch down): the pod is left to the scheduler",
    Reason.NO_IMAGES: "no valid image reference",
    Reason.UNRESOLVED: "no image's layers are known yet (resolving in the background)",
    Reason.NO_PLATFORM: "no image has a platform that a node runs",
    Reason.NO_NODES: "no node can take the pod (cordoned, tainted, or outside its "
                     "nodeSelector or required node affinity)",
    Reason.BELOW_THRESHOLD: "no node holds enough of the pod's bytes (below the floor)",
    Reason.NO_PREFERENCE: "every node would get the same weight",
    Reason.PATCH_BUDGET: "no term fits in --max-patch-bytes",
    Reason.HOLDOUT: "its workload is in the holdout: annotated, not steered, so that "
                    "`report` can measure what steering changes",
    Reason.NONE: "",
}
