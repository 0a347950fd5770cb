"""`layer-locality agent`'s flags: declared once here, so the flag, its environment variable
(`LAYER_LOCALITY_<NAME>`, the project's convention; env < flags) and its check cannot drift.
argparse only: importing this module pulls in neither grpc nor the kubernetes client."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.config import ConfigError
from webhook.core.layerlabels import LabelRule, MiB
from webhook.inventory.agentlease import (
    DEFAULT_LEASE_SECONDS,
    MAX_LEASE_SECONDS,
    MIN_LEASE_SECONDS,
)
from webhook.options import ENV_PREFIX
from webhook.value_parsers import parse_bool, parse_level

# containerd.py's defaults, repeated so that parsing flags does not import grpc (a unit test
# checks they agree).
DEFAULT_SOCKET = "/run/containerd/containerd.sock"
DEFAULT_NAMESPACE = "k8s.io"
_RULE = LabelRule()
MAX_RESYNC_SECONDS = 86_400  # the CRD's bound on spec.resyncSeconds


@dataclass(frozen=True, slots=True)
class AgentOptions:
    node_name: str | None = None
    containerd_socket: str = DEFAULT_SOCKET
    containerd_namespace: str = DEFAULT_NAMESPACE
    resync_seconds: int = 300
    lease_seconds: int = DEFAULT_LEASE_SECONDS
    lease_namespace: str | None = None  # None: the pod's namespace (command.lease_namespace)
    label_min_mib: int = _RULE.min_bytes // MiB
    max_labels: int = _RULE.max_labels
    remove_labels: bool = False
    once: bool = False
    print: bool = False
    listen: str | None = None
    kubeconfig: str | None = None
    log_level: str = "info"

    @property
    def label_rule(self) -> LabelRule:
        return LabelRule(min_bytes=self.label_min_mib * MiB, max_labels=self.max_labels)


@dataclass(frozen=True, slots=True)
class Flag:
    name: str  # the AgentOptions field; flag --name-with-dashes, env LAYER_LOCALITY_NAME
    convert: Callable[[Any], Any]
    help: str
    switch: bool = False
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return ENV_PREFIX + self.name.upper()


def _bounded(low: int, high: int) -> Callable[[Any], int]:
    def convert(value: Any) -> int:
        number = int(value)
        if not low <= number <= high:
            raise ValueError(f"must be within {low}..{high}, not {number}")
        return number
    return convert


def _listen(value: Any) -> str:
    _, sep, port = str(value).rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT, not {value!r}")
    return str(value)


def _text(value: Any) -> str:
    text = str(value).strip()
    if not text:
        raise ValueError("must not be empty")
    return text


FLAGS: tuple[Flag, ...] = (
    Flag("node_name", _text, "this node's name (default: env NODE_NAME, the downward API)",
         metavar="NAME"),
    Flag("containerd_socket", _text,
         f"containerd's gRPC socket, read-only use (default: {DEFAULT_SOCKET})", metavar="PATH"),
    Flag("containerd_namespace", _text,
         f"containerd namespace holding kubelet's images (default: {DEFAULT_NAMESPACE})",
         metavar="NS"),
    Flag("resync_seconds", _bounded(1, MAX_RESYNC_SECONDS),
         "full re-read of the runtime; NodeLayers is written only when it changed "
         "(default: 300)", metavar="N"),
    Flag("lease_seconds", _bounded(MIN_LEASE_SECONDS, MAX_LEASE_SECONDS),
         f"the node's agent Lease lasts this long and is renewed every third of it "
         f"({MIN_LEASE_SECONDS}..{MAX_LEASE_SECONDS}; default: {DEFAULT_LEASE_SECONDS})",
         metavar="N"),
    Flag("lease_namespace", _text,
         "namespace of the agent Leases (default: the pod's, env POD_NAMESPACE, else the "
         "service account's namespace file, else layer-locality-agent)", metavar="NS"),
    Flag("label_min_mib", _bounded(1, 1 << 20),
         f"label the node with layers of at least this many MiB "
         f"(default: {_RULE.min_bytes // MiB})", metavar="MIB"),
    Flag("max_labels", _bounded(0, 200),
         f"most layer labels on the node, the largest layers first; 0: none, and the node's "
         f"existing layer labels are removed (default: {_RULE.max_labels})", metavar="N"),
    Flag("remove_labels", parse_bool,
         "remove every layer-locality.io/l. label from the node, then exit (uninstalling)",
         switch=True),
    Flag("once", parse_bool, "one pass, then exit", switch=True),
    Flag("print", parse_bool, "write the object as JSON to stdout instead of publishing",
         switch=True),
    Flag("listen", _listen, "serve /healthz, /readyz, /metrics (default: off)",
         metavar="HOST:PORT"),
    Flag("kubeconfig", _text, "kubeconfig (default: in-cluster, else env KUBECONFIG)",
         metavar="FILE"),
    Flag("log_level", parse_level, "debug, info, warning or error (default: info)"),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The agent's flags. Defaults stay unset so that the environment shows through."""
    for flag in FLAGS:
        if flag.switch:
            parser.add_argument(flag.flag, dest=flag.name, action="store_const", const=True,
                                default=argparse.SUPPRESS, help=f"{flag.help} [{flag.env}]")
        else:
            parser.add_argument(flag.flag, dest=flag.name, default=argparse.SUPPRESS,
                                metavar=flag.metavar, help=f"{flag.help} [{flag.env}]")


def agent_options(given: Mapping[str, Any], env: Mapping[str, str]) -> AgentOptions:
    """env `LAYER_LOCALITY_*` < flags (`given`: the parsed flags; other keys are ignored);
    ConfigError names the bad value's flag and where it was set."""
    values: dict[str, Any] = {}
    for flag in FLAGS:
        if flag.name in given:
            raw, origin = given[flag.name], flag.flag
        elif flag.env in env:
            raw, origin = env[flag.env], f"env {flag.env} ({flag.flag})"
        else:
            continue
        try:
            values[flag.name] = flag.convert(raw)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"agent: {origin}: {exc}") from exc
    if "node_name" not in values and env.get("NODE_NAME", "").strip():
        values["node_name"] = env["NODE_NAME"].strip()
    options = AgentOptions(**values)
    if options.remove_labels and (options.once or options.print):
        raise ConfigError("agent: --remove-labels runs alone (not with --once or --print)")
    return options
