"""Token realms: may the realm a registry names in its `WWW-Authenticate: Bearer` challenge be
contacted, and may the registry's own credentials go with the token request? Pure.

Docker and containerd look credentials up by the registry host and send them to whatever realm
the registry names (GitLab's registry, docker_auth, Harbor behind a separate auth endpoint all
rely on it). That realm URL comes from the network, so here it must also pass the host policy:

- a realm the policy does not allow is never contacted (SSRF), nor one over plain HTTP unless
  its host and port are listed insecure;
- the registry's credentials go to the registry itself, to its known token service (a
  companion such as auth.docker.io for docker.io), or to a host the operator named exactly
  (`--registry-allow HOST:PORT`, `--registry-insecure`, a mirror target);
- a realm allowed only through the default list or a wildcard may be asked for an anonymous
  token (or with credentials listed for that realm host itself), never with the registry's.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from webhook.registry.guard import COMPANIONS, HTTPS_PORT, HostPolicy, format_host


@dataclass(frozen=True, slots=True)
class RealmVerdict:
    host: str  # lower case, no brackets ("" when the URL is unusable)
    port: int
    contact: bool  # the realm may be requested at all
    registry_credentials: bool  # the registry's config.json credentials may go with it
    reason: str

    @property
    def credentials_key(self) -> str:
        """The config.json key of the realm host itself (`host` on 443, else `host:port`)."""
        return self.host if self.port == HTTPS_PORT else format_host(self.host, self.port)


def judge_realm(realm: str, registry: str, endpoint: tuple[str, int],
                policy: HostPolicy) -> RealmVerdict:
    """The verdict on `realm` for the images of `registry` (its name in config.json and the
    companion table) served at `endpoint` (host, port)."""
    parts = urlsplit(realm)
    host = (parts.hostname or "").lower().rstrip(".")
    try:
        port = parts.port or (HTTPS_PORT if parts.scheme == "https" else 80)
    except ValueError:
        return RealmVerdict("", 0, False, False, f"token realm {realm!r} has a bad port")
    if parts.scheme not in ("http", "https") or not host:
        return RealmVerdict("", 0, False, False, f"token realm {realm!r} is not an http(s) URL")
    where = format_host(host, port)
    if parts.username is not None or parts.password is not None:
        # Credentials in the URL would bypass every rule below (and could be logged).
        return RealmVerdict(host, port, False, False,
                            f"token realm {where} carries credentials in its URL")
    decision = policy.check(host, port)
    if not decision.allowed:
        return RealmVerdict(host, port, False, False,
                            f"token realm {where} refused: {decision.reason}")
    if parts.scheme == "http" and policy.scheme(host, port) != "http":
        return RealmVerdict(host, port, False, False,
                            f"token realm {where}: plain HTTP is not allowed for this host "
                            "(only hosts listed with --registry-insecure)")
    if (host, port) == (endpoint[0].lower(), endpoint[1]):
        return RealmVerdict(host, port, True, True, "the realm is the registry itself")
    if port == HTTPS_PORT and parts.scheme == "https" and host in COMPANIONS.get(registry, ()):
        return RealmVerdict(host, port, True, True, f"the known token service of {registry}")
    if decision.explicit:
        return RealmVerdict(host, port, True, True, f"token realm {where} is listed exactly")
    return RealmVerdict(
        host, port, True, False,
        f"token realm {where} is allowed only by a {decision.reason} entry; the credentials "
        f"of {registry} go only to a realm listed exactly (--registry-allow {where})",
    )
