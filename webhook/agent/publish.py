"""Publishing the NodeLayers object through the kubernetes client (CustomObjectsApi), per the
contract: create, else replace with the read resourceVersion; only when the content changed or
the heartbeat is older than the resync period. A 409 re-reads and retries; other failures raise
PublishError (the agent loop backs off and counts them)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
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
    thread); `written` / `conflicts` / `skipped` count what happened."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.written = self.conflicts = self.skipped = 0

    def publish(self, body: dict[str, Any], now: datetime | None = None) -> bool:
        """True when it wrote, False when the object was already current."""
        name = body["metadata"]["name"]
        now = now or datetime.now(UTC)
        for _ in range(CONFLICT_RETRIES):
            current = self._read(name)
            try:
                if current is None:
                    self.api.create_cluster_custom_object(GROUP, VERSION, PLURAL, body)
                else:
                    spec = current.get("spec") or {}
                    age = heartbeat_age(spec, now)
                    period = body["spec"]["resyncSeconds"]
                    if (not content_changed(spec, body["spec"]) and age is not None
                            and age < period):
                        self.skipped += 1
                        return False
                    replacement = {**body, "metadata": {
                        **body["metadata"],
                        "resourceVersion": current["metadata"]["resourceVersion"]}}
                    self.api.replace_cluster_custom_object(GROUP, VERSION, PLURAL, name,
                                                           replacement)
            except Exception as exc:
                if _status(exc) == 409:  # a concurrent write, or created meanwhile: re-read
                    self.conflicts += 1
                    continue
                raise PublishError(f"writing nodelayers/{name}: {_describe(exc)}") from exc
            self.written += 1
            return True
        raise PublishError(f"writing nodelayers/{name}: {CONFLICT_RETRIES} conflicts in a row")

    def _read(self, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.api.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)
        except Exception as exc:
            if _status(exc) == 404:
                return None
            raise PublishError(f"reading nodelayers/{name}: {_describe(exc)}") from exc
        return found


def _describe(exc: Exception) -> str:
    status = _status(exc)
    return f"HTTP {status} {getattr(exc, 'reason', '')}".strip() if status else repr(exc)
