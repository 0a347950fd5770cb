"""The node agent's side of bench.controlplane's cluster: its component (present, or removed
for `--no-agent`), a NodeLayers object per node written once, and a stand-in agent per node
(standin_agents.py): its layer labels, its Lease, and the renewals' process."""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.controlplane import standin_agents, standin_renewer
from bench.controlplane.apiclient import Api
from tests.kit import workload

ROOT = Path(__file__).resolve().parents[2]
COMPONENT = ROOT / "manifests/components/node-agent"
# Its documents but the DaemonSet: the stand-ins are the agents, and on fake nodes its 5,000
# pods would be bound, never start, and swell every pod watch.
DOCUMENTS = ("namespace.yaml", "serviceaccount.yaml", "rbac.yaml",
             "validatingadmissionpolicy.yaml")


def nodelayers_path() -> str:
    from webhook.inventory.nodelayers import GROUP, PLURAL, VERSION

    return f"/apis/{GROUP}/{VERSION}/{PLURAL}"


class AgentSide:
    def __init__(self, cluster: Any, root: Path, world: workload.World,
                 items: Sequence[dict[str, Any]], lease_seconds: int) -> None:
        self.cluster, self.root, self.world, self.items = cluster, root, world, items
        self.lease_seconds = lease_seconds
        self.nodelayers: list[dict[str, Any]] = []
        self.agents: list[standin_agents.StandIn] = []
        self.renewer: standin_renewer.RenewerProcess | None = None

    def ensure_component(self) -> dict[str, str]:
        """The component's documents (the DaemonSet aside) as shipped: `cluster up` applies
        them rendered; any missing is applied from the file, so the policies whose CEL
        judges every agent write are in place whatever `cluster up` did."""
        from webhook.devcluster.processes import ClusterError

        found = {}
        for doc in DOCUMENTS:
            path = str(COMPONENT / doc)
            try:
                self.cluster.kubectl_run(["get", "-f", path, "-o", "name"])
                found[doc] = "present"
            except ClusterError:
                self.cluster.kubectl_run(["apply", "-f", path])
                found[doc] = "applied"
        return found

    def remove_component(self) -> dict[str, str]:
        """No agent: its component's objects deleted (an install without it has none), so the
        webhook has no Lease to read, as there."""
        for doc in reversed(DOCUMENTS):
            self.cluster.kubectl_run(["delete", "--ignore-not-found", "-f",
                                      str(COMPONENT / doc)])
        return {doc: "deleted" for doc in DOCUMENTS}

    def api(self) -> Api:
        """The API server as the agents reach it: no client certificate, the bearer token is
        who each is."""
        return Api(self.cluster.plane.server, ssl.create_default_context(
            cafile=str(self.cluster.plane.pki.ca_cert)))

    async def create_nodelayers(self, api: Api, uids: dict[str, str]) -> dict[str, Any]:
        """A NodeLayers object per node, written once (agents rewrite it only when the node's
        layers change): the synthetic 300-layer objects of tests/kit/nodelayers_objects.py, as
        before Leases. Their layers are not the node's images' (no pod here runs them): what they
        weigh is what counts (the relist, the legacy heartbeats)."""
        from tests.kit.nodelayers_objects import nodelayers_objects

        started = time.monotonic()
        objects = nodelayers_objects(len(self.items))
        # Owned by the real Node (the garbage collector deletes an object whose owner's uid
        # does not exist), as the agent writes it.
        for obj in objects:
            name = obj["metadata"]["name"]
            obj["metadata"]["ownerReferences"] = [
                {"apiVersion": "v1", "kind": "Node", "name": name, "uid": uids[name]}]
        self.nodelayers = objects
        n = await api.create_all((nodelayers_path(), o) for o in objects)
        seconds = time.monotonic() - started
        print(f"NodeLayers: {n} in {seconds:.1f} s", flush=True)
        return {"nodelayers_seconds": seconds}

    async def start(self, api: Api, uids: dict[str, str]) -> dict[str, Any]:
        """Every node's stand-in agent: a token bound to its node, its layer labels (one
        patch), its Lease (created), then the renewals in their own process."""
        by_ref = {image.ref: image for image in self.world.images}
        self.agents = standin_agents.stand_ins(self.items, uids, by_ref)
        started = time.monotonic()
        tokens = await standin_agents.agent_tokens(api, [a.name for a in self.agents])
        for agent, token in zip(self.agents, tokens, strict=True):
            agent.token = token
        tokens_s = time.monotonic() - started
        agent_api = self.api()
        try:
            started = time.monotonic()
            labels = await standin_agents.label_all(agent_api, self.agents)
            labels_s = time.monotonic() - started
            started = time.monotonic()
            await standin_agents.create_leases(agent_api, self.agents, self.lease_seconds)
            leases_s = time.monotonic() - started
        finally:
            await agent_api.close()
        plane = self.cluster.plane
        self.renewer = await asyncio.to_thread(
            standin_renewer.RenewerProcess, self.agents, plane.server, plane.pki.ca_cert,
            self.lease_seconds, self.root, plane)
        rate = self.renewer.ready["rate"]
        print(f"agents: {len(tokens)} tokens in {tokens_s:.1f} s; layer labels on "
              f"{labels['patches']} nodes ({labels['labels_mean']:.1f} a node, patches of "
              f"{labels['patch_bytes_mean']:.0f} bytes) in {labels_s:.1f} s; Leases in "
              f"{leases_s:.1f} s, renewed {rate:.1f}/s", flush=True)
        return {"tokens_seconds": tokens_s, "labels": labels, "labels_seconds": labels_s,
                "leases_seconds": leases_s, "lease_seconds": self.lease_seconds,
                "renewals_per_second": rate}

    def labels(self) -> dict[str, dict[str, str]]:
        """Each node's labels as its agent last saw them answered."""
        return {a.name: a.labels for a in self.agents}

    async def renewer_command(self, command: str) -> dict[str, Any]:
        """`pause`, `resume` or `stats` to the renewals' process; its counters after it."""
        assert self.renewer is not None
        return await asyncio.to_thread(self.renewer.command, command)

    def stop(self) -> dict[str, Any] | None:
        """The renewals stopped; their final counters."""
        renewer, self.renewer = self.renewer, None
        return renewer.stop() if renewer is not None else None
