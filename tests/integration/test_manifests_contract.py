"""The contract the manifests are written against (DESIGN.md, issue 5): the names, ports,
paths and labels in manifests_fixture are the ones `layer-locality serve` and
`layer-locality certs` really use by default, imported from the `webhook` package; the other
manifests tests compare the rendered objects with these constants."""

from __future__ import annotations

from tests.integration.manifests_fixture import (
    EXEMPT_PATH,
    HOLDOUT_LABEL,
    NAMESPACE,
    SERVICE,
    SERVICE_DNS_NAMES,
    SERVING_PORT,
    WEBHOOK_PATH,
)


def test_contract_matches_package() -> None:
    """The contract constants (manifests_fixture) are the ones `serve` and `certs` really use
    by default."""
    from webhook import cli, config
    from webhook.serving import certs

    defaults = config.Settings()
    assert defaults.listen_address[1] == SERVING_PORT
    assert defaults.tls_cert == "certs/tls.crt"
    assert defaults.tls_key == "certs/tls.key"
    from webhook.core import holdout
    from webhook.serving import server

    assert (server.MUTATE_PATH, server.EXEMPT_PATH) == (WEBHOOK_PATH, EXEMPT_PATH)
    assert (holdout.HOLDOUT_LABEL, holdout.EXEMPT) == (HOLDOUT_LABEL, "exempt")
    certs_args = cli._parser().parse_args(["certs"])
    assert (certs_args.service, certs_args.namespace) == (SERVICE, NAMESPACE)
    assert certs.service_names(SERVICE, NAMESPACE) == SERVICE_DNS_NAMES
