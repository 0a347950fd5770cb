"""The namespaces a cluster with real nodes lives in.

One *holder* process (`unshare --net --mount --propagation private sleep infinity`) owns a fresh
network namespace and a private mount namespace: every component of the cluster runs in them
(`nsenter --target HOLDER --net --mount`), so nothing it mounts or configures reaches the host,
and ending the holder (after everything else) frees both. Each node gets a mount namespace of
its own beside it, holding the node's /run and /var/log, so the node's containerd answers at the
default socket path (/run/containerd/containerd.sock) as on a real machine, which is what the
node agent's DaemonSet mounts.

Processes outside (the tests, `cluster exec`) reach the cluster by entering the network
namespace: a command through `nsenter`, Python code on a thread that called setns(2) (a network
namespace is per thread; sockets keep the namespace they were made in)."""

from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from webhook.devcluster.processes import ClusterError, Process, spawn, wait_until

CLONE_NEWNET = 0x40000000
# The cluster's holder in the state file, and the key of its network namespace's id there.
NETNS_HOLDER = "netns"
NETNS_KEY = "netns_id"
T = TypeVar("T")


def start_holder(name: str, log: Path, *, net: bool) -> Process:
    """A `sleep infinity` that owns a new mount namespace (private propagation) and, with
    `net`, a new network namespace (a copy of this process's mount namespace)."""
    argv = ["unshare", "--mount", "--propagation", "private"]
    if net:
        argv.append("--net")
    argv += ["--", "sleep", "infinity"]
    process = spawn(name, argv, log)
    wait_until(process, lambda: _settled(process.pid), 10.0, "in its own namespaces")
    return process


def _settled(pid: int) -> bool:
    """unshare has made the namespaces *and* set their propagation: it execs `sleep` only
    then. (A new mount namespace appears before the propagation is private; a bind mount made
    in that window propagates back where it came from.)"""
    try:
        comm = Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return False
    mine = namespace_id(os.getpid(), "mnt")
    theirs = namespace_id(pid, "mnt")
    return comm == "sleep" and theirs is not None and theirs != mine


def enter(holder: Process, *, net: bool = True, mount: bool = True,
          wd: Path | None = None) -> list[str]:
    """The argv prefix that runs a command in `holder`'s namespaces. Entering a mount
    namespace moves the working directory to its root: `wd` changes to that directory inside
    (`env --chdir`; nsenter's own --wd opens it before entering, leaving the working directory
    on the host's mount, so a rename between it and an absolute path fails with EXDEV)."""
    if not holder.alive():  # its pid may be another process's now: never enter that
        raise ClusterError(f"{holder.name} (pid {holder.pid}) is not running: the cluster's "
                           "namespaces are gone (make cluster-down, then make cluster)")
    argv = ["nsenter", f"--target={holder.pid}"]
    if net:
        argv.append("--net")
    if mount:
        argv.append("--mount")
    argv.append("--")
    if mount and wd is not None:
        argv += ["env", f"--chdir={wd}"]
    return argv


def mount(*args: str, prefix: Sequence[str] = ()) -> None:
    """`mount -n ARGS` (in a holder's namespaces with `prefix`): -n never records the mount
    in /run/mount/utab, which is the host's until the cluster's /run is covered."""
    result = subprocess.run([*prefix, "mount", "-n", *args], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        raise ClusterError(f"mount {' '.join(args)}: {result.stderr.strip()}")


def namespace_id(pid: int, kind: str) -> str | None:
    """The namespace `pid` is in, as the kernel names it (`net:[4026532301]`), or None."""
    try:
        return os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None


def processes_in(namespace: str, kind: str) -> list[int]:
    """Every process with a thread in that namespace (a namespace is per thread: a process's
    other threads may have entered one its main thread has not)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            tasks = os.listdir(f"/proc/{entry}/task")
        except OSError:
            continue
        for task in tasks:
            try:
                if os.readlink(f"/proc/{entry}/task/{task}/ns/{kind}") == namespace:
                    found.append(int(entry))
                    break
            except OSError:
                continue
    return found


def _setns(pid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into the network namespace of pid {pid}: "
                                 f"{os.strerror(errno)}")
    finally:
        os.close(fd)


class NetnsRunner:
    """Runs callables on threads that live in a holder's network namespace: a Kubernetes
    client, urllib or a socket used only through `run` talks to the cluster's addresses.
    Needs CAP_SYS_ADMIN (root)."""

    def __init__(self, holder_pid: int, workers: int = 4) -> None:
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="netns",
                                        initializer=_setns, initargs=(holder_pid,))

    def run(self, fn: Callable[..., T], *args: object, timeout: float | None = None) -> T:
        return self._pool.submit(fn, *args).result(timeout)

    def submit(self, fn: Callable[..., T], *args: object) -> Future[T]:
        return self._pool.submit(fn, *args)

    def close(self) -> None:
        """Cancel what has not started, and wait for the threads to end (each holds the
        namespace while it lives)."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> NetnsRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


