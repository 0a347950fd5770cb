"""Which registry hosts may be contacted: the allowlist and the SSRF address checks. Pure.

Image names come from users, so the host part of a reference is untrusted input. Rules:

- A host is contacted only when the policy allows it: an allowlist entry `HOST` (port 443),
  `HOST:PORT` (that port only) or `*.SUFFIX` (any name under SUFFIX, port 443), an entry of the
  insecure list (`HOST:PORT`, plain HTTP), a mirror target, or a *companion* of an allowed
  registry (the API, token and blob hosts a public registry is known to use, e.g. docker.io ->
  registry-1.docker.io, auth.docker.io).
- An IP literal that is not globally routable (loopback, RFC 1918 private, link-local including
  the 169.254.169.254 metadata address, CGNAT, unique-local IPv6, IPv4-mapped forms of those...)
  is refused unless that exact address (and port) is listed: a wildcard never matches an IP.
- Names matched only through a wildcard, the default list or a companion must also *resolve*
  to public addresses (`address_allowed`, applied by the client's resolver), so DNS cannot
  point an allowed-looking name at the cluster's internal network. Names the operator listed
  exactly (an in-cluster mirror, say) may resolve to private addresses.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

DEFAULT_ALLOW: tuple[str, ...] = (
    "docker.io",
    "registry.k8s.io",
    "ghcr.io",
    "quay.io",
    "gcr.io",
    "*.pkg.dev",
    "public.ecr.aws",
    "mcr.microsoft.com",
)

# Hosts a registry hands clients to (API endpoint, token realm, blob CDN redirects). Allowing the
# registry allows these; they are matched on port 443 and must resolve to public addresses.
COMPANIONS: Mapping[str, tuple[str, ...]] = {
    "docker.io": ("registry-1.docker.io", "auth.docker.io", "production.cloudflare.docker.com"),
    "ghcr.io": ("pkg-containers.githubusercontent.com",),
    "quay.io": ("cdn.quay.io", "cdn01.quay.io", "cdn02.quay.io", "cdn03.quay.io"),
    "gcr.io": ("storage.googleapis.com",),
    "registry.k8s.io": ("*.pkg.dev",),
    "mcr.microsoft.com": ("*.data.mcr.microsoft.com",),
}

# The API host of a registry name (`docker.io` is an alias, its API lives elsewhere).
API_HOSTS: Mapping[str, str] = {"docker.io": "registry-1.docker.io"}

HTTPS_PORT = 443
_HOST_RE = re.compile(r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*$")


class GuardError(ValueError):
    """A host or address that must not be contacted, or a malformed host entry."""


def split_host_port(text: str, default_port: int | None = None) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]`, `[v6]:port`, `1.2.3.4:5` -> (lower-case host, port)."""
    text = text.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise GuardError(f"bad host {text!r}: unclosed '['")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise GuardError(f"bad host {text!r}")
        port_text = rest[1:] if rest else ""
    elif text.count(":") > 1:  # a bare IPv6 literal
        host, port_text = text, ""
    else:
        host, _, port_text = text.partition(":")
    host = host.rstrip(".")
    if not host:
        raise GuardError(f"bad host {text!r}: empty")
    if port_text:
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise GuardError(f"bad port in {text!r}")
        return host, int(port_text)
    return host, default_port


