"""The settings: one frozen dataclass with every option's default, and the values derived from
them (the scoring and holdout policies, the listen addresses).

Where each option is declared (its flag, env name, YAML key and check): webhook.options; how the
three sources are merged and checked: webhook.settings_load.
"""

from __future__ import annotations

from dataclasses import dataclass

from webhook.core.holdout import HoldoutPolicy
from webhook.core.memo import MAX_ENTRIES as MEMO_ENTRIES
from webhook.core.scoring import MiB, ScoringPolicy

_POLICY = ScoringPolicy()  # the scoring defaults live with the scoring code
STATIC_SHARE = 0.0  # without a pod watch there is no spread guard: stay on the absolute scale
AGENT_NAMESPACE = "layer-locality-agent"  # the node agents' namespace in the shipped manifests


class ConfigError(ValueError):
    """A setting has an invalid value; the message names the setting and its origin."""


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
