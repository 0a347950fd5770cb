"""Settings: one frozen dataclass, filled from env `LAYER_LOCALITY_*` < YAML `--config` < flags.

Every option is declared once in OPTIONS; argparse flags, env names and YAML keys derive from
it, so the three spellings cannot drift apart.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from webhook.core.holdout import HoldoutPolicy
from webhook.core.memo import MAX_ENTRIES as MEMO_ENTRIES
from webhook.core.scoring import MiB, ScoringPolicy

ENV_PREFIX = "LAYER_LOCALITY_"
_POLICY = ScoringPolicy()  # the scoring defaults live with the scoring code
STATIC_SHARE = 0.0  # without a pod watch there is no spread guard: stay on the absolute scale
AGENT_NAMESPACE = "layer-locality-agent"  # the node agents' namespace in the shipped manifests


class ConfigError(ValueError):
    """A setting has an invalid value; the message names the setting and its origin."""


# The drain after SIGTERM must end well inside Kubernetes' default grace period (30 s).
MAX_DRAIN_SECONDS = 25.0


@dataclass(frozen=True, slots=True)
class Settings:
    listen: str = "0.0.0.0:8443"
    tls_cert: str = "certs/tls.crt"
    tls_key: str = "certs/tls.key"
    tls_reload_seconds: float = 10.0
    client_ca: str | None = None
    client_names: tuple[str, ...] = ("kube-apiserver",)
    metrics_listen: str = ""
    metrics_auth: str = "none"
    demo: bool = False
    nodes: str | None = None
    catalog: str | None = None
    offline: bool = False
    kubeconfig: str | None = None
    inflight_seconds: float = 600.0
    pending_seconds: float = 60.0
    stale_seconds: float = 60.0
    min_bytes: int = _POLICY.min_bytes
    full_bytes: int = _POLICY.full_bytes
    max_weight: int = _POLICY.max_weight
    share: float | None = None  # None: 1 with the pod watch (live), 0 for static inventories
    lack_bytes: int | None = None  # None: 23 MiB with the pod watch (live), 0 for static ones
    baseline: bool = _POLICY.baseline
    max_terms: int = _POLICY.max_terms
    max_nodes: int = _POLICY.max_nodes
    spread_step: int = _POLICY.spread_step
    replicas: int = _POLICY.replicas
    max_patch_bytes: int = _POLICY.max_patch_bytes
    max_label_terms: int = _POLICY.max_label_terms
    label_min_nodes: int = _POLICY.label_min_nodes
    max_not_in: int = _POLICY.max_not_in
    label_max_nodes: int = _POLICY.label_max_nodes
    agent_namespace: str = AGENT_NAMESPACE
    holdout: float = 0.0
    holdout_seed: str = ""
    memo_entries: int = MEMO_ENTRIES
    budget_ms: int = 250
    max_request_bytes: int = 7 * MiB
    max_connections: int = 512
    request_read_seconds: float = 1.0
    # Over Go's 90 s (the API server's webhook client drops idle connections then): the
    # client closes first, so no request races a close of ours (a POST is not retried).
    idle_seconds: float = 120.0
    drain_seconds: float = 5.0
    tls_handshake_seconds: float = 5.0
    log_level: str = "info"
    registry_allow: tuple[str, ...] = ()
    registry_auth: str | None = None
    registry_ca: str | None = None
    registry_insecure: tuple[str, ...] = ()
    registry_mirror: tuple[str, ...] = ()
    registry_timeout_ms: int = 10000
    registry_concurrency: int = 4
    registry_cache_digests: int = 16384
    registry_tag_ttl_seconds: float = 300.0
    registry_negative_ttl_seconds: float = 30.0

    @property
    def policy(self) -> ScoringPolicy:
        return ScoringPolicy(
            min_bytes=self.min_bytes,
            full_bytes=self.full_bytes,
            max_weight=self.max_weight,
            share=self.effective_share,
            lack_bytes=self.effective_lack_bytes,
            baseline=self.baseline,
            max_terms=self.max_terms,
            max_nodes=self.max_nodes,
            spread_step=self.spread_step,
            replicas=self.replicas,
            max_patch_bytes=self.max_patch_bytes,
            max_label_terms=self.max_label_terms,
            label_min_nodes=self.label_min_nodes,
            max_not_in=self.max_not_in,
            label_max_nodes=self.label_max_nodes,
        )

    @property
    def holdout_policy(self) -> HoldoutPolicy:
        return HoldoutPolicy(self.holdout, self.holdout_seed)

    @property
    def effective_share(self) -> float:
        """`--share`, else by inventory: live mode weights by the share of the pod's pull (its
        spread guard keeps replicas apart); static inventories (--demo, --nodes) have no pod
        watch, hence no guard, and keep the first release's absolute scale."""
        if self.share is not None:
            return self.share
        return STATIC_SHARE if (self.demo or self.nodes) else _POLICY.share

    @property
    def effective_lack_bytes(self) -> int:
        """`--lack-bytes`, else by inventory: live mode weighs nodes by what they lack beyond
        the best (its spread guard keeps a workload's pods within maxSkew, which such steep
        weights no longer leave to the scheduler's spreading score); static inventories have
        no guard and weigh as `effective_share` says."""
        if self.lack_bytes is not None:
            return self.lack_bytes
        return 0 if (self.demo or self.nodes) else _POLICY.lack_bytes

    @property
    def listen_address(self) -> tuple[str, int]:
        return _address(self.listen)

    @property
    def metrics_address(self) -> tuple[str, int] | None:
        return _address(self.metrics_listen) if self.metrics_listen else None


