"""The Helm chart's certificates and the webhook's address: the self-signed certificate and its
bundle, an operator's Secret and its CA, a CA bundle with the chart's own CA refused, and
webhook.url (the webhook outside the cluster).
(Split from test_chart.py: helm, rendering and the modes are in chart_fixture.py.)"""

from __future__ import annotations

import base64
from pathlib import Path

from cryptography import x509

from tests.integration.chart_fixture import (
    CHART,
    NAMESPACE,
    RELEASE,
    kinds,
    only,
    run_helm,
    template,
    template_error,
)

# ---- certificates ---------------------------------------------------------------------------

def test_self_signed_certificate_serves_the_service_and_is_the_bundle(helm: Path) -> None:
    objects = template(helm)
    tls = only(objects, "Secret", "layer-locality-tls")
    ca_secret = only(objects, "Secret", "layer-locality-ca")
    cert = x509.load_pem_x509_certificate(base64.b64decode(tls["data"]["tls.crt"]))
    ca = x509.load_pem_x509_certificate(base64.b64decode(tls["data"]["ca.crt"]))
    assert base64.b64decode(ca_secret["data"]["tls.crt"]) == base64.b64decode(
        tls["data"]["ca.crt"])
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) >= {
        "layer-locality.layer-locality.svc", "layer-locality.layer-locality.svc.cluster.local"}
    cert.verify_directly_issued_by(ca)
    for hook in only(objects, "MutatingWebhookConfiguration")["webhooks"]:
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == base64.b64decode(
            tls["data"]["ca.crt"])
    # The pods mount the serving Secret only: the CA's key is not in it.
    deployment = only(objects, "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "layer-locality-tls"
    assert set(tls["data"]) == {"tls.crt", "tls.key", "ca.crt"}


def test_an_operators_secret_needs_its_ca(helm: Path, tmp_path: Path) -> None:
    assert "webhook.caBundle" in template_error(
        helm, "certificates.mode=secret", "certificates.secretName=my-tls")
    ca = tmp_path / "ca.crt"
    ca.write_text(_a_ca_pem(tmp_path))
    objects = template(helm, "certificates.mode=secret", "certificates.secretName=my-tls",
                       files=[f"webhook.caBundle={ca}"])
    assert "Secret" not in kinds(objects)
    volumes = only(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "my-tls"}} in volumes
    for hook in only(objects, "MutatingWebhookConfiguration")["webhooks"]:
        assert base64.b64decode(hook["clientConfig"]["caBundle"]).decode() == ca.read_text()


def _a_ca_pem(directory: Path) -> str:
    from webhook.serving.certs import generate

    files = generate("layer-locality", "layer-locality", directory / "certs", days=1)
    return files.ca_cert.read_text()


def test_a_ca_bundle_with_the_charts_own_ca_is_refused(helm: Path, tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text(_a_ca_pem(tmp_path))
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE,
            "--set-file", f"webhook.caBundle={ca}"]
    result = run_helm(helm, args, check=False)
    assert result.returncode != 0 and "self-signed" in result.stderr


# ---- the webhook outside the cluster (webhook.url) -----------------------------------------

def test_url_mode_points_both_webhooks_at_the_url(helm: Path, tmp_path: Path) -> None:
    assert "webhook.caBundle is required" in template_error(
        helm, "webhook.url=https://127.0.0.1:8443")
    ca = tmp_path / "ca.crt"
    ca.write_text(_a_ca_pem(tmp_path))
    objects = template(helm, "webhook.url=https://127.0.0.1:8443/",
                       files=[f"webhook.caBundle={ca}"])
    hooks = only(objects, "MutatingWebhookConfiguration")["webhooks"]
    assert [h["clientConfig"]["url"] for h in hooks] == [
        "https://127.0.0.1:8443/mutate", "https://127.0.0.1:8443/mutate/holdout-exempt"]
    assert all("service" not in h["clientConfig"] for h in hooks)
    # Nothing in the cluster would serve: no Deployment, Service, certificate or policy.
    assert not kinds(objects) & {"Deployment", "Service", "Secret", "PodDisruptionBudget",
                                 "NetworkPolicy"}
    assert {"ServiceAccount", "ClusterRole", "ConfigMap", "CustomResourceDefinition"} <= kinds(
        objects)
