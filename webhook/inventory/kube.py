"""A CoreV1Api from the official client: in-cluster config, else a kubeconfig file."""

from __future__ import annotations

from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException


class ClusterConfigError(ValueError):
    """No usable cluster configuration (not in a pod, no readable kubeconfig)."""


def core_api(kubeconfig: str | None, in_cluster: bool) -> Any:
    """`in_cluster` (the pod's service account) wins; otherwise `kubeconfig` (None: the
    client's default, ~/.kube/config)."""
    try:
        if in_cluster:
            configuration = client.Configuration()
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
            return client.CoreV1Api(client.ApiClient(configuration))
        api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig
        )
        return client.CoreV1Api(api_client)
    except (ConfigException, OSError) as exc:
        where = "in-cluster config" if in_cluster else f"kubeconfig {kubeconfig or '(default)'}"
        raise ClusterConfigError(
            f"cannot load cluster configuration from {where}: {exc}; for a static inventory "
            "give --demo or --nodes FILE"
        ) from exc