def _address(listen: str) -> tuple[str, int]:
    host, _, port = listen.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "ki": 1 << 10, "kib": 1 << 10,
          "m": 10**6, "mb": 10**6, "mi": 1 << 20, "mib": 1 << 20,
          "g": 10**9, "gb": 10**9, "gi": 1 << 30, "gib": 1 << 30}


def parse_size(value: object) -> int:
    """`24117248`, `23MiB`, `23Mi`, `1GB` -> bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE_RE.match(str(value))
    if not match:
        raise ValueError(f"not a size: {value!r} (use bytes or a unit like 23MiB)")
    return int(match.group(1)) * _UNITS[(match.group(2) or "").lower()]


def parse_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {value!r}")


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


def _level(value: object) -> str:
    text = str(value).lower()
    if text not in ("debug", "info", "warning", "error"):
        raise ValueError("expected debug, info, warning or error")
    return text


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
    Option("log_level", _level, "debug, info, warning or error"),
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
_BY_NAME = {option.name: option for option in OPTIONS}
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


def load_settings(flags: Mapping[str, Any], env: Mapping[str, str]) -> Settings:
    """Merge env < YAML < flags into Settings; ConfigError names the bad setting."""
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}  # where each value came from, for error messages
    for option in OPTIONS:
        if option.env in env:
            origins[option.name] = f"env {option.env}"
            values[option.name] = _convert(option, env[option.env], origins[option.name])
    config_path = flags.get("config") or env.get(ENV_PREFIX + "CONFIG")
    if config_path:
        for key, raw in _read_yaml(Path(config_path)).items():
            known = _BY_NAME.get(key)
            if known is None:
                raise ConfigError(f"{config_path}: unknown setting {key!r}")
            origins[key] = f"{config_path}: {key}"
            values[key] = _convert(known, raw, origins[key])
    for key, raw in flags.items():
        known = _BY_NAME.get(key)
        if known is not None:
            origins[key] = known.flag
            values[key] = _convert(known, raw, known.flag)
    settings = Settings(**values)
    try:
        settings.policy  # noqa: B018  (validates the scoring knobs together)
    except ValueError as exc:
        # ScoringPolicy's messages start with the field: name the flag and where it was set.
        field = next((name for name in SCORING_OPTIONS if str(exc).startswith(name)), None)
        if field is None:
            raise ConfigError(str(exc)) from exc
        raise ConfigError(f"{_where(field, origins)}: {exc}") from exc
    if settings.demo and settings.nodes:
        raise ConfigError("--demo and --nodes are alternatives; give one")
    if settings.budget_ms < 0 or settings.max_request_bytes < 1024:
        raise ConfigError("budget_ms must be >= 0 and max_request_bytes >= 1KiB")
    for name in ("tls_reload_seconds", "inflight_seconds", "pending_seconds", "stale_seconds",
                 "request_read_seconds", "idle_seconds", "tls_handshake_seconds"):
        if getattr(settings, name) <= 0:
            raise ConfigError(f"{_where(name, origins)}: {name} must be > 0")
    if not 0.0 <= settings.holdout < 1.0:
        raise ConfigError(f"{_where('holdout', origins)}: holdout must be >= 0 and < 1")
    if not 0 <= settings.drain_seconds <= MAX_DRAIN_SECONDS:  # NaN fails too
        raise ConfigError(f"{_where('drain_seconds', origins)}: drain_seconds must be within "
                          f"0..{MAX_DRAIN_SECONDS:g} (under the pod's grace period)")
    if settings.metrics_auth == "kubernetes" and not settings.metrics_listen:
        raise ConfigError(f"{_where('metrics_auth', origins)}: metrics_auth kubernetes needs "
                          "metrics_listen (a port of its own for /metrics)")
    if settings.metrics_listen and settings.metrics_listen == settings.listen:
        raise ConfigError(f"{_where('metrics_listen', origins)}: metrics_listen must differ "
                          "from listen")
    if settings.client_ca is not None and not settings.client_names:
        raise ConfigError(f"{_where('client_names', origins)}: client_ca needs at least one "
                          "client name")
    if settings.memo_entries < 0:
        raise ConfigError(f"{_where('memo_entries', origins)}: memo_entries must be >= 0")
    if settings.max_connections < 1:
        raise ConfigError(f"{_where('max_connections', origins)}: max_connections must be >= 1")
    if (settings.registry_timeout_ms < 1 or settings.registry_concurrency < 1
            or settings.registry_cache_digests < 1 or settings.registry_tag_ttl_seconds < 0
            or settings.registry_negative_ttl_seconds < 0):
        raise ConfigError("registry timeout, concurrency and cache size must be >= 1, TTLs >= 0")
    return settings


def _where(name: str, origins: Mapping[str, str]) -> str:
    """`--flag`, or `env X (--flag)` / `file: key (--flag)`: where a bad value was set."""
    flag = _BY_NAME[name].flag
    origin = origins.get(name, f"default of {flag}")
    return origin if origin == flag else f"{origin} ({flag})"


def _convert(option: Option, raw: object, origin: str) -> Any:
    try:
        return option.convert(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{origin}: {exc}") from exc


def one_document(text: str | bytes, source: str, what: str,
                 loader: type[yaml.SafeLoader] | None = None) -> Any:
    """The one YAML (or JSON) document of `text`; ValueError with a one-line message naming
    `source` for a syntax error or a stream of several documents (`what`: what one document
    should be, for the message). `loader`: a safe loader class (libyaml's CSafeLoader for big
    files); PyYAML's SafeLoader by default."""
    try:
        documents = [d for d in yaml.load_all(text, Loader=loader or yaml.SafeLoader)
                     if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ValueError(f"{source}: not YAML/JSON{where}: {problem}") from exc
    if len(documents) > 1:
        kinds = ", ".join(str(d.get("kind", "mapping")) if isinstance(d, Mapping)
                          else type(d).__name__ for d in documents[:5])
        raise ValueError(f"{source}: {len(documents)} YAML documents ({kinds}); expected one "
                         f"{what}: split the file or give the one object")
    return documents[0] if documents else None


def _read_yaml(path: Path) -> Mapping[str, Any]:
    try:
        data = one_document(path.read_text(), str(path), "mapping of settings")
    except OSError as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ConfigError(f"{path}: expected a mapping of settings")
    return data

