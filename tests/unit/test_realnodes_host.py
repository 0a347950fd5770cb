"""What the real nodes read of the host, as pure functions: the cgroup hierarchies found in a
mountinfo text (realnodes/cgroups.py — the text is given, /proc is never read) and the table of
kubelet sysctls the cluster's mount namespace covers (realnodes/sysctls.py — nothing is
mounted or read here)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from webhook.devcluster.realnodes.cgroups import hierarchies
from webhook.devcluster.realnodes.sysctls import EXPECTED

BASE = Path("/sys/fs/cgroup")
_OPTS = "rw,nosuid,nodev,noexec,relatime"

# A container on a cgroup v1 host, as /proc/self/mountinfo shows it (fields: id, parent id,
# major:minor, root, mount point, options, optional fields, "-", fstype, source, super options).
V1_MOUNTINFO = f"""\
612 540 0:53 / / rw,relatime master:300 - overlay overlay rw,lowerdir=/l,upperdir=/u,workdir=/w
613 612 0:56 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
614 612 0:57 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755
615 614 0:58 / /dev/pts rw,nosuid,noexec,relatime - devpts devpts rw,gid=5,mode=620,ptmxmode=666
616 612 0:59 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro
617 616 0:60 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - tmpfs tmpfs rw,mode=755
618 617 0:30 / /sys/fs/cgroup/systemd {_OPTS} master:11 - cgroup cgroup rw,xattr,name=systemd
619 617 0:33 / /sys/fs/cgroup/cpu,cpuacct {_OPTS} master:16 - cgroup cgroup rw,cpu,cpuacct
620 617 0:34 / /sys/fs/cgroup/cpuset {_OPTS} master:17 - cgroup cgroup rw,cpuset
621 617 0:35 / /sys/fs/cgroup/memory {_OPTS} master:18 - cgroup cgroup rw,memory
622 617 0:36 / /sys/fs/cgroup/pids {_OPTS} master:19 - cgroup cgroup rw,pids
623 617 0:37 / /sys/fs/cgroup/blkio {_OPTS} master:20 - cgroup cgroup rw,blkio
624 617 0:38 / /sys/fs/cgroup/devices {_OPTS} master:21 - cgroup cgroup rw,devices
625 617 0:39 / /sys/fs/cgroup/freezer {_OPTS} master:22 - cgroup cgroup rw,freezer
626 617 0:40 / /sys/fs/cgroup/net_cls,net_prio {_OPTS} master:23 - cgroup cgroup rw,net_cls,net_prio
627 617 0:41 / /sys/fs/cgroup/perf_event {_OPTS} master:24 - cgroup cgroup rw,perf_event
628 617 0:42 / /sys/fs/cgroup/hugetlb {_OPTS} master:25 - cgroup cgroup rw,hugetlb
629 617 0:43 / /sys/fs/cgroup/rdma {_OPTS} master:26 - cgroup cgroup rw,rdma
630 617 0:29 / /sys/fs/cgroup/unified {_OPTS} shared:10 master:9 - cgroup2 cgroup2 rw,nsdelegate
631 616 0:7 / /sys/kernel/security rw,nosuid,nodev,noexec,relatime - securityfs securityfs rw
632 612 8:1 /var/lib/docker/containers/c/hosts /etc/hosts rw,relatime - ext4 /dev/sda1 rw
633 612 0:61 / /run rw,nosuid,nodev - tmpfs tmpfs rw,size=1638400k,mode=755
634 612 0:35 / /mnt/elsewhere/memory {_OPTS} - cgroup cgroup rw,memory
635 612 0:29 / /sys/fs/cgroup-v2 {_OPTS} - cgroup2 cgroup2 rw
636 612 0:62 / /sys/fs/cgroupfs-notes rw,relatime - tmpfs tmpfs rw
"""

V1_UNDER_BASE = sorted(BASE / name for name in (
    "systemd", "cpu,cpuacct", "cpuset", "memory", "pids", "blkio", "devices", "freezer",
    "net_cls,net_prio", "perf_event", "hugetlb", "rdma", "unified"))

V2_MOUNTINFO = f"""\
24 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
25 24 0:23 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
26 24 0:24 / /sys rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
27 26 0:6 / /sys/kernel/security {_OPTS} shared:3 - securityfs securityfs rw
35 26 0:30 / /sys/fs/cgroup {_OPTS} shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
36 26 0:31 / /sys/fs/pstore {_OPTS} shared:10 - pstore pstore rw
37 26 0:32 / /sys/fs/bpf rw,nosuid,nodev,noexec,relatime shared:11 - bpf bpf rw,mode=700
48 24 0:45 / /run rw,nosuid,nodev,noexec,relatime shared:13 - tmpfs tmpfs rw,size=3266080k
"""


def test_v1_every_hierarchy_under_the_base_and_nothing_else() -> None:
    found = hierarchies(BASE, mountinfo=V1_MOUNTINFO)
    assert found == V1_UNDER_BASE
    assert found == sorted(found)


def test_v1_the_tmpfs_holding_the_hierarchies_is_not_one() -> None:
    assert BASE not in hierarchies(BASE, mountinfo=V1_MOUNTINFO)


def test_a_pure_cgroup2_host_has_one_hierarchy_at_the_base() -> None:
    assert hierarchies(BASE, mountinfo=V2_MOUNTINFO) == [BASE]


def test_another_base_keeps_only_what_is_below_it() -> None:
    assert hierarchies(Path("/mnt/elsewhere"), mountinfo=V1_MOUNTINFO) == [
        Path("/mnt/elsewhere/memory")]
    assert hierarchies(BASE / "unified", mountinfo=V1_MOUNTINFO) == [BASE / "unified"]
    assert hierarchies(Path("/nowhere"), mountinfo=V1_MOUNTINFO) == []


def test_order_of_the_lines_does_not_matter() -> None:
    lines = V1_MOUNTINFO.splitlines()
    assert hierarchies(BASE, mountinfo="\n".join(reversed(lines))) == V1_UNDER_BASE


def test_no_mounts_no_hierarchies() -> None:
    assert hierarchies(BASE, mountinfo="") == []


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_sysctl_is_a_relative_path_under_proc_sys(name: str) -> None:
    path = PurePosixPath(name)
    assert not path.is_absolute()
    assert ".." not in path.parts and "." not in name.split("/")
    assert len(path.parts) >= 2 and path.parts[0] in ("vm", "kernel", "net", "fs")
    assert "" not in name.split("/") and " " not in name


@pytest.mark.parametrize(("name", "value"), sorted(EXPECTED.items()))
def test_each_sysctl_value_is_an_integer_as_text(name: str, value: str) -> None:
    assert str(int(value)) == value, name


def test_the_sysctls_the_kubelet_sets_are_covered() -> None:
    # named in realnodes/kubelet.py: what `protectKernelDefaults: false` makes it write
    assert {"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"} <= set(EXPECTED)
