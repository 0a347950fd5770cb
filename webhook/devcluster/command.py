"""`layer-locality cluster up|down|status`: the local control plane for development
(`make cluster`, `make cluster-down`).

Argument parsing and dispatch only (argparse; the one module of devcluster/ in the container
image): each action imports its work when it runs, `up` from cluster_up.py, the others from
cluster_actions.py and realnodes/throttle.py.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path

DEFAULT_DIR = Path(".cluster")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = sub.add_parser(
        "cluster", help="a local control plane (etcd, kube-apiserver, kube-scheduler, "
                        "kube-controller-manager) with fake nodes and the webhook on the host")
    actions = cluster.add_subparsers(required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start it, print the kubeconfig path and next commands")
    _dir_option(up)
    up.add_argument("--bin-dir", type=Path, required=True,
                    help="the pinned binaries (the directory hack/kube/build.sh prints)")
    up.add_argument("--nodes", type=Path, default=None,
                    help="NodeList to create as fake nodes (default: the demo inventory)")
    up.add_argument("--catalog", type=Path, default=None,
                    help="layer catalog the webhook reads (default: the demo catalog)")
    up.add_argument("--apiserver-port", type=int, default=None,
                    help="kube-apiserver's port on 127.0.0.1 (default: a free one)")
    up.add_argument("--webhook-port", type=int, default=None,
                    help="the webhook's port on 127.0.0.1 (default: a free one)")
    up.add_argument("--install", choices=("kustomize", "helm", "in-cluster", "none"),
                    default="kustomize",
                    help="install the project's objects from the kustomize manifests (default) "
                         "or from the Helm chart (charts/layer-locality), both for the webhook "
                         "on the host; in-cluster (with --kubelets): the image pushed to the "
                         "cluster's registry and the chart installed with its defaults, the "
                         "webhook and the node agent running as pods; none: nothing")
    up.add_argument("--image-layout", type=Path, default=None,
                    help="with --install in-cluster: the image as an OCI layout (default: "
                         "$LAYER_LOCALITY_IMAGE_LAYOUT, else what hack/image/build.sh prints)")
    up.add_argument("--helm-bin", type=Path, default=None,
                    help="with --install helm: the directory holding helm (default: "
                         "$LAYER_LOCALITY_HELM_BIN, else what hack/helm/build.sh prints)")
    up.add_argument("--kubelets", type=int, default=0, metavar="N",
                    help="also start N real nodes (kubelet, containerd v2, CNI, kube-proxy and "
                         "a registry) in a network namespace of the cluster's own; needs root "
                         "(docs/local-cluster.md). With N > 0 no fake nodes are made unless "
                         "--nodes names them")
    up.add_argument("--node-bin", type=Path, default=None,
                    help="with --kubelets: containerd, its shim, the CNI plugins and pause "
                         "(default: $LAYER_LOCALITY_NODE_BIN, else what hack/node/build.sh "
                         "prints)")
    up.add_argument("--registry-bandwidth", type=bandwidth, default=None, metavar="SIZE",
                    help="with --kubelets: limit each node's downloads from the registry to "
                         "SIZE bytes per second (e.g. 8MiB), through a proxy on the node IPs "
                         "(default: no limit)")
    up.add_argument("--percentage-of-nodes-to-score", type=int, default=None, metavar="N",
                    help="kube-scheduler's percentageOfNodesToScore, 0-100 (default: its own, "
                         "adaptive: about 10 %% of the nodes at 5,000); 100 scores every "
                         "feasible node, as docs/deploy.md recommends for this webhook")
    up.add_argument("--client-qps", type=int, default=None, metavar="N",
                    help="kube-controller-manager's and kube-scheduler's API client QPS "
                         "(burst twice it; default: theirs, 20 and 50, which set how fast a "
                         "ReplicaSet creates pods)")
    up.add_argument("--seed-demo", action="store_true",
                    help="with --kubelets 2 or more: build two images sharing a base, run one "
                         "on node-1 and the other on node-2, and print a dry run that shows "
                         "the webhook's layer-aware preference (`make cluster NODES=N` does)")
    up.add_argument("--client-auth", action="store_true",
                    help="the webhook answers only the API server's client certificate "
                         "(`serve --client-ca` with the cluster CA; the chart's clientAuth "
                         "in-cluster): kube-apiserver always presents one to webhooks here")
    # Internal: the holder of the namespace this process was re-run in (see cluster_up.py).
    up.add_argument("--netns-holder", type=int, default=None, help=argparse.SUPPRESS)
    up.set_defaults(run=_up)
    # Internal: started by `up` with real and fake nodes (devcluster/heartbeat.py).
    heartbeat = actions.add_parser("heartbeat")
    _dir_option(heartbeat)
    heartbeat.set_defaults(run=_heartbeat)
    # Internal: started by `up --registry-bandwidth` in front of the registry
    # (realnodes/throttle.py).
    throttle = actions.add_parser("throttle")
    throttle.add_argument("--listen", action="append", required=True, metavar="IP:PORT")
    throttle.add_argument("--upstream", required=True, metavar="IP:PORT")
    throttle.add_argument("--rate", type=bandwidth, required=True, metavar="BYTES_PER_S")
    throttle.add_argument("--burst", type=bandwidth, default=None, metavar="BYTES")
    throttle.set_defaults(run=_throttle)
    execute = actions.add_parser(
        "exec", help="run a command inside the cluster's network namespace (real nodes), "
                     "with KUBECONFIG set: layer-locality cluster exec -- kubectl get nodes")
    _dir_option(execute)
    execute.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND")
    execute.set_defaults(run=_exec)
    down = actions.add_parser("down", help="stop every process `up` started (by pid)")
    _dir_option(down)
    down.set_defaults(run=_down)
    status = actions.add_parser("status", help="which processes run, and where")
    _dir_option(status)
    status.set_defaults(run=_status)


def _dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                        help="state, kubeconfig, certificates and logs (default: .cluster)")


def bandwidth(text: str) -> int:
    """A positive size (`8MiB`, `500000`): bytes per second for --registry-bandwidth."""
    from webhook.value_parsers import parse_size

    try:
        value = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def _up(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.devcluster.cluster_up import up_command

    return up_command(args, env)


def _heartbeat(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.devcluster.cluster_actions import heartbeat_command

    return heartbeat_command(args, env)


def _throttle(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.devcluster.realnodes.throttle import main

    return main(args.listen, args.upstream, args.rate, args.burst)


def _exec(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.devcluster.cluster_actions import exec_command

    return exec_command(args, env)


def _down(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.devcluster.cluster_actions import down_command

    return down_command(args, env)


def _status(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.devcluster.cluster_actions import status_command

    return status_command(args, env)
