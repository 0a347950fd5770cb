"""Statistics, tables and the JSON results files."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import platform
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypedDict

import orjson

from webhook.sim.results import nearest_rank

RESULTS = Path(__file__).resolve().parent / "results"
REPO = Path(__file__).resolve().parent.parent  # the checkout: benchmarks start children here


percentile = nearest_rank  # of already sorted values, q in 0..100


def summary_ms(samples_s: Sequence[float]) -> dict[str, float]:
    values = sorted(samples_s)
    n = len(values)
    return {
        "n": n,
        "mean_ms": 1000 * sum(values) / n if n else float("nan"),
        "p50_ms": 1000 * percentile(values, 50),
        "p90_ms": 1000 * percentile(values, 90),
        "p99_ms": 1000 * percentile(values, 99),
        "p999_ms": 1000 * percentile(values, 99.9),
        "max_ms": 1000 * values[-1] if n else float("nan"),
    }


def status_kib(pid: int | str = "self", field: str = "VmRSS") -> int:
    """A size field of /proc/PID/status (VmRSS, VmHWM...), KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field}")


def rss_kib(pid: int | str = "self") -> int:
    """VmRSS of a process, KiB (Linux /proc)."""
    return status_kib(pid)


@contextlib.asynccontextmanager
async def rss_samples(pid: int, every: float) -> AsyncIterator[list[int]]:
    """`pid`'s RSS in KiB, read every `every` seconds while the block runs (and once more as it
    ends): the list grows meanwhile; its max is the peak."""
    samples: list[int] = []
    sampling = True

    async def sample() -> None:
        while sampling:
            samples.append(rss_kib(pid))
            await asyncio.sleep(every)

    sampler = asyncio.create_task(sample())
    try:
        yield samples
    finally:
        sampling = False
        await sampler


def mb(kib: int) -> float:
    return kib / 1024


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (/proc/PID/stat), seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpus": os.cpu_count(), "cpu_model": model, "python": sys.version.split()[0],
            "platform": platform.platform()}


def source() -> dict[str, Any]:
    """The code measured: commit and whether the tree had uncommitted changes."""
    root = REPO

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  timeout=10, check=False)
        except OSError:
            return ""
        return done.stdout.strip()

    return {"commit": git("rev-parse", "--short", "HEAD") or "unknown",
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cells = [[_fmt(c) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[k]) for r in cells)) if cells else len(h)
              for k, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(out)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        if value != value:
            return "-"
        return f"{value:.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


class Target(TypedDict):
    """One target as a benchmark judged it (printed together by `python -m bench`)."""

    target: str
    measured: str
    met: bool
    why: str


def target(text: str, measured: str, met: bool, why: str = "") -> Target:
    """A target row; `why` says, when missed, why and what meeting it would take."""
    return {"target": text, "measured": measured, "met": met, "why": "" if met else why}


def targets_table(rows: Sequence[tuple[str, Target]]) -> str:
    """All benchmarks' targets: which benchmark, the target, the value measured, met or not."""
    lines = [table(["benchmark", "target", "measured", "met"],
                   [[name, t["target"], t["measured"], "met" if t["met"] else "MISSED"]
                    for name, t in rows])]
    lines += [f"  missed: {t['target']}: {t['why']}" for _, t in rows if not t["met"] and t["why"]]
    return "\n".join(lines)


def write(name: str, data: Mapping[str, Any]) -> Path:
    RESULTS.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": name, "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
           "machine": machine(), "source": source(), **data}
    path = RESULTS / f"{name}.json"
    path.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    return path
