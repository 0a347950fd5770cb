"""kube-proxy, once for the whole cluster: the nodes share one network namespace, so one
iptables ruleset (kube-proxy's, in that namespace) serves every node's pods and the control
plane. Services therefore work through real kube-proxy rules, not the API server's endpoint
routing; the API server reaches a webhook's Service through its ClusterIP like any client.

It leaves the machine alone: conntrack limits and timeouts at 0 (unchanged), no OOM score,
metrics and health on 127.0.0.1 of the namespace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from webhook.devcluster.realnodes.network import POD_CIDR


def configuration(kubeconfig: Path, hostname: str, metrics_port: int,
                  healthz_port: int) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
        "mode": "iptables", "clusterCIDR": POD_CIDR, "hostnameOverride": hostname,
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "metricsBindAddress": f"127.0.0.1:{metrics_port}",
        "healthzBindAddress": f"127.0.0.1:{healthz_port}",
        "oomScoreAdj": 0,
        "conntrack": {"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s",
                      "tcpCloseWaitTimeout": "0s"},
    }
