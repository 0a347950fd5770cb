"""Each node's cgroup root (the kubelet's `cgroupRoot`, driver cgroupfs), made before its
kubelet starts and removed with everything under it at teardown.

Why cgroupfs and not the systemd driver: no systemd runs here (the machine mounts cgroup v1
controllers under /sys/fs/cgroup and a named `systemd` hierarchy without a manager). Why a root
per node: the nodes share one machine, and each kubelet accounts and evicts its own pods.

On cgroup v1 the kubelet refuses to start until the root exists in every controller it uses;
cpuset needs `cpuset.cpus` and `cpuset.mems` copied from the parent. On a pure cgroup v2 machine
one directory is made (the kubelet enables the controllers it needs below it)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")


def hierarchies(base: Path = CGROUP_FS, mountinfo: str | None = None) -> list[Path]:
    """Mount points of the cgroup hierarchies (v1 controllers, named ones, and the unified v2
    one), from /proc/self/mountinfo."""
    text = mountinfo if mountinfo is not None else Path("/proc/self/mountinfo").read_text()
    found = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fstype = right.split(" ", 1)[0]
        if fstype in ("cgroup", "cgroup2"):
            mount_point = Path(left.split()[4])
            if mount_point == base or base in mount_point.parents:
                found.append(mount_point)
    return sorted(found)


def create(root: str) -> list[Path]:
    """Make `root` (e.g. /ll-1a2b-n1) in every hierarchy; returns the directories made."""
    made = []
    for hierarchy in hierarchies():
        path = hierarchy / root.strip("/")
        if path.is_dir():
            made.append(path)
            continue
        path.mkdir()
        made.append(path)
        if (hierarchy / "cpuset.cpus").exists():  # v1 cpuset: an empty set takes no tasks
            for name in ("cpuset.cpus", "cpuset.mems"):
                (path / name).write_text((hierarchy / name).read_text())
    return made


def existing(root: str) -> list[Path]:
    return [h / root.strip("/") for h in hierarchies() if (h / root.strip("/")).is_dir()]


def pids_under(path: Path) -> set[int]:
    pids: set[int] = set()
    for directory, _, files in os.walk(path):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in (Path(directory) / "cgroup.procs").read_text().split())
    return pids


def remove(root: str, timeout: float = 15.0) -> list[str]:
    """Kill every process left under `root` (containers whose shim is gone) and remove the
    directories bottom-up in every hierarchy. Returns what could not be removed."""
    paths = existing(root)
    deadline = time.monotonic() + timeout
    while True:
        pids = set().union(*(pids_under(p) for p in paths)) if paths else set()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if not pids or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    left = []
    for path in paths:
        for directory, _, _ in sorted(os.walk(path), key=lambda w: -len(Path(w[0]).parts)):
            try:
                Path(directory).rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                left.append(f"{directory}: {exc.strerror}")
    return left
