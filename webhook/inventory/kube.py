"""The official client configured for the cluster: in-cluster config, else a kubeconfig file."""

from __future__ import annotations

from typing import Any

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from webhook.inventory.corelists import CoreLists


class ClusterConfigError(ValueError):
    """No usable cluster configuration (not in a pod, no readable kubeconfig)."""


PROBE_SECONDS = 5.0


def api_client(kubeconfig: str | None, in_cluster: bool, retries: bool = True) -> Any:
    """The official client's ApiClient: `in_cluster` (the pod's service account) wins;
    otherwise `kubeconfig` (None: the client's default, ~/.kube/config). `retries=False`: a
    failed request fails at once (no urllib3 retries, no warning per retry)."""
    try:
        configuration = client.Configuration()
        if in_cluster:
            config.load_incluster_config(  # type: ignore[no-untyped-call]
                client_configuration=configuration
            )
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=configuration
            )
        if not retries:
            configuration.retries = False
        return client.ApiClient(configuration)
    except (ConfigException, OSError) as exc:
        where = "in-cluster config" if in_cluster else f"kubeconfig {kubeconfig or '(default)'}"
        raise ClusterConfigError(
            f"cannot load cluster configuration from {where}: {exc}; for a static inventory "
            "give --demo or --nodes FILE"
        ) from exc


def core_api(kubeconfig: str | None, in_cluster: bool, retries: bool = True) -> Any:
    """A CoreV1Api (every core endpoint: for commands that need more than the lists)."""
    return client.CoreV1Api(api_client(kubeconfig, in_cluster, retries))


def core_lists(kubeconfig: str | None, in_cluster: bool, retries: bool = True) -> CoreLists:
    """The lists the live inventory reads (corelists.py: without CoreV1Api's import)."""
    return CoreLists(api_client(kubeconfig, in_cluster, retries))


def probe(kubeconfig: str | None, in_cluster: bool, timeout: float = PROBE_SECONDS) -> None:
    """One request, no retries, at most `timeout` seconds per step: can the nodes be listed?
    ClusterConfigError names the server and the reason (unreachable, silent, refused
    credentials, not allowed), for commands that must fail fast rather than wait for a sync."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    api = core_lists(kubeconfig, in_cluster, retries=False)
    server = api.api_client.configuration.host
    try:
        # Not decoded: the answer is only a sign of life (and the client's models refuse
        # fields a stand-in leaves out).
        api.list_node(limit=1, _request_timeout=timeout, _preload_content=False).release_conn()
    except ApiException as exc:
        raise ClusterConfigError(
            f"the API server {server} answered {exc.status} {exc.reason} to a list of nodes"
        ) from exc
    except (HTTPError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc
        raise ClusterConfigError(
            f"cannot reach the API server {server} within {timeout:g}s: {reason}"
        ) from exc
    finally:
        api.api_client.close()
