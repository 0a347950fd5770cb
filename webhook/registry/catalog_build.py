"""`layer-locality catalog build`: resolve every image that nodes report (and, optionally, that
pods use) through the registries and write the static catalog format, so `serve --catalog`
can preload it and a restart does not hit registry rate limits again."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from webhook.core.images import ImageRefError, parse_image
from webhook.core.layers import ImageLayers
from webhook.core.nodes import NodeInfo
from webhook.core.objects import mapping, pod_template
from webhook.core.pods import pod_images
from webhook.registry.catalog import CatalogDoc, catalog_document
from webhook.registry.resolver import RegistryResolver, resolve_names


class PodFileError(ValueError):
    """The pods file is not YAML/JSON Pods, a List, or workloads."""


def read_pod_specs(path: Path) -> list[Mapping[str, Any]]:
    """Pods from a file: a Pod, a PodList/List (`kubectl get pods -o json`), workloads with a
    pod template, or several YAML documents of those."""
    try:
        documents = list(yaml.safe_load_all(path.read_text()))
    except (OSError, yaml.YAMLError) as exc:
        raise PodFileError(f"cannot read pods file {path}: {exc}") from exc
    pods: list[Mapping[str, Any]] = []
    for document in documents:
        pods.extend(_pods_in(document))
    return pods


def _pods_in(obj: object) -> Iterable[Mapping[str, Any]]:
    if not isinstance(obj, Mapping):
        return
    kind = str(obj.get("kind", ""))
    if kind.endswith("List") and isinstance(obj.get("items"), list):
        for item in obj["items"]:
            yield from _pods_in(item)
        return
    if kind == "Pod":
        yield obj
        return
    template = pod_template(obj)
    if template is not None:
        yield {"kind": "Pod", "spec": mapping(template.get("spec"))}


def image_names(nodes: Sequence[NodeInfo], pods: Sequence[Mapping[str, Any]]) -> list[str]:
    """Every image name to resolve, node images first (each of their names: digests identify
    the content, tags give the catalog entry its `ref`)."""
    names: dict[str, None] = {}
    for node in nodes:
        for group in node.images:
            for name in group:
                names.setdefault(name)
    for pod in pods:
        for name in pod_images(pod):
            names.setdefault(name)
    return list(names)


async def build_catalog(resolver: RegistryResolver, names: Sequence[str],
                        concurrency: int = 16) -> tuple[CatalogDoc, list[str]]:
    """Resolve `names`; returns the catalog document and the names that did not resolve."""
    await resolve_names(resolver, names, concurrency)
    by_ref: dict[str, ImageLayers] = {}
    failed: list[str] = []
    pinned: dict[str, ImageLayers] = {}
    for name in names:
        try:
            ref = parse_image(name)
        except ImageRefError:
            failed.append(name)
            continue
        image = resolver.cached(ref)
        if image is None:
            failed.append(name)
        elif ref.digest is None and ref.tagged is not None:
            by_ref[ref.tagged] = dataclasses.replace(image, ref=ref.tagged)
        else:
            pinned.setdefault(image.digest,
                              dataclasses.replace(image, ref=f"{ref.name}@{ref.digest}"))
    covered = {image.digest for image in by_ref.values()}
    entries = [*by_ref.values(), *(i for d, i in pinned.items() if d not in covered)]
    entries.sort(key=lambda image: image.ref)
    return catalog_document(entries), failed
