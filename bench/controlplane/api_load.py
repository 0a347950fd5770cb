"""The product's own load on kube-apiserver, in windows of `--steady-seconds` (bench.controlplane
after its rounds): idle (nothing of the product's writing: the Lease renewals held, then
resumed where they were), steady (the renewals), label churn per `--label-churn` rate, the
NodeLayers heartbeats of agents before Leases (`--legacy-heartbeats`), then a relist of every
replica. Label churn and legacy heartbeats run with the renewals going on, as they always do:
`over_steady_cores` is their own part, `over_idle_cores` the product's whole."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import Any

from bench import report
from bench.controlplane import standin_agents, summary
from bench.controlplane.apiclient import Api, delta
from bench.controlplane.node_agents import AgentSide, nodelayers_path
from bench.controlplane.restarts import restart
from bench.controlplane.scraping import APISERVER_METRICS, cpu, urls
from bench.controlplane.setup import Bench
from bench.controlplane.window_figures import load_window, over
from webhook.inventory.agentlease import renew_seconds

AGENT_RESYNC_SECONDS = 300  # the agent's resync: a legacy heartbeat per node this often
LEASE_MARGIN_SECONDS = 20.0  # an idle window leaves every Lease this far from running out
# After the rounds, before the idle window: the last namespace's deletion leaves the
# controllers' tail (events, garbage collection) that would count as idle otherwise.
SETTLE_SECONDS = 15.0


def idle_seconds(wanted: float, lease_seconds: int) -> float:
    """How long the renewals may be held: past the Lease's duration less a renewal period
    (the oldest renewal's age) and a margin, Leases would run out and the webhook would stop
    trusting labels."""
    return max(1.0, min(wanted, lease_seconds - renew_seconds(lease_seconds)
                        - LEASE_MARGIN_SECONDS))


class ApiLoad:
    def __init__(self, bench: Bench, api: Api) -> None:
        self.bench, self.api = bench, api
        self.seconds: float = bench.args.steady_seconds

    async def window(self, work: Awaitable[dict[str, Any] | None]) -> dict[str, Any]:
        """A load window around `work`: the API server's metrics and every process's CPU
        from before it to after it, and what `work` returns."""
        url = urls(self.bench)["apiserver"]
        before, cpu0, t0 = await self.api.metrics(url, APISERVER_METRICS), cpu(self.bench), \
            time.monotonic()
        extra = await work
        after, cpu1, t1 = await self.api.metrics(url, APISERVER_METRICS), cpu(self.bench), \
            time.monotonic()
        out = load_window(delta(after, before), t1 - t0, cpu0, cpu1)
        out.update(extra or {})
        return out

    async def run(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        await asyncio.sleep(SETTLE_SECONDS)
        agents = self.bench.agent_side
        if agents is None or agents.renewer is None:
            out["idle"] = await self.window(self.sleep(self.seconds))
        else:
            # Held before the window opens and resumed after it closes: no renewal inside.
            await agents.renewer_command("pause")
            try:
                out["idle"] = await self.window(self.sleep(
                    idle_seconds(self.seconds, agents.lease_seconds)))
            finally:
                await agents.renewer_command("resume")
            out["idle"]["renewals_held"] = True
            out["steady"] = await self.steady(agents, out["idle"])
            out["label_churn"] = [await self.churn(agents, percent, out["idle"], out["steady"])
                                  for percent in self.bench.args.label_churn]
            if self.bench.args.legacy_heartbeats:
                out["legacy_heartbeats"] = await self.legacy(agents, out["idle"],
                                                             out["steady"])
        out["relist"] = await self.relist()
        for line in summary.windows_lines(out):
            print(line, flush=True)
        return out

    @staticmethod
    async def sleep(seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def steady(self, agents: AgentSide, idle: dict[str, Any]) -> dict[str, Any]:
        start = await agents.renewer_command("stats")

        async def renewals() -> dict[str, Any]:
            await asyncio.sleep(self.seconds)
            end = await agents.renewer_command("stats")
            return {"renewer": end, "renewals": end["writes"] - start["writes"]}

        w = await self.window(renewals())
        w["lease_writes_per_second"] = w["renewals"] / w["seconds"]
        w["over_idle_cores"] = over(w, idle)
        return w

    async def churn(self, agents: AgentSide, percent: float, idle: dict[str, Any],
                    steady: dict[str, Any]) -> dict[str, Any]:
        """`percent` of the nodes a minute gain an image's layer labels (an application image
        they did not hold), one merge patch each through the agents' policy."""
        rate = percent / 100 * len(agents.agents) / 60
        count = max(1, round(rate * self.seconds))
        plan = await asyncio.to_thread(standin_agents.churn_plan, agents.agents,
                                       self.bench.world.apps, count)
        agent_api = agents.api()
        try:
            w = await self.window(standin_agents.label_churn(agent_api, agents.agents, plan,
                                                             rate, self.seconds))
        finally:
            await agent_api.close()
        w["percent_per_minute"] = percent
        w["over_idle_cores"] = over(w, idle)
        w["over_steady_cores"] = over(w, steady)
        return w

    async def legacy(self, agents: AgentSide, idle: dict[str, Any],
                     steady: dict[str, Any]) -> dict[str, Any]:
        """Agents before Leases: every node's NodeLayers rewritten each resync (GET + PUT)."""
        rate = len(agents.agents) / AGENT_RESYNC_SECONDS
        count = max(1, int(rate * self.seconds))
        tokens = [a.token for a in agents.agents[:count]]
        agent_api = agents.api()
        try:
            w = await self.window(standin_agents.legacy_heartbeats(
                agent_api, nodelayers_path(), agents.nodelayers[:count], tokens, rate,
                self.seconds))
        finally:
            await agent_api.close()
        w["over_idle_cores"] = over(w, idle)
        w["over_steady_cores"] = over(w, steady)
        return w

    async def relist(self) -> dict[str, Any]:
        """Every replica relisting: both restarted at once (a rollout, a network partition)."""
        bench = self.bench
        apiserver = bench.cluster.plane.processes["kube-apiserver"].pid
        rss0 = report.rss_kib(apiserver)
        peak = [rss0]

        async def restart_all() -> dict[str, Any]:
            async with report.rss_samples(apiserver, 0.25) as samples:
                ready = await asyncio.gather(*(asyncio.to_thread(restart, bench, i)
                                               for i in range(len(bench.replica_ports))))
            peak.extend(samples)
            return {"ready_seconds": ready}

        w = await self.window(restart_all())
        w["apiserver_rss_mb"] = {"before": rss0 / 1024, "peak": max(peak) / 1024}
        return w
