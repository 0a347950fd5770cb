"""`layer-locality agent`: wiring of the runtime source, the Node lookup, the publisher, the
labeler, the Lease renewer and the loop. webhook/cli/__init__.py parses the flags
(options.py) and calls `run_agent`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson

from webhook.config import ConfigError
from webhook.core.layers import Platform
from webhook.inventory.agentlease import AGENT_NAMESPACE

from .containerd import ContainerdSource
from .kube import ApiError, KubeApi, node_labels
from .labels import NodeLabeler, remove_layer_labels
from .lease import LeaseRenewer, LeaseSettings
from .loop import Agent, AgentSettings
from .metrics import AgentMetrics
from .nodelayers import NodeRef
from .options import AgentOptions
from .publish import Publisher
from .source import host_platform, node_platform

log = logging.getLogger(__name__)
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _api_client(kubeconfig: str | None, env: Mapping[str, str]) -> Any:
    from kubernetes import client, config

    kubeconfig = kubeconfig or (env.get("KUBECONFIG") or "").split(os.pathsep)[0] or None
    if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in env:
        configuration = client.Configuration()
        config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration)
        return client.ApiClient(configuration)
    return config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=kubeconfig)


def lease_namespace(given: str | None, env: Mapping[str, str],
                    account_file: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
    """--lease-namespace, else the pod's namespace (env POD_NAMESPACE from the downward API,
    else the service account's namespace file), else the shipped agent namespace."""
    if given:
        return given
    if env.get("POD_NAMESPACE", "").strip():
        return env["POD_NAMESPACE"].strip()
    with contextlib.suppress(OSError):
        if text := account_file.read_text().strip():
            return text
    return AGENT_NAMESPACE


def _node(api: KubeApi, name: str) -> tuple[NodeRef, Platform | None, dict[str, str] | None]:
    """The Node's uid (for the ownerReferences), platform and labels; without them: no owner,
    the host's platform, labels read before the first patch (logged once)."""
    try:
        node = api.read_node(name)
    except ApiError as exc:
        log.warning("cannot read node %s (%s): no ownerReference, host platform", name, exc)
        return NodeRef(name), None, None
    uid = (node.get("metadata") or {}).get("uid")
    return NodeRef(name, uid if isinstance(uid, str) and uid else None), node_platform(node), \
        node_labels(node)


def run_agent(options: AgentOptions, env: Mapping[str, str]) -> int:
    node_name = options.node_name
    if not node_name:
        raise ConfigError("agent: --node-name (or env NODE_NAME) is required")
    if options.remove_labels:
        return _remove_labels(KubeApi(_api_client(options.kubeconfig, env)), node_name)
    settings = AgentSettings(resync_seconds=options.resync_seconds)
    source = ContainerdSource(options.containerd_socket, options.containerd_namespace)
    metrics = AgentMetrics()
    node, platform, publish = NodeRef(node_name), None, None
    labeler = lease = None
    if not options.print:
        api_client = _api_client(options.kubeconfig, env)
        kube = KubeApi(api_client)
        node, platform, labels = _node(kube, node_name)
        labeler = NodeLabeler(kube, node_name, options.label_rule, labels, metrics)
        if not options.once:
            lease = LeaseRenewer(kube, node, LeaseSettings(
                lease_namespace(options.lease_namespace, env), options.lease_seconds), metrics)
        from kubernetes import client

        # While the Lease is not held (refused, not yet written) or with no Lease at all
        # (--once), the object's heartbeat keeps the node fresh for the webhook, as before.
        held = lease
        publisher = Publisher(client.CustomObjectsApi(api_client),
                              refresh=lambda: held is None or not held.held)

        async def publish(body: dict[str, Any]) -> bool:
            return await asyncio.to_thread(publisher.publish, body)

    agent = Agent(source, node, platform or host_platform(), settings, publish, metrics,
                  labeler, lease)
    return asyncio.run(_main(agent, options))


def _remove_labels(api: KubeApi, node: str) -> int:
    try:
        removed = remove_layer_labels(api, node)
    except ApiError as exc:
        print(f"layer-locality agent: {exc}", file=sys.stderr)
        return 1
    print(f"node {node}: {removed} layer labels removed", file=sys.stderr)
    return 0


async def _main(agent: Agent, options: AgentOptions) -> int:
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(agent.source.close)
        if options.listen:
            from .status import serving

            host, _, port = options.listen.rpartition(":")
            await stack.enter_async_context(serving(agent, host or "0.0.0.0", int(port)))
        if options.once:
            done = await agent.read_when_available()
            if options.print:
                sys.stdout.buffer.write(
                    orjson.dumps(done.body, option=orjson.OPT_INDENT_2) + b"\n")
                return 0
            await agent.publish_until_done(done)
            return 0
        await agent.run()
    return 0
