"""How the webhook's pods run, in both rendered overlays: the Deployment (the image's
ENTRYPOINT, ports and probes; every arg a real `layer-locality serve` option whose settings
listen on the serving port, read the TLS files from the Secret mount and serve /metrics on its
own port; hardening, anti-affinity, the ServiceAccount's token), its PodDisruptionBudget, and
the image tag, the package's version."""

from __future__ import annotations

import tomllib
from pathlib import Path

from tests.integration.manifests_fixture import (
    METRICS_PORT,
    REPO,
    SERVICE,
    SERVING_PORT,
    TLS_MOUNT,
    Obj,
    only,
    selector_matches,
)


def container_flags(args: list[str]) -> dict[str, str]:
    flags: dict[str, str] = {}
    for arg in args:
        assert arg.startswith("--") and "=" in arg, f"use --flag=value form: {arg}"
        name, _, value = arg[2:].partition("=")
        flags[name] = value
    return flags


def test_deployment(objects: list[Obj], tmp_path: Path) -> None:
    deployment = only(objects, "Deployment", SERVICE)
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert selector_matches(spec["selector"], spec["template"]["metadata"]["labels"])
    (container,) = pod["containers"]
    assert "command" not in container, "the image ENTRYPOINT (layer-locality serve) must run"

    # Ports and probes.
    assert container["ports"] == [
        {"name": "https", "containerPort": SERVING_PORT, "protocol": "TCP"},
        {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
    ]
    probes = {"readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    for probe, path in probes.items():
        get = container[probe]["httpGet"]
        assert (get["path"], get["scheme"]) == (path, "HTTPS")
        assert get["port"] in (SERVING_PORT, "https")

    # Flags: every arg is a real `serve` option; the resulting settings listen on 8443 and
    # read the TLS files from the Secret mount.
    flags = container_flags(container["args"])
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["tls"]["mountPath"] == TLS_MOUNT and mounts["tls"]["readOnly"]
    assert flags["tls-cert"] == f"{TLS_MOUNT}/tls.crt"
    assert flags["tls-key"] == f"{TLS_MOUNT}/tls.key"
    assert flags["listen"].rpartition(":")[2] == str(SERVING_PORT)
    config_mount = mounts["config"]["mountPath"]
    assert flags["config"].startswith(config_mount + "/")
    config_map = only(objects, "ConfigMap")
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert Path(flags["config"]).name in config_map["data"]
    assert volumes["registry-auth"]["secret"]["optional"] is True
    env = {e["name"]: e["value"] for e in container.get("env", [])}
    assert env["LAYER_LOCALITY_REGISTRY_AUTH"].startswith(
        mounts["registry-auth"]["mountPath"] + "/"
    )

    from webhook import cli, settings_load

    config_file = tmp_path / "config.yaml"
    config_file.write_text(config_map["data"][Path(flags["config"]).name])
    args = [f"--{k}={config_file if k == 'config' else v}" for k, v in flags.items()]
    parsed = vars(cli._parser().parse_args(["serve", *args]))
    parsed.pop("run", None)
    settings = settings_load.load_settings(parsed, env)
    assert settings.listen_address[1] == SERVING_PORT
    # /metrics on its own port, for a token the API server vouches for.
    assert settings.metrics_address == ("0.0.0.0", METRICS_PORT)
    assert settings.metrics_auth == "kubernetes"
    assert settings.client_ca is None  # the API server's certificate: components/client-auth
    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(METRICS_PORT)
    assert (settings.tls_cert, settings.tls_key) == (flags["tls-cert"], flags["tls-key"])
    assert not settings.demo and settings.nodes is None  # live cluster mode

    # Hardening.
    pod_sc, sc = pod["securityContext"], container["securityContext"]
    assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] > 0
    assert pod_sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind])
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert selector_matches(
        anti[0]["podAffinityTerm"]["labelSelector"], spec["template"]["metadata"]["labels"]
    )
    sa = only(objects, "ServiceAccount", pod["serviceAccountName"])
    assert sa["automountServiceAccountToken"] is False
    assert pod["automountServiceAccountToken"] is True

    pdb = only(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert selector_matches(pdb["spec"]["selector"], spec["template"]["metadata"]["labels"])


def test_image_tag_is_the_package_version(objects: list[Obj]) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    (container,) = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"layer-locality:{version}"
