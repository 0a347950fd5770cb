"""Each node's cgroup root (the kubelet's `cgroupRoot`, driver cgroupfs), made before its
kubelet starts and removed with everything under it at teardown.

Why cgroupfs and not the systemd driver: no systemd runs here (the machine mounts cgroup v1
controllers under /sys/fs/cgroup and a named `systemd` hierarchy without a manager). Why a root
per node: the nodes share one machine, and each kubelet accounts and evicts its own pods.

On cgroup v1 the kubelet refuses to start until the root exists in every controller it uses;
cpuset needs `cpuset.cpus` and `cpuset.mems` copied from the parent. On a pure cgroup v2 machine
one directory is made (the kubelet enables the controllers it needs below it).

A run killed before its teardown (SIGKILL) leaves its roots behind. Each root holds an empty
child `owner-PID-START` naming the process that owns the cluster (its namespace holder, which
lives as long as the cluster) by pid and start time; a bring-up first removes the roots whose
owner is gone and that hold no process (`sweep`). A root with a process in it is left alone
and named: it is not known to be dead."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")
ROOT_NAME = re.compile(r"layer-locality-[0-9a-f]{10}-[a-z0-9-]+")  # bringup's node roots
OWNER = "owner-"


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


def create(root: str, owner: int | None = None,
           found: list[Path] | None = None) -> list[Path]:
    """Make `root` (e.g. /ll-1a2b-n1) in every hierarchy (`found`: hierarchies() by default),
    marked as `owner`'s (a pid); returns the directories made."""
    made = []
    for hierarchy in hierarchies() if found is None else found:
        path = hierarchy / root.strip("/")
        if path.is_dir():
            made.append(path)
            continue
        path.mkdir()
        made.append(path)
        if (hierarchy / "cpuset.cpus").exists():  # v1 cpuset: an empty set takes no tasks
            for name in ("cpuset.cpus", "cpuset.mems"):
                (path / name).write_text((hierarchy / name).read_text())
    if owner is not None:
        for path in made:
            (path / f"{OWNER}{owner}-{start_time(owner)}").mkdir(exist_ok=True)
    return made


def existing(root: str, found: list[Path] | None = None) -> list[Path]:
    return [h / root.strip("/") for h in (hierarchies() if found is None else found)
            if (h / root.strip("/")).is_dir()]


def start_time(pid: int) -> str:
    """The process's start time (clock ticks since boot; "" once it is gone): with the pid,
    it names one process, never a later one given the same pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[19]


def sweep(found: list[Path] | None = None) -> tuple[list[str], list[str]]:
    """Remove the node roots (any cluster's) whose owner is gone and that hold no process.
    Returns (the roots removed, what was left and why)."""
    found = hierarchies() if found is None else found
    names = {p.name for h in found if h.is_dir() for p in h.iterdir()
             if p.is_dir() and ROOT_NAME.fullmatch(p.name)}
    removed: list[str] = []
    left: list[str] = []
    for name in sorted(names):
        paths = existing(name, found)
        owners = {c.name[len(OWNER):] for p in paths for c in p.iterdir()
                  if c.is_dir() and c.name.startswith(OWNER)}
        if any(_alive(owner) for owner in owners):
            continue
        if any(pids_under(p) for p in paths):
            left.append(f"/{name}: processes in it, its owner gone")
            continue
        problems = remove(name, found=found)
        (left if problems else removed).extend(problems or [f"/{name}"])
    return removed, left


def _alive(owner: str) -> bool:
    pid, _, started = owner.partition("-")
    return pid.isdigit() and bool(started) and start_time(int(pid)) == started


def pids_under(path: Path) -> set[int]:
    pids: set[int] = set()
    for directory, _, files in os.walk(path):
        if "cgroup.procs" in files:
            with contextlib.suppress(OSError, ValueError):
                pids.update(int(p) for p in (Path(directory) / "cgroup.procs").read_text().split())
    return pids


def remove(root: str, timeout: float = 15.0, found: list[Path] | None = None) -> list[str]:
    """Kill every process left under `root` (containers whose shim is gone) and remove the
    directories bottom-up in every hierarchy. Returns what could not be removed."""
    paths = existing(root, found)
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
