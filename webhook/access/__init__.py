"""Who may call the webhook: the API server's client certificate on the admission port, a
Kubernetes-authorized bearer token on the metrics port. The checks are pure where they can be
(names.py, tokens.bearer_token); the Kubernetes reviews run behind a protocol."""
