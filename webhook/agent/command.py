"""`layer-locality agent`: wiring of the runtime source, the Node lookup, the publisher and the
loop. webhook/cli/__init__.py parses the flags and calls `run_agent`."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

import orjson

from webhook.config import ConfigError
from webhook.core.layers import Platform

from .containerd import ContainerdSource
from .loop import Agent, AgentSettings
from .nodelayers import NodeRef
from .publish import Publisher
from .source import host_platform, node_platform

log = logging.getLogger(__name__)


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


def _node(api_client: Any, name: str) -> tuple[NodeRef, Platform | None]:
    """The Node's uid (for the ownerReference) and platform; without them: no owner, the
    host's platform (logged once)."""
    from kubernetes import client

    try:
        node = client.CoreV1Api(api_client).read_node(name)
    except Exception as exc:
        log.warning("cannot read node %s (%s): no ownerReference, host platform", name, exc)
        return NodeRef(name), None
    raw = api_client.sanitize_for_serialization(node)
    return NodeRef(name, raw.get("metadata", {}).get("uid")), node_platform(raw)


def run_agent(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    node_name = args.node_name or env.get("NODE_NAME")
    if not node_name:
        raise ConfigError("agent: --node-name (or env NODE_NAME) is required")
    if args.resync_seconds < 1:
        raise ConfigError("agent: --resync-seconds must be at least 1")
    settings = AgentSettings(resync_seconds=args.resync_seconds)
    source = ContainerdSource(args.containerd_socket, args.containerd_namespace)
    node, platform, publish = NodeRef(node_name), None, None
    if not args.print:
        api_client = _api_client(args.kubeconfig, env)
        node, platform = _node(api_client, node_name)
        from kubernetes import client

        publisher = Publisher(client.CustomObjectsApi(api_client))

        async def publish(body: dict[str, Any]) -> bool:
            return await asyncio.to_thread(publisher.publish, body)

    agent = Agent(source, node, platform or host_platform(), settings,
                  None if args.print else publish)
    return asyncio.run(_main(agent, args))


async def _main(agent: Agent, args: argparse.Namespace) -> int:
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(agent.source.close)
        if args.listen:
            from .status import serving

            host, _, port = args.listen.rpartition(":")
            await stack.enter_async_context(serving(agent, host or "0.0.0.0", int(port)))
        if args.once:
            built = await agent.build_when_available()
            if args.print:
                sys.stdout.buffer.write(orjson.dumps(built, option=orjson.OPT_INDENT_2) + b"\n")
                return 0
            await agent.publish_until_done(built)
            return 0
        await agent.run()
    return 0
