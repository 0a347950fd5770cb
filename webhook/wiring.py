"""Turn Settings into the running parts: layer sources and an inventory. Reads files; the
live-cluster and registry sources plug in here as they arrive."""

from __future__ import annotations

import importlib.resources
import logging
from dataclasses import dataclass
from pathlib import Path

import orjson

from webhook.catalog import StaticCatalog, parse_catalog
from webhook.config import ConfigError, Settings
from webhook.inventory.memory import StaticInventory
from webhook.inventory.static import build_index, parse_node_list, read_node_list
from webhook.layers import LayerSource

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Parts:
    sources: tuple[LayerSource, ...]
    inventory: StaticInventory
    unresolved_node_images: tuple[str, ...]


def demo_catalog() -> StaticCatalog:
    raw = orjson.loads(_demo_file("demo-catalog.json"))
    return StaticCatalog(parse_catalog(raw, source="embedded demo catalog"))


def _demo_file(name: str) -> bytes:
    return importlib.resources.files("webhook").joinpath("data", name).read_bytes()


def build_parts(settings: Settings) -> Parts:
    """Sources and inventory for a static run (--demo or --nodes)."""
    catalog = StaticCatalog()
    if settings.demo:
        catalog = demo_catalog()
        nodes = parse_node_list(orjson.loads(_demo_file("demo-nodes.json")), "embedded demo")
    elif settings.nodes:
        nodes = read_node_list(Path(settings.nodes))
    else:
        raise ConfigError(
            "no node source: give --demo or --nodes FILE (the live cluster inventory is not "
            "available in this build)"
        )
    if settings.catalog:
        for image in StaticCatalog.load(Path(settings.catalog)).images():
            catalog.add(image)
    sources: tuple[LayerSource, ...] = (catalog,)
    index, unresolved = build_index(nodes, catalog)
    if unresolved:
        log.warning("%d node images have no layers in any source (first: %s)",
                    len(unresolved), unresolved[0])
    return Parts(sources, StaticInventory(index), tuple(unresolved))
