"""Registry layer source: OCI distribution client, auth, SSRF guard, caching resolver.

`build_resolver(settings)` is the one entry point wiring needs; docs/registry.md describes the
configuration, the security model, caching and budgets.
"""

from __future__ import annotations

import logging
import ssl
from pathlib import Path

from webhook.config import ConfigError, Settings
from webhook.registry.auth import AuthError, BasicCredentials, load_docker_config
from webhook.registry.client import RegistryClient, RegistryError
from webhook.registry.guard import GuardError, HostPolicy, parse_mirrors
from webhook.registry.resolver import RegistryResolver, ResolverLimits, ResolverStats

log = logging.getLogger(__name__)

__all__ = [
    "RegistryClient",
    "RegistryError",
    "RegistryResolver",
    "ResolverLimits",
    "ResolverStats",
    "build_resolver",
]


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
