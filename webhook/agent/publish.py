"""Publishing the NodeLayers object through the kubernetes client (CustomObjectsApi): written
only when its content (`platform`, `layers`, `images`, `truncated`) changed; `spec.heartbeat`
then says when the content was last written. The node's agent Lease (lease.py) says the agent
is alive, so an unchanged object costs the API server nothing.

The publisher remembers the spec and the resourceVersion it last wrote: an unchanged pass makes
no call at all, a changed one is a single update with that version. It reads the object only
when it knows no version: at start (the object from before a restart may be current already),
after a 409 (someone else wrote, or a write that timed out did land) and after a failure.

`refresh` (a callable, asked at each publish) restores the old heartbeat rule while it answers
True: also write when the heartbeat is older than the resync period. The agent sets it while
its Lease is not held (the Lease refused or not yet written), so the webhook's fallback for
nodes without a Lease, 3 x resyncSeconds since the heartbeat, keeps the node fresh.

Any failure other than a 409 raises PublishError (the agent loop backs off and counts them)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from webhook.inventory.nodelayers import GROUP, PLURAL, VERSION

from .nodelayers import content_changed

log = logging.getLogger(__name__)
CONFLICT_RETRIES = 5


class PublishError(Exception):
    pass


def _status(exc: Exception) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def heartbeat_age(spec: Mapping[str, Any], now: datetime) -> float | None:
    raw = spec.get("heartbeat")
    try:
        then = datetime.fromisoformat(str(raw).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (now - then).total_seconds()


class Publisher:
    """Writes one node's object. `api` is a kubernetes CustomObjectsApi (sync: call it from a
    thread); `written` / `conflicts` / `skipped` / `reads` count what happened."""

    def __init__(self, api: Any, refresh: Callable[[], bool] | None = None) -> None:
        self.api = api
        self.refresh = refresh
        self.written = self.conflicts = self.skipped = self.reads = 0
        self._spec: Mapping[str, Any] | None = None  # as last written (or read), None: unknown
        self._version: str | None = None  # its resourceVersion; None: read before writing

    def publish(self, body: dict[str, Any], now: datetime | None = None) -> bool:
        """True when it wrote, False when the object was already current."""
        name = body["metadata"]["name"]
        now = now or datetime.now(UTC)
        refresh = self.refresh is not None and self.refresh()
        for _ in range(CONFLICT_RETRIES):
            if self._version is None:
                self._spec, self._version = self._read(name)
            if self._spec is not None and not self._due(self._spec, body, now, refresh):
                self.skipped += 1
                return False
            try:
                if self._version is None:
                    written = self.api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
                else:
                    versioned = {**body, "metadata": {**body["metadata"],
                                                      "resourceVersion": self._version}}
                    written = self.api.replace_cluster_custom_object(GROUP, VERSION, PLURAL,
                                                                     name, versioned)
            except Exception as exc:
                self._spec = self._version = None  # read before the next attempt
                status = _status(exc)
                if status == 409:  # a concurrent write, or created meanwhile: re-read
                    self.conflicts += 1
                    continue
                if status == 404:  # deleted meanwhile: the read finds it gone, then create
                    continue
                raise PublishError(f"writing nodelayers/{name}: {_describe(exc)}") from exc
            self.written += 1
            self._spec = body["spec"]
            # No version in the answer: read before the next write rather than guess.
            metadata = written.get("metadata") if isinstance(written, Mapping) else None
            version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
            self._version = version if isinstance(version, str) and version else None
            if self._version is None:
                self._spec = None
            return True
        raise PublishError(f"writing nodelayers/{name}: {CONFLICT_RETRIES} conflicts in a row")

    @staticmethod
    def _due(current: Mapping[str, Any], body: Mapping[str, Any], now: datetime,
             refresh: bool) -> bool:
        if content_changed(current, body["spec"]):
            return True
        if not refresh:
            return False
        age = heartbeat_age(current, now)
        return age is None or age >= body["spec"]["resyncSeconds"]

    def _read(self, name: str) -> tuple[Mapping[str, Any] | None, str | None]:
        self.reads += 1
        try:
            found = self.api.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        except Exception as exc:
            if _status(exc) == 404:
                return None, None
            raise PublishError(f"reading nodelayers/{name}: {_describe(exc)}") from exc
        spec = found.get("spec") if isinstance(found, Mapping) else None
        metadata = found.get("metadata") if isinstance(found, Mapping) else None
        version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
        if not isinstance(version, str) or not version:
            return None, None
        return (spec if isinstance(spec, Mapping) else {}), version


def _describe(exc: Exception) -> str:
    status = _status(exc)
    return f"HTTP {status} {getattr(exc, 'reason', '')}".strip() if status else repr(exc)
