"""Child processes of a benchmark: start, wait for a line or a URL, stop by pid."""

from __future__ import annotations

import contextlib
import os
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def python(*args: str) -> list[str]:
    return [sys.executable, *args]


def pinning() -> tuple[frozenset[int], frozenset[int]] | None:
    """(servers' CPUs, load generator's CPUs): the last CPU this process may use for the
    servers under test, the others for the client, so the two never compete for a core.
    None on a single CPU (nothing to separate)."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    return frozenset(cpus[-1:]), frozenset(cpus[:-1])


def pinned_to(cpus: frozenset[int] | None) -> Callable[[], None] | None:
    """A preexec_fn that pins the child (before exec, so all its threads) to `cpus`."""
    if not cpus:
        return None
    chosen = set(cpus)
    return lambda: os.sched_setaffinity(0, chosen)


@contextlib.contextmanager
def started(argv: Sequence[str], log: Path, stdout_pipe: bool = False,
            env: dict[str, str] | None = None, cpus: frozenset[int] | None = None,
            ) -> Iterator[subprocess.Popen[bytes]]:
    """A child process (stderr to `log`, pinned to `cpus` if given); terminated (then killed)
    by its pid on exit."""
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            list(argv), cwd=REPO, stderr=err,
            stdout=subprocess.PIPE if stdout_pipe else err,
            stdin=subprocess.DEVNULL, env={**os.environ, **(env or {})},
            preexec_fn=pinned_to(cpus),
        )
    try:
        yield proc
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def wait_https(url: str, ca: Path, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    context = ssl.create_default_context(cafile=str(ca))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, context=context, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready within {timeout}s")


def read_line(proc: subprocess.Popen[bytes], timeout: float = 300) -> str:
    """The next stdout line of `proc` (blocking; the child prints it when ready)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"child exited ({proc.poll()}) without output")
    if time.monotonic() > deadline:
        raise TimeoutError("child too slow")
    return line.decode().strip()
