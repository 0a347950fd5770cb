"""Keep the kubelet off the host's sysctls. At start it sets the kernel values it expects
(vm.overcommit_memory, kernel.panic, kernel.panic_on_oops, ...) — machine-wide settings, not
per network namespace. Inside the cluster's private mount namespace each of those /proc/sys
entries is covered by a bind-mounted file that already holds the expected value: the kubelet
reads what it wants, and a write lands in the file. The host's values never change (the tests
read them before and after)."""

from __future__ import annotations

from pathlib import Path

from webhook.devcluster.realnodes.namespaces import mount

# /proc/sys entry -> the value kubelet 1.37 wants (pkg/kubelet/cm/container_manager_linux.go,
# setupKernelTunables; kernel/keys/* from the same list).
EXPECTED = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}
PROC_SYS = Path("/proc/sys")


def host_values() -> dict[str, str]:
    """The values as this process's mount namespace shows them."""
    return {name: (PROC_SYS / name).read_text().strip() for name in EXPECTED}


def cover(directory: Path) -> None:
    """Bind-mount a file holding each expected value over its /proc/sys entry. Must run in the
    cluster's mount namespace (never the host's: the caller checks)."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, value in EXPECTED.items():
        source = directory / name.replace("/", ".")
        source.write_text(value + "\n")
        mount("--bind", str(source), str(PROC_SYS / name))
