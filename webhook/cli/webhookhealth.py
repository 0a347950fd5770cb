"""What the installed webhook says about itself, for `explain`: its /readyz read through the
API server's service proxy (a probe path: open even with client certificates required). A
replica that refuses the API server's calls (client certificates misconfigured) or has not
synced says so there; explain repeats it, since its own answer is computed locally and would
not show that the real calls fail."""

from __future__ import annotations

from typing import Any

PROXY_SECONDS = 5.0


def warnings_of(status: int, text: str) -> list[str]:
    """The lines of a /readyz answer worth repeating: its `warning:` lines, or, when it is
    not ready, what it said (pure)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if status != 200:
        return [f"not ready ({status}): {'; '.join(lines)[:300] or 'no reason given'}"]
    return [line.removeprefix("warning:").strip() for line in lines
            if line.startswith("warning:")]


def webhook_warnings(api: Any, service: str, namespace: str,
                     timeout: float = PROXY_SECONDS) -> list[str]:
    """One replica's warnings through the Service (https port 443); [] when the Service is
    absent or unreachable (a webhook outside the cluster, a user without services/proxy)."""
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    try:
        response = api.connect_get_namespaced_service_proxy_with_path(
            f"https:{service}:443", namespace, "readyz", _preload_content=False,
            _request_timeout=timeout)
        return warnings_of(response.status, response.data.decode("utf-8", "replace"))
    except ApiException as exc:
        body = exc.body.decode() if isinstance(exc.body, bytes) else str(exc.body or "")
        # The API server's own Status (no endpoints, no such Service, forbidden) is not the
        # webhook speaking: nothing to repeat.
        if exc.status == 503 and body and not body.lstrip().startswith("{"):
            return warnings_of(503, body)
        return []
    except (HTTPError, OSError):
        return []
