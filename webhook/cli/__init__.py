"""Command line: `layer-locality serve | certs | explain`. The only module that reads argv/env."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from webhook import __version__
from webhook.cli.explain import as_json, as_table, node_rows
from webhook.cli.explainbound import as_json as explain_bound_json
from webhook.cli.explainbound import as_text as explain_bound_text
from webhook.cli.explainbound import bound_node, explain_bound
from webhook.cli.serve import serve_command
from webhook.cli.startup import cluster_of, configure_logging, kube_api, settings_from
from webhook.config import ConfigError
from webhook.core.admission import Review
from webhook.core.images import try_parse
from webhook.core.objects import mapping, pod_template
from webhook.core.pods import decision_document, pod_images, pod_owner
from webhook.inventory.kube import ClusterConfigError, probe
from webhook.inventory.static import InventoryFileError, read_node_list
from webhook.options import REGISTRY_OPTIONS, SOURCE_OPTIONS, add_options
from webhook.registry.catalog import CatalogError
from webhook.registry.resolver import resolve_names
from webhook.report.plots import NAMES as PLOT_NAMES
from webhook.report.plots import REPLACE_HELP, check_plot_dir
from webhook.serving.mutate import Mutator, Outcome
from webhook.serving.wiring import (
    Parts,
    build_parts,
    build_resolver,
    resolve_node_images,
)
from webhook.yaml_document import one_document

log = logging.getLogger("webhook")
EXPLAIN_SYNC_SECONDS = 60


def main(argv: Sequence[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    env = os.environ if env is None else env
    try:
        result: int = args.run(args, env)
        return result
    except (ConfigError, CatalogError, InventoryFileError, ClusterConfigError, OSError) as exc:
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
    serve.set_defaults(run=serve_command)

    certs = sub.add_parser("certs", help="write a CA and a serving certificate for the Service")
    certs.add_argument("--service", default="layer-locality",
                       help="the webhook's Service name (default: layer-locality)")
    certs.add_argument("--namespace", default="layer-locality",
                       help="the Service's namespace (default: layer-locality)")
    certs.add_argument("--out", default="certs", type=Path,
                       help="directory for ca.crt, tls.crt, tls.key (default: certs)")
    certs.add_argument("--days", default=365, type=int,
                       help="validity of the serving certificate in days (default: 365)")
    certs.add_argument("--extra-san", action="append", default=[], metavar="NAME",
                       help="extra DNS name or IP address (repeatable)")
    certs.add_argument("--new-ca", action="store_true",
                       help="make a new CA even if --out holds a valid one (the old one stays in "
                            "ca.crt until it expires, so the bundle trusts both during the swap)")
    certs.add_argument("--print-ca-bundle", action="store_true",
                       help="print the base64 CA bundle for the webhook configuration")
    certs.set_defaults(run=_certs)

    explain = sub.add_parser("explain", help="show what /mutate would do with a pod")
    explain.add_argument("--pod", required=True, type=Path, help="Pod (or workload) YAML/JSON")
    explain.add_argument("--exempt", action="store_true",
                         help="as for a namespace labelled layer-locality.io/holdout=exempt "
                              "(never held out)")
    explain.add_argument("--webhook-service", default="layer-locality/layer-locality",
                         metavar="NAMESPACE/NAME",
                         help="the installed webhook's Service: its /readyz warnings (callers "
                              "refused, not synced) are repeated on stderr")
    explain.add_argument("--output", choices=("table", "json"), default="table",
                         help="a table per node with the calibration (default), or JSON")
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

    report = sub.add_parser(
        "report", help="before/after figures from a webhook's /metrics or from Prometheus")
    where = report.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="one webhook's metrics, e.g. https://127.0.0.1:8443/metrics "
                                     "(totals since that process started)")
    where.add_argument("--prometheus", metavar="URL",
                       help="a Prometheus server: every replica, over --window")
    report.add_argument("--ca", help="CA file to verify an https URL (default: system trust)")
    report.add_argument("--server-name", metavar="NAME",
                        help="name the certificate must carry (default: the URL's host), e.g. "
                             "layer-locality.layer-locality.svc through a port-forward")
    report.add_argument("--token-file", type=Path, metavar="FILE",
                        help="with --url: a bearer token for a metrics port behind Kubernetes "
                             "authorization (the shipped manifests' 8081), e.g. from "
                             "`kubectl create token`")
    report.add_argument("--window", default="1d", help="Prometheus range, e.g. 6h, 1d, 7d")
    report.add_argument("--output", choices=("table", "json"), default="table",
                        help="a readable table (default), or JSON")
    report.add_argument("--plot", type=Path, metavar="DIR",
                        help="also write the holdout's comparison as PNG plots to DIR "
                             "(matplotlib: pip install 'layer-locality[sim]')")
    report.add_argument("--replace-plots", action="store_true", help=REPLACE_HELP)
    report.set_defaults(run=_report)

    from webhook.agent.options import add_arguments as add_agent_arguments  # argparse only

    agent = sub.add_parser(
        "agent", help="node agent: publish the node's image layers from containerd (NodeLayers), "
                      "its layer labels and its Lease")
    add_agent_arguments(agent)
    agent.set_defaults(run=_agent)

    from webhook.devcluster.command import add_parser as add_cluster  # argparse only
    from webhook.evaluation.command import add_parser as add_evaluate  # argparse only
    from webhook.sim.command import add_parser as add_simulate  # argparse only (in the image too)

    add_simulate(sub)
    add_evaluate(sub)
    add_cluster(sub)
    return parser


def _certs(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    # cryptography: ~14 MB a serving process need not hold
    from webhook.serving.certs import generate

    try:
        files = generate(args.service, args.namespace, args.out, args.days, args.extra_san,
                         new_ca=args.new_ca)
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
        raw = one_document(path.read_text(), str(path), "Pod or workload")
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a Pod object")
    if raw.get("kind") == "Pod":
        return raw
    template = pod_template(raw)
    if template is None:
        raise ConfigError(f"{path}: expected a Pod or a workload with a pod template")
    owner = mapping(raw.get("metadata"))
    metadata = dict(mapping(template.get("metadata")))
    metadata.setdefault("namespace", owner.get("namespace", "default"))
    metadata.setdefault("generateName", f"{owner.get('name', 'pod')}-")
    metadata.setdefault("ownerReferences", [_controller(str(raw.get("kind", "")),
                                                        str(owner.get("name", "pod")), metadata)])
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": dict(mapping(template.get("spec")))}


def _controller(kind: str, name: str, metadata: dict[str, Any]) -> dict[str, Any]:
    """The controller reference the workload's controller would give its pods (the holdout's
    workload key and the skip rules read it): a Deployment's pods belong to a ReplicaSet named
    after it plus the pod-template-hash label's value; a CronJob's to a Job of its."""
    if kind == "Deployment":
        metadata["labels"] = {**mapping(metadata.get("labels")), "pod-template-hash": "explain"}
        kind, name = "ReplicaSet", f"{name}-explain"
    elif kind == "CronJob":
        kind, name = "Job", f"{name}-explain"
    return {"apiVersion": "apps/v1" if kind != "Job" else "batch/v1", "kind": kind,
            "name": name, "uid": "explain", "controller": True}


def _explain(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    settings = settings_from(args, env)
    configure_logging("warning")
    pod = read_pod(args.pod)
    cluster = cluster_of(settings, env)
    if cluster is not None:  # a CLI: fail in seconds, not after the sync timeout
        probe(*cluster)
    parts = build_parts(settings, kube_api(settings, env))
    if bound_node(pod) and decision_document(pod) is not None:
        return _explain_bound(parts, pod, args.output)
    mutator = Mutator(parts.sources, parts.inventory, settings.policy, settings.budget_ms / 1000,
                      siblings=parts.live.siblings if parts.live is not None else None,
                      holdout=settings.holdout_policy)
    review = Review.for_pod(pod, uid="explain", dry_run=True)
    # explain shows what a real CREATE would get: not the note a dry run's pod carries.
    outcome = replace(asyncio.run(_explain_review(parts, mutator, review, args.exempt)), note=())
    images = [image for ref in map(try_parse, pod_images(pod)) if ref is not None
              for image in [mutator.cached(ref)] if image is not None]
    rows = node_rows(outcome.decision, parts.inventory.index, images)
    if args.output == "json":
        sys.stdout.write(as_json(outcome, rows, settings.policy).decode())
    else:
        sys.stdout.write(as_table(outcome, rows, settings.policy))
    if cluster is not None:
        from webhook.cli.webhookhealth import webhook_warnings
        from webhook.inventory.kube import core_api

        namespace, _, service = args.webhook_service.rpartition("/")
        for warning in webhook_warnings(core_api(*cluster, retries=False), service,
                                        namespace or "layer-locality"):
            print(f"note: the installed webhook ({args.webhook_service}) says: {warning}",
                  file=sys.stderr)
    return 0


def _explain_bound(parts: Parts, pod: Mapping[str, Any], output: str) -> int:
    """A bound pod with a decision: where it went against the preference, and why."""
    counts: Mapping[str, int] | None = None
    if parts.live is not None:
        asyncio.run(_settled(parts))
        owner = pod_owner(pod)
        if owner is not None:
            counts = parts.live.siblings.counts(owner)
    explanation = explain_bound(pod, parts.inventory.index, counts)
    if explanation is None:
        raise ConfigError("the pod carries no decision this version can read")
    if output == "json":
        sys.stdout.write(explain_bound_json(explanation).decode())
    else:
        sys.stdout.write(explain_bound_text(explanation))
    return 0


async def _settled(parts: Parts) -> None:
    """The live inventory listed once (explain waits for it; a CLI, not a review)."""
    assert parts.live is not None
    watching = asyncio.ensure_future(parts.live.run())
    try:
        await asyncio.wait_for(parts.live.settled(), timeout=EXPLAIN_SYNC_SECONDS)
    except TimeoutError as exc:
        raise ConfigError(f"the cluster inventory did not sync in {EXPLAIN_SYNC_SECONDS}s") from exc
    finally:
        watching.cancel()
        await asyncio.gather(watching, return_exceptions=True)


async def _explain_review(parts: Parts, mutator: Mutator, review: Review,
                          exempt: bool = False) -> Outcome:
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
        return await mutator.review(review, exempt)
    except TimeoutError as exc:
        raise ConfigError(f"the cluster inventory did not sync in {EXPLAIN_SYNC_SECONDS}s") from exc
    finally:
        if watching is not None:
            watching.cancel()
            await asyncio.gather(watching, return_exceptions=True)
        await mutator.close()
        if parts.registry is not None:
            await parts.registry.close()


def _catalog_build(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.registry.catalog_build import (
        PodFileError,
        build_catalog,
        image_names,
        read_pod_specs,
    )

    settings = settings_from(args, env)
    configure_logging(settings.log_level)
    nodes = read_node_list(Path(args.nodes))
    try:
        pods = read_pod_specs(args.pods) if args.pods else []
    except PodFileError as exc:
        raise ConfigError(str(exc)) from exc
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


def _report(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    import time

    from webhook.report import figures as report
    from webhook.report import output, promread, series

    check_plot_dir(args.plot, PLOT_NAMES, args.replace_plots)
    tls = promread.TLS(args.ca, args.server_name)
    try:
        if args.url:
            token = _token(args.token_file) if args.token_file else None
            samples = promread.scrape(args.url, tls, token)
            span = series.created_span(samples, time.time())
            source = f"{args.url} (one process, since it started)"
        else:
            query = promread.prometheus_query(args.prometheus, tls)
            samples, span = promread.from_prometheus(query, args.window)
            source = f"Prometheus {args.prometheus} (all replicas, last {args.window})"
    except (promread.SourceError, ValueError) as exc:
        print(f"layer-locality report: {exc}", file=sys.stderr)
        return 2
    doc = report.figures(samples, span, source)
    if args.output == "json":
        sys.stdout.buffer.write(output.as_json(doc))
    else:
        sys.stdout.write(output.as_table(doc))
    if args.plot:
        _report_plots(doc, args.plot)
    return 0


def _token(path: Path) -> str:
    try:
        token = path.read_text().strip()
    except OSError as exc:
        raise ConfigError(f"--token-file {path}: {exc.strerror or exc}") from exc
    if not token:
        raise ConfigError(f"--token-file {path}: empty")
    return token


def _report_plots(doc: Any, out: Path) -> None:
    """The report's PNG plots (the sim extra's matplotlib; a clear error without it)."""
    try:
        from webhook.report.plots import plot

        written = plot(doc, out)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "matplotlib":
            raise ConfigError("--plot needs matplotlib: pip install 'layer-locality[sim]'") \
                from exc
        raise
    print(f"plots: {', '.join(map(str, written))}" if written else
          "plots: none (no pod of the holdout experiment seen)", file=sys.stderr)


def _agent(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.agent.command import run_agent  # grpc is imported only by this subcommand
    from webhook.agent.options import agent_options

    options = agent_options(vars(args), env)  # env LAYER_LOCALITY_* < flags
    configure_logging(options.log_level)
    return run_agent(options, env)
