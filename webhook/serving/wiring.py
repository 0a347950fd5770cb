"""Turn Settings into the running parts: layer sources and an inventory. Reads files; the
live-cluster and registry sources plug in here as they arrive."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import logging
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from webhook.config import ConfigError, Settings
from webhook.core.layers import LayerSource, SourceChain
from webhook.core.nodes import NodeInfo
from webhook.inventory.live import LiveInventory, LiveMetrics, WatchSettings
from webhook.inventory.memory import StaticInventory
from webhook.inventory.nodeimages import NodeImagesSource
from webhook.inventory.static import build_index, node_layers, parse_node_list, read_node_list
from webhook.registry import RegistryResolver, ResolverLimits, ResolverStats
from webhook.registry.auth import AuthError, BasicCredentials, load_docker_config
from webhook.registry.catalog import StaticCatalog, parse_catalog
from webhook.registry.client import RegistryClient
from webhook.registry.guard import GuardError, HostPolicy, parse_mirrors
from webhook.registry.resolver import resolve_names
from webhook.serving.metrics import InventoryMetrics
from webhook.telemetry.recorder import recorder_for

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Parts:
    sources: tuple[LayerSource, ...]
    inventory: StaticInventory | LiveInventory
    unresolved_node_images: tuple[str, ...]
    nodes: tuple[NodeInfo, ...] = ()
    registry: RegistryResolver | None = None  # None when offline (or --demo)

    @property
    def live(self) -> LiveInventory | None:
        return self.inventory if isinstance(self.inventory, LiveInventory) else None


def demo_catalog() -> StaticCatalog:
    raw = orjson.loads(_demo_file("demo-catalog.json"))
    return StaticCatalog(parse_catalog(raw, source="embedded demo catalog"))


def _demo_file(name: str) -> bytes:
    return importlib.resources.files("webhook").joinpath("data", name).read_bytes()


def build_parts(
    settings: Settings,
    kube_api: Callable[[], Any] | None = None,
    live_metrics: LiveMetrics | None = None,
) -> Parts:
    """Sources and inventory: static (--demo, --nodes) or the live cluster, whose core lists
    `kube_api` creates (the CLI decides between in-cluster config and a kubeconfig)."""
    catalog = StaticCatalog()
    nodes: list[NodeInfo] = []
    if settings.demo:
        catalog = demo_catalog()
        nodes = parse_node_list(orjson.loads(_demo_file("demo-nodes.json")), "embedded demo")
    elif settings.nodes:
        nodes = read_node_list(Path(settings.nodes))
    elif kube_api is None:
        raise ConfigError("no node source: give --demo, --nodes FILE or a cluster to watch")
    if settings.catalog:
        for image in StaticCatalog.load(Path(settings.catalog)).images():
            catalog.add(image)
    sources: tuple[LayerSource, ...] = (catalog,)
    registry = None
    if not settings.offline and not settings.demo:
        registry = build_resolver(settings)
        sources = (catalog, registry)
    if not settings.demo and not settings.nodes:
        assert kube_api is not None
        # Images the node agents publish (NodeLayers): exact layers from memory. Last in the
        # chain: a registry's own cached answer (its tag TTL follows a moving tag) wins, but
        # `cached` does no I/O, so an image on some node still needs no registry lookup.
        node_images = NodeImagesSource()
        sources = (*sources, node_images)
        watch = WatchSettings(inflight_seconds=settings.inflight_seconds,
                              pending_seconds=settings.pending_seconds,
                              stale_seconds=settings.stale_seconds)
        # Outcome telemetry rides on the inventory's metrics (what `serve` passes): binds
        # and kubelet pull events are measured whenever the cluster is watched.
        telemetry = (recorder_for(live_metrics.telemetry)
                     if isinstance(live_metrics, InventoryMetrics) else None)
        live = LiveInventory(kube_api(), sources, watch, live_metrics, telemetry=telemetry,
                             node_images=node_images,
                             agent_namespace=settings.agent_namespace)
        return Parts(sources, live, (), (), registry)
    index, unresolved = build_index(nodes, catalog)
    if unresolved and registry is None:
        log.warning("%d node images have no layers in any source (first: %s)",
                    len(unresolved), unresolved[0])
    return Parts(sources, StaticInventory(index), tuple(unresolved), tuple(nodes), registry)


async def resolve_node_images(parts: Parts) -> int:
    """Resolve the node images no static source knew, then re-index the nodes: with --nodes
    and no --catalog this is where the inventory learns its layers. Returns nodes changed."""
    if parts.registry is None or not parts.unresolved_node_images:
        return 0
    await resolve_names(parts.registry, parts.unresolved_node_images)
    chain = SourceChain(parts.sources)
    index = parts.inventory.index
    changed = sum(index.upsert(node, node_layers(node, chain).layers) for node in parts.nodes)
    missing = sum(len(node_layers(node, chain).unresolved) for node in parts.nodes)
    log.info("registry: re-indexed %d nodes, %d node images still without layers",
             changed, missing)
    return changed


def live_lifecycle(live: LiveInventory) -> Callable[[web.Application], AsyncIterator[None]]:
    """aiohttp cleanup context: watch the cluster while the server runs."""

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.ensure_future(live.run())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

    return lifecycle


def registry_lifecycle(parts: Parts) -> Callable[[web.Application], AsyncIterator[None]]:
    """aiohttp cleanup context: resolve node images in the background once the server runs
    (reviews meanwhile answer with what is known), close the registry client at shutdown."""

    async def lifecycle(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.ensure_future(resolve_node_images(parts))
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        if parts.registry is not None:
            await parts.registry.close()

    return lifecycle


def build_resolver(settings: Settings) -> RegistryResolver:
    """The resolver `settings` describe; ConfigError names a bad registry setting."""
    try:
        mirrors = parse_mirrors(settings.registry_mirror)
        policy = HostPolicy.build(
            allow=settings.registry_allow,
            insecure=settings.registry_insecure,
            mirrors=mirrors.values(),
        )
    except GuardError as exc:
        raise ConfigError(f"registry settings: {exc}") from exc
    credentials: dict[str, BasicCredentials] = {}
    if settings.registry_auth and not Path(settings.registry_auth).exists():
        # The credentials Secret is an optional mount: absent means anonymous pulls only.
        log.info("no registry credentials at %s; registries are accessed anonymously",
                 settings.registry_auth)
    elif settings.registry_auth:
        try:
            credentials = load_docker_config(Path(settings.registry_auth))
        except AuthError as exc:
            raise ConfigError(str(exc)) from exc
    context = None
    if settings.registry_ca:
        try:
            context = ssl.create_default_context()
            context.load_verify_locations(cafile=settings.registry_ca)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot read registry CA {settings.registry_ca}: {exc}") from exc
    stats = ResolverStats()
    client = RegistryClient(
        policy,
        credentials,
        ssl_context=context,
        timeout=settings.registry_timeout_ms / 1000,
        on_request=stats.on_request,
    )
    limits = ResolverLimits(
        max_digests=settings.registry_cache_digests,
        tag_ttl=settings.registry_tag_ttl_seconds,
        negative_ttl=settings.registry_negative_ttl_seconds,
        per_registry=settings.registry_concurrency,
    )
    return RegistryResolver(client, mirrors, limits, stats=stats)
