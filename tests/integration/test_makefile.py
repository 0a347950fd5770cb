"""The Makefile's own behaviour: help on a pipe, the Debian package step, demo-data."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.helpers import require_program

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
