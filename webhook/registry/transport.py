"""aiohttp plumbing of the registry client: the DNS guard every connection goes through,
response header folding and `Retry-After` parsing."""

from __future__ import annotations

import socket
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver

from webhook.registry.guard import HostPolicy, address_allowed, parse_ip


class GuardedResolver(AbstractResolver):
    """DNS answers pass `address_allowed`: a wildcard-allowed name may not resolve into the
    cluster's private network; operator-listed names may."""

    def __init__(self, policy: HostPolicy, inner: AbstractResolver | None = None) -> None:
        self._policy = policy
        self._inner = inner if inner is not None else DefaultResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        decision = self._policy.check(host, port)
        results = await self._inner.resolve(host, port, family)
        kept = []
        for result in results:
            address = parse_ip(result["host"])
            if address is not None and address_allowed(address, decision):
                kept.append(result)
        if not kept:
            raise OSError(f"refusing to connect to {host}: no allowed address ({decision.reason})")
        return kept

    async def close(self) -> None:
        await self._inner.close()


def response_headers(response: aiohttp.ClientResponse) -> dict[str, str]:
    result: dict[str, str] = {}
    for name, value in response.headers.items():
        # Keep the first of repeated headers; WWW-Authenticate challenges are joined.
        key = name.title()
        if key == "Www-Authenticate":
            key = "WWW-Authenticate"
            result[key] = f"{result[key]}, {value}" if key in result else value
        else:
            result.setdefault(key, value)
    return result


def parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, (parsedate_to_datetime(value) - datetime.now(UTC)).total_seconds())
    except (TypeError, ValueError):
        return None
