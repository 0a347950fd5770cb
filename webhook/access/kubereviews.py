"""TokenReview and SubjectAccessReview through the official client (the webhook's own
ServiceAccount needs `create` on both: the ClusterRole system:auth-delegator grants it)."""

from __future__ import annotations

from typing import Any

import orjson

from webhook.access.tokens import ReviewUnavailable, User

TIMEOUT_SECONDS = 5.0


class KubernetesReviews:
    def __init__(self, api_client: Any, timeout: float = TIMEOUT_SECONDS) -> None:
        from kubernetes import client

        self._authn = client.AuthenticationV1Api(api_client)
        self._authz = client.AuthorizationV1Api(api_client)
        self.timeout = timeout

    def authenticate(self, token: str) -> User | None:
        status = self._status(self._authn.create_token_review, {
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": token}})
        if not status.get("authenticated"):
            return None
        user = status.get("user")
        user = user if isinstance(user, dict) else {}
        extra = user.get("extra")
        extra = extra if isinstance(extra, dict) else {}
        groups = user.get("groups")
        return User(name=str(user.get("username", "")), uid=str(user.get("uid", "")),
                    groups=tuple(map(str, groups)) if isinstance(groups, list) else (),
                    extra=tuple((str(k), tuple(map(str, v))) for k, v in extra.items()
                                if isinstance(v, list)))

    def allowed(self, user: User, path: str, verb: str) -> bool:
        status = self._status(self._authz.create_subject_access_review, {
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user.name, "uid": user.uid, "groups": list(user.groups),
                     "extra": {k: list(v) for k, v in user.extra},
                     "nonResourceAttributes": {"path": path, "verb": verb}}})
        return bool(status.get("allowed"))

    def _status(self, create: Any, body: dict[str, Any]) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        try:
            response = create(body, _preload_content=False, _request_timeout=self.timeout)
            data = orjson.loads(response.data)
        except ApiException as exc:
            raise ReviewUnavailable(f"{body['kind']}: {exc.status} {exc.reason}") from exc
        except (HTTPError, OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
            raise ReviewUnavailable(f"{body['kind']}: {type(exc).__name__}: {exc}") from exc
        status = data.get("status") if isinstance(data, dict) else None
        return status if isinstance(status, dict) else {}
