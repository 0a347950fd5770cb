"""A live inventory against the stand-in API server (tests/kit/apiserver.py), through the
real `kubernetes` client and a generated kubeconfig: the fixtures test_live_inventory.py and
test_live_readiness.py share."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.helpers import AMD64, Clock, image, review
from tests.kit.apiserver import FakeApiServer, running_fake
from webhook.core.admission import parse_review
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.inventory.kube import core_lists
from webhook.inventory.live import LiveInventory, WatchSettings
from webhook.registry.catalog import StaticCatalog
from webhook.serving.metrics import Metrics
from webhook.serving.mutate import Mutator, Outcome

BASE = image("registry.example.com/team/base:1", {AMD64: [("base", 200 * MiB)]})
APP = image("registry.example.com/team/app:1", {AMD64: [("base", 200 * MiB), ("app", 90 * MiB)]})
CATALOG = StaticCatalog([BASE, APP])




@pytest.fixture
async def apiserver() -> AsyncIterator[FakeApiServer]:
    async for server in running_fake():
        yield server


class Running:
    def __init__(self, inventory: LiveInventory, task: asyncio.Task[None], clock: Clock,
                 metrics: Metrics) -> None:
        self.inventory = inventory
        self.task = task
        self.clock = clock
        self.metrics = metrics
        # Weighed by share: these tests read which nodes hold what, not how steeply.
        self.mutator = Mutator([CATALOG], inventory, ScoringPolicy(lack_bytes=0))

    async def review(self, obj: dict[str, Any], dry_run: bool = False) -> Outcome:
        return await self.mutator.review(parse_review(orjson.dumps(review(obj, dry_run=dry_run))))

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels`."""
        return sum(sample.value for family in self.metrics.registry.collect()
                   for sample in family.samples
                   if sample.name == name and labels.items() <= sample.labels.items())


@pytest.fixture
async def live(apiserver: FakeApiServer, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    started: list[Running] = []

    async def start(inflight_seconds: float = 60, stale_seconds: float = 60) -> Running:
        api = core_lists(str(apiserver.kubeconfig(tmp_path / "kubeconfig")), in_cluster=False)
        clock = Clock(1000.0)
        metrics = Metrics()
        inventory = LiveInventory(api, [CATALOG], WatchSettings(
            page_size=2, backoff_initial=0.05, backoff_max=0.2,
            inflight_seconds=inflight_seconds, stale_seconds=stale_seconds),
            metrics=metrics.live_inventory(), clock=clock)
        task = asyncio.create_task(inventory.run())
        running = Running(inventory, task, clock, metrics)
        started.append(running)
        return running

    yield start
    for running in started:
        running.task.cancel()
        await asyncio.gather(running.task, return_exceptions=True)


def preferred(outcome: Outcome) -> dict[str, int]:
    return {nb.node.name: nb.bytes_present for nb in outcome.nodes}
