"""Every setting declared once (OPTIONS): its check, help and flag kind. The argparse flags
(add_options), the env names (`LAYER_LOCALITY_*`) and the YAML keys derive from it, so the
three spellings cannot drift apart; the groups of options some subcommands take are named here
too.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.value_parsers import parse_bool, parse_level, parse_size

ENV_PREFIX = "LAYER_LOCALITY_"


def _listen(value: object) -> str:
    text = str(value)
    _host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return text


def _metrics_listen(value: object) -> str:
    return _listen(value) if str(value).strip() else ""


def _metrics_auth(value: object) -> str:
    text = str(value).strip().lower()
    if text not in ("none", "kubernetes"):
        raise ValueError(f"metrics auth {value!r}: give kubernetes or none")
    return text


def _client_name(value: object) -> str:
    name = str(value).strip()
    if not name or any(c.isspace() for c in name):
        raise ValueError(f"client name {value!r}: give a CN or DNS name, no spaces")
    return name


def _host_entry(value: object) -> str:
    text = str(value).strip().lower()
    if not text or "/" in text or " " in text:
        raise ValueError(f"expected HOST[:PORT] or *.DOMAIN, got {value!r}")
    return text


def _insecure_entry(value: object) -> str:
    text = _host_entry(value)
    if not text.rpartition(":")[2].isdigit():
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    return text


def _mirror_entry(value: object) -> str:
    source, sep, target = str(value).strip().lower().partition("=")
    if not sep or not source or not target or "/" in source + target:
        raise ValueError(f"expected FROM=TO (registry hosts), got {value!r}")
    return f"{source}={target}"


def repeated(convert: Callable[[object], Any]) -> Callable[[object], tuple[Any, ...]]:
    """A list option: YAML list, comma-separated string (env), or the flags' list."""

    def parse(value: object) -> tuple[Any, ...]:
        items = value if isinstance(value, list | tuple) else str(value).split(",")
        return tuple(convert(item) for item in items if str(item).strip())

    return parse


@dataclass(frozen=True, slots=True)
class Option:
    name: str  # the Settings field; flag --name-with-dashes, env LAYER_LOCALITY_NAME
    convert: Callable[[Any], Any]
    help: str
    flag_kind: str = "value"  # value | switch (a bare flag meaning true) | list (repeatable)
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


