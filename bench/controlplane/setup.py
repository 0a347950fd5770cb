"""The control-plane benchmark's run and its cluster (bench.controlplane): the run's state
(Bench); the cluster up with its fake nodes; the agents' objects (or the agent's component
removed), the running pods and the flow schemas; the webhook replicas' first start behind the
balancer; and the end of it all."""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import time
from pathlib import Path
from typing import Any

import orjson

from bench.controlplane import placement
from bench.controlplane.apiclient import Api
from bench.controlplane.balancer import Balancer
from bench.controlplane.node_agents import AgentSide
from bench.controlplane.objects import flow_schema, node_items, running_pod
from bench.controlplane.standin_agents import AGENT_ACCOUNT
from tests.kit import workload
from webhook.inventory.agentlease import AGENT_NAMESPACE

ROOT = Path(__file__).resolve().parents[2]
FLOW_SCHEMAS = {"ll-webhook": ("layer-locality", "layer-locality"),
                "ll-agent": (AGENT_NAMESPACE, AGENT_ACCOUNT)}  # (namespace, SA)


def kube_bin() -> Path:
    out = subprocess.run([str(ROOT / "hack/kube/build.sh")], check=True, capture_output=True,
                         text=True).stdout.strip().splitlines()
    return Path(out[-1])


class Bench:
    def __init__(self, args: argparse.Namespace, root: Path) -> None:
        self.args = args
        self.root = root
        self.world = workload.build_world()
        self.cluster: Any = None
        self.balancer: Balancer | None = None  # once the replicas first start
        self.replica_ports: list[int] = []
        self.replica_args: tuple[str, ...] = ()  # beyond the shipped settings (a variant's)
        # Per Deployment, the terms and decision one opted-in review gave its pods: "baked"
        # rounds write them into the template of a plain namespace (no webhook call).
        self.baked: dict[str, tuple[list[Any], str]] = {}
        self.agent_side: AgentSide | None = None  # the stand-in agents (None: --no-agent)
        self.views: dict[str, placement.NodeView] = {}  # what binds are judged against
        self.result: dict[str, Any] = {"settings": {k: v for k, v in vars(args).items()
                                                    if isinstance(v, (int, float, str, list))}}

    def up(self) -> None:
        from webhook.devcluster import cluster as cluster_mod

        args = self.args
        nodes_file = self.root / "nodes.json"
        catalog = self.root / "catalog.json"
        catalog.write_bytes(workload.catalog_bytes(self.world))
        self.items: list[dict[str, Any]] = node_items(self.world, args.nodes)
        nodes_file.write_bytes(orjson.dumps({"apiVersion": "v1", "kind": "NodeList",
                                             "items": self.items}))
        bin_dir = kube_bin()
        started = time.monotonic()
        loaded = cluster_mod.load_node_items(nodes_file)
        load_s = time.monotonic() - started
        webhook_args = ["--replicas", "2", *args.webhook_arg]
        self.cluster = cluster_mod.up(
            self.root / "cluster", bin_dir, loaded, catalog=catalog, webhook_args=webhook_args,
            start_webhook=False, percentage_of_nodes_to_score=args.percentage_of_nodes_to_score,
            client_qps=args.client_qps)
        up_s = time.monotonic() - started
        print(f"cluster up: {len(loaded)} nodes in {up_s:.1f} s (NodeList read {load_s:.1f} s)",
              flush=True)
        self.result["cluster_up"] = {"nodes": len(loaded), "seconds": up_s, "load_seconds": load_s,
                                     "nodelist_mb": nodes_file.stat().st_size / 1e6}

    async def populate(self, api: Api) -> None:
        """The agents' objects (or the component removed: --no-agent), then the running
        pods; the flow schemas first, so every request of theirs is counted by identity."""
        args = self.args
        for name, (namespace, sa) in FLOW_SCHEMAS.items():
            await api.request("POST", "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas",
                              flow_schema(name, namespace, sa), ok=(201, 409))
        uids = await node_uids(api)
        side = AgentSide(self.cluster, self.root, self.world, self.items, args.lease_seconds)
        out: dict[str, Any] = {}
        if args.agent:
            self.agent_side = side
            out["agent_component"] = await asyncio.to_thread(side.ensure_component)
            out |= await side.create_nodelayers(api, uids)
            out["agents"] = await side.start(api, uids)
        else:
            out["agent_component"] = await asyncio.to_thread(side.remove_component)
        await api.request("POST", "/api/v1/namespaces",
                          {"metadata": {"name": "running"}})
        await default_service_account(api, "running")
        started = time.monotonic()
        bodies = (("/api/v1/namespaces/running/pods",
                   running_pod(k, self.items[k % len(self.items)]))
                  for k in range(args.running_pods))
        n = await api.create_all(bodies, concurrency=48)
        pods_s = time.monotonic() - started
        print(f"running pods: {n} in {pods_s:.1f} s ({n / max(pods_s, 1e-9):.0f}/s)", flush=True)
        self.result["populate"] = out | {"nodelayers": len(self.nodelayers),
                                         "running_pods": n, "running_pods_seconds": pods_s}
        self.views = placement.node_views(
            self.items, {image.ref: image for image in self.world.images},
            side.labels())

    @property
    def nodelayers(self) -> list[dict[str, Any]]:
        return self.agent_side.nodelayers if self.agent_side is not None else []

    def start_webhooks(self) -> None:
        from webhook.devcluster import cluster as cluster_mod
        from webhook.devcluster.processes import free_port

        cluster_mod.WEBHOOK_READY_TIMEOUT = 600.0
        self.replica_ports = [free_port(), free_port()]
        ready = []
        for i, port in enumerate(self.replica_ports):
            started = time.monotonic()
            self.cluster.start_webhook_replica(i, port)
            ready.append(time.monotonic() - started)
        self.result["first_ready_seconds"] = ready
        self.balancer = Balancer(self.cluster, self.root, self.result)
        self.balancer.start_proxy(self.replica_ports)
        print(f"webhook replicas ready in {', '.join(f'{s:.1f}' for s in ready)} s", flush=True)

    def close(self) -> None:
        if self.agent_side is not None:
            final = self.agent_side.stop()
            if final is not None:
                self.result["renewer_final"] = final
        if self.balancer is not None:
            self.balancer.stop_proxy()
        if self.cluster is not None:
            self.cluster.down()


async def node_uids(api: Api) -> dict[str, str]:
    listing = await api.request("GET", "/api/v1/nodes", headers={
        "Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"})
    return {item["metadata"]["name"]: item["metadata"]["uid"] for item in listing["items"]}


async def default_service_account(api: Api, namespace: str) -> None:
    """Pods need the namespace's default ServiceAccount (the controller makes it)."""
    for _ in range(300):
        try:
            await api.request("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
            return
        except Exception:
            await asyncio.sleep(0.1)
    raise RuntimeError(f"no default ServiceAccount in {namespace}")

