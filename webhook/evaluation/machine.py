"""This machine, as the evaluation on real nodes reads it: its capacity (each real node reports
all of it: they share it) and how busy it was over a run (/proc/stat). bench/ reads the same."""

from __future__ import annotations

import os


def machine_cpu_milli() -> int:
    return (os.cpu_count() or 1) * 1000


def machine_memory() -> int:
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 1 << 30


def cpu_times() -> tuple[int, int]:
    """(busy, total) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as stat:
        # user nice system idle iowait irq softirq steal (guest time is in user already)
        fields = [int(x) for x in stat.readline().split()[1:9]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    return sum(fields) - idle, sum(fields)


def busy_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    total = after[1] - before[1]
    return (after[0] - before[0]) / total if total > 0 else 0.0
