"""Command line: `layer-locality serve | certs | explain`. The only module that reads argv/env."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
import yaml

from webhook import __version__
from webhook.admission import Review
from webhook.catalog import CatalogError
from webhook.catalog_build import PodFileError, build_catalog, image_names, read_pod_specs
from webhook.certs import generate
from webhook.config import (
    REGISTRY_OPTIONS,
    SOURCE_OPTIONS,
    ConfigError,
    Settings,
    add_options,
    load_settings,
)
from webhook.connections import Connections, EdgeLimits
from webhook.images import try_parse
from webhook.inventory.kube import ClusterConfigError, core_api
from webhook.inventory.static import InventoryFileError, read_node_list
from webhook.metrics import Metrics
from webhook.mutate import Mutator, Outcome, pod_layers
from webhook.pods import pod_images, pod_tolerations
from webhook.registry import build_resolver
from webhook.scoring import weight_for
from webhook.server import create_app, tls_reloader
from webhook.serving import listen, run
from webhook.tls import ServingCertificate
from webhook.wiring import (
    Parts,
    build_parts,
    live_lifecycle,
    registry_lifecycle,
    resolve_names,
    resolve_node_images,
)

log = logging.getLogger("webhook")
EXPLAIN_SYNC_SECONDS = 60


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    env = os.environ if env is None else env
    try:
        result: int = args.run(args, env)
        return result
    except (ConfigError, CatalogError, InventoryFileError, PodFileError, ClusterConfigError,
            OSError) as exc:
        print(f"layer-locality: error: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="layer-locality",
        description="Mutating admission webhook preferring nodes that hold a pod's image layers.",
    )
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(required=True, metavar="COMMAND")

    serve = sub.add_parser("serve", help="serve the webhook over HTTPS")
    add_options(serve)
    serve.set_defaults(run=_serve)

    certs = sub.add_parser("certs", help="write a CA and a serving certificate for the Service")
    certs.add_argument("--service", default="layer-locality")
    certs.add_argument("--namespace", default="layer-locality")
    certs.add_argument("--out", default="certs", type=Path)
    certs.add_argument("--days", default=365, type=int)
    certs.add_argument("--extra-san", action="append", default=[], metavar="NAME",
                       help="extra DNS name or IP address (repeatable)")
    certs.add_argument("--print-ca-bundle", action="store_true",
                       help="print the base64 CA bundle for the webhook configuration")
    certs.set_defaults(run=_certs)

    explain = sub.add_parser("explain", help="show what /mutate would do with a pod")
    explain.add_argument("--pod", required=True, type=Path, help="Pod (or workload) YAML/JSON")
    explain.add_argument("--output", choices=("table", "json"), default="table")
    add_options(explain, SOURCE_OPTIONS)
    explain.set_defaults(run=_explain)

    catalog = sub.add_parser("catalog", help="layer catalog tools")
    catalog_sub = catalog.add_subparsers(required=True, metavar="ACTION")
    build = catalog_sub.add_parser(
        "build", help="resolve node (and pod) images through registries, write a catalog")
    build.add_argument("--nodes", required=True, help="NodeList file (kubectl get nodes -o json)")
    build.add_argument("--pods", type=Path, help="Pods, a PodList or workloads (YAML/JSON)")
    build.add_argument("--out", required=True, type=Path, help="catalog JSON to write")
    add_options(build, (*REGISTRY_OPTIONS, "log_level"))
    build.set_defaults(run=_catalog_build)

    from webhook.sim.command import add_parser as add_simulate  # no matplotlib at import

    add_simulate(sub)
    return parser


def _settings(args: argparse.Namespace, env: Mapping[str, str]) -> Settings:
    flags = {k: v for k, v in vars(args).items() if k != "run"}
    return load_settings(flags, env)


def _configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )


def _serve(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    settings = _settings(args, env)
    _configure_logging(settings.log_level)
    metrics = Metrics()
    connections = Connections(EdgeLimits(
        max_connections=settings.max_connections,
        request_read_seconds=settings.request_read_seconds,
        idle_seconds=settings.idle_seconds, handshake_seconds=settings.tls_handshake_seconds,
    ), metrics)
    parts = build_parts(settings, _kube_api(settings, env), metrics.live_inventory())
    certificate = ServingCertificate(Path(settings.tls_cert), Path(settings.tls_key))
    mutator = Mutator(parts.sources, parts.inventory, settings.policy, settings.budget_ms / 1000)
    app = create_app(mutator, parts.inventory, metrics, settings.max_request_bytes, connections)
    app.cleanup_ctx.append(tls_reloader(certificate, metrics, settings.tls_reload_seconds))
    if parts.registry is not None:
        metrics.watch_registry(parts.registry.stats)
        app.cleanup_ctx.append(registry_lifecycle(parts))
    if parts.live is not None:
        app.cleanup_ctx.append(live_lifecycle(parts.live))
    inventory = "live cluster" if parts.live else f"{len(parts.inventory.index)} nodes"
    sockets = listen(*settings.listen_address)  # a port in use stops here, before any watch
    run(app, sockets, certificate.context, connections, f"inventory: {inventory}")
    return 0


def _certs(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    try:
        files = generate(args.service, args.namespace, args.out, args.days, args.extra_san)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if args.print_ca_bundle:
        print(files.ca_bundle())
    else:
        print(f"wrote {files.ca_cert}, {files.cert}, {files.key}", file=sys.stderr)
    return 0


def read_pod(path: Path) -> dict[str, Any]:
    """A Pod from YAML/JSON; a workload (Deployment, Job...) yields its pod template."""
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not YAML/JSON: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a Pod object")
    if raw.get("kind") == "Pod":
        return raw
    template = (raw.get("spec") or {}).get("template")
    if raw.get("kind") == "CronJob":
        job = ((raw.get("spec") or {}).get("jobTemplate") or {}).get("spec") or {}
        template = job.get("template")
    if isinstance(template, dict):
        metadata = dict(template.get("metadata") or {})
        metadata.setdefault("namespace", (raw.get("metadata") or {}).get("namespace", "default"))
        metadata.setdefault("generateName", f"{(raw.get('metadata') or {}).get('name', 'pod')}-")
        return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
                "spec": template.get("spec") or {}}
    raise ConfigError(f"{path}: expected a Pod or a workload with a pod template")


def _explain(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    settings = _settings(args, env)
    _configure_logging("warning")
    pod = read_pod(args.pod)
    parts = build_parts(settings, _kube_api(settings, env))
    mutator = Mutator(parts.sources, parts.inventory, settings.policy, settings.budget_ms / 1000)
    review = Review.for_pod(pod, uid="explain", dry_run=True)
    outcome = asyncio.run(_explain_review(parts, mutator, review))
    rows = _node_rows(pod, parts, settings, mutator)
    if args.output == "json":
        doc = {"result": outcome.result, "reason": outcome.reason, "nodes": rows,
               "patch": list(outcome.patch)}
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(_table(rows, outcome))
    return 0


async def _explain_review(parts: Parts, mutator: Mutator, review: Review) -> Outcome:
    """explain is a CLI: it waits for the cluster list and the registries instead of using
    the review budget."""
    watching = asyncio.ensure_future(parts.live.run()) if parts.live is not None else None
    try:
        if parts.live is not None:
            await asyncio.wait_for(parts.live.settled(), timeout=EXPLAIN_SYNC_SECONDS)
        if parts.registry is not None:
            await resolve_node_images(parts)
            await resolve_names(parts.registry, pod_images(review.object or {}))
            if parts.live is not None:
                await asyncio.wait_for(parts.live.settled(), timeout=EXPLAIN_SYNC_SECONDS)
        return await mutator.review(review)
    except TimeoutError as exc:
        raise ConfigError(f"the cluster inventory did not sync in {EXPLAIN_SYNC_SECONDS}s") from exc
    finally:
        if watching is not None:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
        await mutator.close()
        if parts.registry is not None:
            await parts.registry.close()


def _kube_api(settings: Settings, env: Mapping[str, str]) -> Callable[[], Any] | None:
    """How to reach the cluster when no static inventory is given: in-cluster config when
    running in a pod (and no kubeconfig is named), else --kubeconfig / $KUBECONFIG."""
    if settings.demo or settings.nodes:
        return None
    kubeconfig = settings.kubeconfig or (env.get("KUBECONFIG") or "").split(os.pathsep)[0] or None
    in_cluster = kubeconfig is None and "KUBERNETES_SERVICE_HOST" in env
    return lambda: core_api(kubeconfig, in_cluster)


def _catalog_build(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    settings = _settings(args, env)
    _configure_logging(settings.log_level)
    nodes = read_node_list(Path(args.nodes))
    pods = read_pod_specs(args.pods) if args.pods else []
    resolver = build_resolver(settings)

    async def run() -> tuple[Any, list[str]]:
        try:
            return await build_catalog(resolver, image_names(nodes, pods))
        finally:
            await resolver.close()

    document, failed = asyncio.run(run())
    args.out.write_bytes(orjson.dumps(document, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"wrote {args.out}: {len(document['images'])} images; {len(failed)} names did not "
          f"resolve" + (f" (first: {failed[0]})" if failed else ""), file=sys.stderr)
    return 0


def _node_rows(
    pod: Mapping[str, Any], parts: Parts, settings: Settings, mutator: Mutator
) -> list[dict[str, Any]]:
    index = parts.inventory.index
    images = []
    for ref in map(try_parse, pod_images(pod)):
        found = mutator.cached(ref) if ref is not None else None
        if found is not None:
            images.append(found)
    layers = pod_layers(images, list(index.platforms()))
    candidates = index.candidates(pod_tolerations(pod))
    rows: list[dict[str, Any]] = []
    for slot_node in sorted(index.nodes(), key=lambda n: n.name):
        sizes = layers.get(slot_node.platform, {})
        held = index.layers_of(slot_node.name)
        present = sum(size for digest, size in sizes.items() if digest in held)
        eligible = index.in_mask(slot_node.name, candidates)
        rows.append({
            "node": slot_node.name, "hostname": slot_node.hostname,
            "platform": str(slot_node.platform),
            "status": "ok" if eligible else ("cordoned" if slot_node.unschedulable else "tainted"),
            "podBytes": sum(sizes.values()), "bytesPresent": present,
            "weight": weight_for(present, settings.policy) if eligible else 0,
        })
    rows.sort(key=lambda r: (-r["bytesPresent"], r["node"]))
    return rows


def _table(rows: Sequence[Mapping[str, Any]], outcome: Outcome) -> str:
    mib = 1 << 20
    lines = [f"{'NODE':<34} {'HOSTNAME':<16} {'STATUS':<9} {'PRESENT':>11} {'OF POD':>11} "
             f"{'SHARE':>6} {'WEIGHT':>6}"]
    for r in rows:
        share = r["bytesPresent"] / r["podBytes"] if r["podBytes"] else 0.0
        lines.append(
            f"{r['node']:<34} {r['hostname']:<16} {r['status']:<9} "
            f"{r['bytesPresent'] / mib:>7.1f} MiB {r['podBytes'] / mib:>7.1f} MiB "
            f"{share:>6.0%} {r['weight']:>6}"
        )
    lines.append("")
    lines.append(f"result: {outcome.result} ({outcome.reason})")
    for term in outcome.terms:
        target = ", ".join(term.hostnames) if term.hostnames else "every node (baseline)"
        lines.append(f"  weight {term.weight:>3}: {target}")
    if outcome.patch:
        lines.append("patch:")
        lines.append(orjson.dumps(list(outcome.patch), option=orjson.OPT_INDENT_2).decode())
    return "\n".join(lines) + "\n"