def parse_ip(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


def is_public_address(address: IPAddress) -> bool:
    """Globally routable unicast (IPv4-mapped/compatible IPv6 judged by the IPv4 inside)."""
    if isinstance(address, ipaddress.IPv6Address):
        mapped = address.ipv4_mapped or address.sixtofour
        if mapped is not None:
            return is_public_address(mapped)
        if address.teredo is not None:
            return False
    return address.is_global and not address.is_multicast


def format_host(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    reason: str
    explicit: bool = False  # the operator named this exact host: private addresses are fine


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """The allowlist. Build with `HostPolicy.build`; `check` answers for one host and port."""

    exact: frozenset[tuple[str, int]] = frozenset()  # operator-listed (host, port)
    listed: frozenset[tuple[str, int]] = frozenset()  # default-list / companion (host, port)
    suffixes: frozenset[str] = frozenset()  # ".pkg.dev" for "*.pkg.dev" (port 443)
    insecure: frozenset[tuple[str, int]] = frozenset()  # plain HTTP allowed
    defaults: bool = field(default=True)

    @classmethod
    def build(
        cls,
        allow: Iterable[str] = (),
        insecure: Iterable[str] = (),
        mirrors: Iterable[str] = (),
        defaults: bool = True,
    ) -> HostPolicy:
        exact: set[tuple[str, int]] = set()
        listed: set[tuple[str, int]] = set()
        suffixes: set[str] = set()
        insecure_set: set[tuple[str, int]] = set()

        def add(entry: str, operator: bool) -> None:
            if entry.startswith("*."):
                suffix = entry[1:].lower().rstrip(".")
                if not _HOST_RE.match(suffix[1:]):
                    raise GuardError(f"bad wildcard {entry!r}")
                suffixes.add(suffix)
                return
            host, port = split_host_port(entry, HTTPS_PORT)
            assert port is not None
            if parse_ip(host) is None and not _HOST_RE.match(host):
                raise GuardError(f"bad host {entry!r}")
            (exact if operator else listed).add((host, port))
            for companion in COMPANIONS.get(host, ()) if port == HTTPS_PORT else ():
                add(companion, operator=False)
            api = API_HOSTS.get(host)
            if api is not None and port == HTTPS_PORT:
                add(api, operator=False)

        if defaults:
            for entry in DEFAULT_ALLOW:
                add(entry, operator=False)
        for entry in allow:
            add(entry, operator=True)
        for entry in insecure:
            host, port = split_host_port(entry)
            if port is None:
                raise GuardError(f"insecure registry {entry!r} needs HOST:PORT")
            insecure_set.add((host, port))
            add(format_host(host, port), operator=True)
        for target in mirrors:
            host, port = split_host_port(target, HTTPS_PORT)
            assert port is not None
            add(format_host(host, port), operator=True)
        return cls(frozenset(exact), frozenset(listed), frozenset(suffixes),
                   frozenset(insecure_set), defaults)

    def check(self, host: str, port: int) -> Decision:
        host = host.lower().strip("[]").rstrip(".")
        if (host, port) in self.exact or (host, port) in self.insecure:
            return Decision(True, "listed", explicit=True)
        address = parse_ip(host)
        if address is not None:
            if not is_public_address(address):
                return Decision(False, f"address {host} is not public and not listed")
            if (host, port) in self.listed:
                return Decision(True, "listed")
            return Decision(False, f"address {host} is not listed")
        if (host, port) in self.listed:
            return Decision(True, "default")
        if port == HTTPS_PORT and any(host.endswith(s) and len(host) > len(s)
                                      for s in self.suffixes):
            return Decision(True, "wildcard")
        return Decision(False, f"host {format_host(host, port)} is not in the allowlist")

    def bucket(self, host: str) -> str:
        """The allowlist entry a host falls under: `*.pkg.dev` for any Artifact Registry host.
        Per-registry state (metric labels, concurrency slots, pauses) is keyed by it, so image
        names that invent hostnames under a wildcard cannot grow that state without bound."""
        bare = host.lower().rstrip(".")
        name = re.sub(r":\d+$", "", bare) if not bare.startswith("[") else bare
        if any(name == listed for listed, _ in self.exact | self.listed):
            return bare
        for suffix in sorted(self.suffixes, key=len, reverse=True):
            if name.endswith(suffix) and len(name) > len(suffix):
                return "*" + suffix
        return bare

    def scheme(self, host: str, port: int) -> str:
        return "http" if (host.lower().strip("[]"), port) in self.insecure else "https"


def address_allowed(address: IPAddress, decision: Decision) -> bool:
    """May a connection go to `address`, which the host judged by `decision` resolved to?"""
    return decision.allowed and (decision.explicit or is_public_address(address))


def api_endpoint(
    registry: str, mirrors: Mapping[str, str], policy: HostPolicy
) -> tuple[str, str, int]:
    """(scheme, host, port) to contact for the images of `registry` (after mirrors and the
    docker.io alias). Raises GuardError when the policy refuses it."""
    target = mirrors.get(registry.lower(), registry)
    host, port = split_host_port(target)
    host = API_HOSTS.get(host, host) if port is None else host
    if port is None:
        port = HTTPS_PORT
    decision = policy.check(host, port)
    if not decision.allowed:
        raise GuardError(f"registry {registry} refused: {decision.reason}")
    return policy.scheme(host, port), host, port


def parse_mirrors(entries: Iterable[str]) -> dict[str, str]:
    """`FROM=TO` entries -> {from registry: to host[:port]}."""
    mirrors: dict[str, str] = {}
    for entry in entries:
        source, sep, target = entry.partition("=")
        source, target = source.strip().lower(), target.strip().lower()
        if not sep or not source or not target:
            raise GuardError(f"bad mirror {entry!r}: expected FROM=TO")
        split_host_port(target)
        if source in ("index.docker.io", "registry-1.docker.io"):
            source = "docker.io"
        mirrors[source] = target
    return mirrors
