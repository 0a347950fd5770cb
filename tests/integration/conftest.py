"""Fixtures for tests that run real parts: certificates, a real TLS server on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.serving.certs import CertificateFiles, generate


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> CertificateFiles:
    """A CA and a serving certificate valid for the Service names and 127.0.0.1 (per module)."""
    return generate("layer-locality", "layer-locality", tmp_path_factory.mktemp("certs"),
                    days=2, extra_sans=["localhost", "127.0.0.1"])


@pytest.fixture
def rotating_tls_files(tmp_path: Path) -> CertificateFiles:
    """Certificates in a directory of their own, free to be replaced by a test."""
    return generate("layer-locality", "layer-locality", tmp_path / "certs", days=2,
                    extra_sans=["127.0.0.1"])


# The pinned helm and the control plane's binaries (kubectl for kustomize), for the Helm
# chart's tests (test_chart_*.py): once per session.
from tests.integration.chart_fixture import helm, kube_bin  # noqa: E402, F401

# The session's real control plane (tests marked `controlplane`): shared by every module.
from tests.integration.cluster_fixture import local_cluster  # noqa: E402, F401

# The stand-in API server, and a live inventory against it (tests that drive the watches).
from tests.integration.live_fixture import apiserver, live  # noqa: E402, F401

# The kustomize manifests rendered once per session (test_manifests_*.py and the modules
# split from it): kubectl, the certificates, the prepared copy of manifests/, both overlays.
from tests.integration.manifests_fixture import (  # noqa: E402, F401
    cert_dir,
    kubectl,
    manifests_copy,
    objects,
    rendered,
)

# A cluster with real nodes (tests marked `realnodes`): one per module that asks for it.
from tests.integration.realnodes_fixture import (  # noqa: E402, F401
    installed_cluster,
    real_cluster,
)

# The real registry with the test images pushed: once per module that asks for it.
from tests.integration.registry_images_fixture import registry_images  # noqa: E402, F401

# Proxies in front of a registry that count requests and can misbehave (made per test).
from tests.integration.registry_proxy_fixture import proxy_factory  # noqa: E402, F401