OPTIONS: tuple[Option, ...] = (
    Option("listen", _listen, "address to serve HTTPS on (HOST:PORT)", metavar="HOST:PORT"),
    Option("tls_cert", str, "serving certificate (PEM); re-read when it changes", metavar="FILE"),
    Option("tls_key", str, "serving key (PEM); re-read when it changes", metavar="FILE"),
    Option("tls_reload_seconds", float, "how often to check the TLS files for rotation"),
    Option("client_ca", str,
           "CA (PEM) of the API server's client certificate: every path but /healthz and "
           "/readyz then needs a certificate it verified, naming one of --client-names "
           "(re-read when it changes; unset: any caller)", metavar="FILE"),
    Option("client_names", repeated(_client_name),
           "a name the caller's certificate must carry, as its CN or a DNS SAN (repeatable; "
           "with --client-ca; default kube-apiserver)", "list", "NAME"),
    Option("metrics_listen", _metrics_listen,
           "serve /metrics on this HOST:PORT of its own (HTTPS, the serving certificate) "
           "instead of on --listen's port", metavar="HOST:PORT"),
    Option("metrics_auth", _metrics_auth,
           "kubernetes: /metrics needs a bearer token TokenReview accepts and "
           "SubjectAccessReview allows `get` on /metrics (needs --metrics-listen and a "
           "cluster); none: open to whoever reaches the port"),
    Option("demo", parse_bool, "use the embedded demo inventory (implies --offline)", "switch"),
    Option("nodes", str, "static NodeList file (kubectl get nodes -o json)", metavar="FILE"),
    Option("catalog", str, "static layer catalog JSON (preload in live mode)", metavar="FILE"),
    Option("offline", parse_bool, "never contact registries", "switch"),
    Option("kubeconfig", str, "kubeconfig for the live inventory off-cluster", metavar="FILE"),
    Option("inflight_seconds", float,
           "how long a just-bound pod's layers count on its node before the kubelet reports them"),
    Option("stale_seconds", float,
           "a watch failing this long makes the inventory stale: not ready, and pods left to "
           "the scheduler until it answers again (live mode)"),
    Option("pending_seconds", float,
           "how long a reviewed pod counts on its preferred node for spreading, unless its "
           "bind is seen first (live mode)"),
    Option("min_bytes", parse_size,
           "no preference for a node holding fewer bytes of the pod (default 23MiB)",
           metavar="SIZE"),
    Option("full_bytes", parse_size,
           "bytes present that earn the full absolute weight (default 1000MiB)", metavar="SIZE"),
    Option("max_weight", int, "weight of a node saving the whole pull (1..100)"),
    Option("share", float,
           "0..1: weight by the share of the pod's pull a node saves (1), by absolute bytes up "
           "to --full-bytes (0), or a blend (default: 1 live, 0 with --demo/--nodes)"),
    Option("lack_bytes", parse_size,
           "weigh a node by the bytes it lacks beyond the best node: one lacking this many "
           "more weighs nothing (default: 23MiB live, 0 with --demo/--nodes; 0: by --share)",
           metavar="SIZE"),
    Option("baseline", parse_bool, "add the baseline term that keeps the scale absolute"),
    Option("max_terms", int, "weighted preferred terms per pod"),
    Option("max_nodes", int, "hostnames over all terms of one pod"),
    Option("spread_step", int,
           "weight taken off a node per sibling pod above the emptiest candidate (live mode)"),
    Option("replicas", int,
           "webhook replicas serving the cluster (the Deployment's replicas; live mode): the "
           "replicas see each other's reviews through the pod watch; only while a replica's "
           "own reviews go unseen there for over a second (the watch is behind) does it take "
           "1/replicas of the spread guard's room"),
    Option("max_patch_bytes", parse_size,
           "most bytes a patch may add to a pod (it lives in etcd with the pod): hostnames of "
           "the lowest weights are left out first, and the annotation counts them (>= 1KiB; "
           "default 4096)", metavar="SIZE"),
    Option("max_label_terms", int,
           "preferred terms per pod that match the node agent's layer labels instead of "
           "naming hostnames (0..10; 0: hostnames only)"),
    Option("label_min_nodes", int,
           "use a layer label only when at least this many candidate nodes carry it with a "
           "live agent (fewer are named by hostname)"),
    Option("max_not_in", int,
           "hostnames kept out of the label terms (nodes the spread guard closed, labels no "
           "live agent vouches for) before a pod is steered by hostnames alone"),
    Option("label_max_nodes", int,
           "hostnames a pod steered by layer labels may still name (siblings, a seed node, "
           "nodes without an agent), each group whole or not at all"),
    Option("agent_namespace", str,
           "namespace of the node agents' Leases (live mode): a node's layer labels and "
           "NodeLayers object count while its agent's Lease is renewed", metavar="NAMESPACE"),
    Option("holdout", float,
           "share of workloads (0..1) left unsteered, so that `report` measures what steering "
           "changes against them (0: off; namespaces labelled "
           "layer-locality.io/holdout=exempt are always steered)", metavar="FRACTION"),
    Option("holdout_seed", str,
           "salts which workloads are held out: every replica must use the same; a new seed "
           "draws new groups", metavar="SEED"),
    Option("memo_entries", int,
           "reviews' pod-independent scoring kept for replicas of one template, per inventory "
           "version (LRU, also bounded to 8 MiB; 0: off)"),
    Option("budget_ms", int, "time a review may wait for layer sources (registries)"),
    Option("max_request_bytes", parse_size, "largest AdmissionReview body accepted (default 7MiB)",
           metavar="SIZE"),
    Option("max_connections", int,
           "open client connections at most; past it the least recently active idle one is "
           "closed, else the new one refused"),
    Option("request_read_seconds", float,
           "time from a request's first byte until head and body are read, else 408/closed"),
    Option("idle_seconds", float, "close a keep-alive connection idle this long"),
    Option("drain_seconds", float,
           "after SIGTERM, keep serving this long (answers close their connection, /readyz "
           "503) before closing connections: clients reconnect through the Service to a "
           "replica that stays; 0 closes at once"),
    Option("tls_handshake_seconds", float, "time a TLS handshake may take"),
    Option("log_level", parse_level, "debug, info, warning or error"),
    Option("registry_allow", repeated(_host_entry),
           "registry host to allow besides the defaults (repeatable; HOST, HOST:PORT, *.DOMAIN)",
           "list", "HOST[:PORT]"),
    Option("registry_auth", str, "Docker config.json with registry credentials", metavar="FILE"),
    Option("registry_ca", str, "extra CA bundle (PEM) for registry TLS", metavar="FILE"),
    Option("registry_insecure", repeated(_insecure_entry),
           "registry reached over plain HTTP (repeatable)", "list", "HOST:PORT"),
    Option("registry_mirror", repeated(_mirror_entry),
           "fetch images of registry FROM from TO (repeatable)", "list", "FROM=TO"),
    Option("registry_timeout_ms", int, "timeout of one registry request"),
    Option("registry_concurrency", int, "concurrent requests per registry host"),
    Option("registry_cache_digests", int, "digests kept in the registry layer cache (LRU)"),
    Option("registry_tag_ttl_seconds", float, "how long a tag -> digest answer is trusted"),
    Option("registry_negative_ttl_seconds", float,
           "first retry delay after a failed lookup (doubles per failure, max 10 min)"),
)
REGISTRY_OPTIONS = tuple(o.name for o in OPTIONS if o.name.startswith("registry_"))
SCORING_OPTIONS = ("min_bytes", "full_bytes", "max_weight", "share", "lack_bytes", "baseline",
                   "max_terms",
                   "max_nodes", "spread_step", "replicas", "max_patch_bytes", "max_label_terms",
                   "label_min_nodes", "max_not_in", "label_max_nodes")
