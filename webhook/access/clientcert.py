"""The admission port's caller check: a client certificate the TLS layer verified against
--client-ca, naming one of --client-names (its subject's CN or a DNS SAN), as Gatekeeper
checks the API server's. Pure: the peer certificate comes in as the dict Python's ssl module
decodes (`getpeercert()`)."""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

# The probes a kubelet calls without a certificate; they say nothing about the cluster.
PROBE_PATHS = frozenset({"/healthz", "/readyz"})
Verdict = Literal["ok", "no_certificate", "wrong_name"]


@dataclass(frozen=True, slots=True)
class ClientPolicy:
    """The names a caller's certificate may carry (one is enough)."""

    names: frozenset[str]

    def verdict(self, peercert: Mapping[str, Any] | None) -> Verdict:
        if not peercert:
            return "no_certificate"
        return "ok" if peer_names(peercert) & self.names else "wrong_name"


def peer_names(peercert: Mapping[str, Any]) -> frozenset[str]:
    """The subject's common names and the DNS subject alternative names of a verified peer
    certificate (IP and URI SANs are not names the API server's certificate is issued to)."""
    names: set[str] = set()
    for rdn in peercert.get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                names.add(str(value))
    for kind, value in peercert.get("subjectAltName", ()):
        if kind == "DNS":
            names.add(str(value))
    return frozenset(names)


def describe(peercert: Mapping[str, Any] | None) -> str:
    """A short, bounded description of a refused caller's certificate, for the log."""
    if not peercert:
        return "no client certificate"
    names = sorted(peer_names(peercert))
    shown = ", ".join(name[:64] for name in names[:4])
    more = f" (+{len(names) - 4} more)" if len(names) > 4 else ""
    return f"certificate names {shown or '(none)'}{more}"


class PeerLog:
    """At most one line per peer address per `seconds`, for at most `peers` addresses (the
    oldest forgotten first): a flood from many addresses costs bounded memory, and a caller
    that retries does not fill the log."""

    def __init__(self, seconds: float = 60.0, peers: int = 1024) -> None:
        self.seconds = seconds
        self.peers = peers
        self._last: OrderedDict[str, float] = OrderedDict()

    def due(self, peer: str, now: float | None = None) -> bool:
        now = time.monotonic() if now is None else now
        last = self._last.get(peer)
        if last is not None and now - last < self.seconds:
            return False
        self._last[peer] = now
        self._last.move_to_end(peer)
        while len(self._last) > self.peers:
            self._last.popitem(last=False)
        return True


class RefusalWindow:
    """Admission calls refused and accepted over the last `seconds`: refusals with no call
    accepted mean the API server does not present an allowed certificate (every pod is then
    created unpatched); /readyz says so. Refusals are counted in buckets of `seconds / 5`,
    a few per reason: bounded whatever the rate."""

    def __init__(self, seconds: float = 300.0) -> None:
        self.seconds = seconds
        self.bucket = seconds / 5
        self.last_accepted = -float("inf")
        self._refused: dict[str, deque[list[float]]] = {}  # reason -> [[bucket start, count]]

    def refused(self, reason: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        start = now - now % self.bucket
        buckets = self._refused.setdefault(reason, deque(maxlen=6))
        if buckets and buckets[-1][0] == start:
            buckets[-1][1] += 1
        else:
            buckets.append([start, 1])

    def accepted(self, now: float | None = None) -> None:
        self.last_accepted = time.monotonic() if now is None else now

    def warning(self, now: float | None = None) -> str | None:
        now = time.monotonic() if now is None else now
        if now - self.last_accepted < self.seconds:
            return None
        recent = {reason: int(sum(count for start, count in buckets
                                  if now - (start + self.bucket) < self.seconds))
                  for reason, buckets in self._refused.items()}
        recent = {reason: count for reason, count in recent.items() if count}
        if not recent:
            return None
        counts = ", ".join(f"{count} {reason}" for reason, count in sorted(recent.items()))
        return (f"admission calls refused in the last {self.seconds:g} s ({counts}) and none "
                "accepted: pods are created unpatched. Is the API server presenting its "
                "client certificate (--admission-control-config-file), and is its name among "
                "--client-names? (docs/operations.md, Client certificates)")
