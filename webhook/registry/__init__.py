"""Registry layer source: OCI distribution client, auth, SSRF guard, caching resolver.

The settings become a resolver in webhook.serving.wiring (`build_resolver`): this package reads
no settings of its own. docs/registry.md describes the configuration, the security model,
caching and budgets.
"""

from __future__ import annotations

from webhook.registry.client import RegistryClient, RegistryError
from webhook.registry.resolver import RegistryResolver, ResolverLimits, ResolverStats

__all__ = [
    "RegistryClient",
    "RegistryError",
    "RegistryResolver",
    "ResolverLimits",
    "ResolverStats",
]