SOURCE_OPTIONS = ("demo", "nodes", "catalog", "offline", "kubeconfig", "inflight_seconds",
                  "pending_seconds", "stale_seconds", "agent_namespace", *SCORING_OPTIONS,
                  "holdout", "holdout_seed", "budget_ms", *REGISTRY_OPTIONS)


def add_options(parser: argparse.ArgumentParser, names: Sequence[str] | None = None) -> None:
    """Flags for `names` (all options by default) plus --config; defaults stay unset so that
    env and YAML values show through."""
    parser.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS,
                        help=f"YAML settings file (snake_case keys); env {ENV_PREFIX}CONFIG")
    for option in OPTIONS:
        if names is not None and option.name not in names:
            continue
        if option.flag_kind == "switch":
            parser.add_argument(option.flag, dest=option.name, action="store_const", const=True,
                                default=argparse.SUPPRESS, help=f"{option.help} [{option.env}]")
        elif option.flag_kind == "list":
            parser.add_argument(option.flag, dest=option.name, action="append",
                                default=argparse.SUPPRESS, metavar=option.metavar,
                                help=f"{option.help} [{option.env}, comma-separated]")
        else:
            sized = "; SIZE: bytes, or with a unit: 23MiB, 1GB" if option.metavar == "SIZE" else ""
            parser.add_argument(option.flag, dest=option.name, default=argparse.SUPPRESS,
                                metavar=option.metavar,
                                help=f"{option.help} [{option.env}{sized}]")
